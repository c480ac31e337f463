<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Psr\Log\AbstractLogger;

/** A PSR-3 logger that keeps what it is told (Debian's php-psr-log). */
final class MemoryLogger extends AbstractLogger
{
    /** @var list<array{0: string, 1: string}> level, message */
    public array $records = [];

    public function log($level, $message, array $context = []): void
    {
        $this->records[] = [(string) $level, (string) $message];
    }

    /** @return list<string> */
    public function messages(string $level): array
    {
        return array_values(array_map(fn ($r) => $r[1], array_filter($this->records, fn ($r) => $r[0] === $level)));
    }
}
