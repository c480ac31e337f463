<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * What a process knows of one sidecar, shared by every Client of the same socket (so by
 * every `new Breaker(...)` of a request): whether it is backing off after the sidecar
 * could not decide, the refusals still within their Retry-After, and the counters.
 *
 * @internal
 */
final class Sidecar
{
    /** @var array<string, self> by socket, or base URL without one */
    private static array $known = [];

    /** hrtime(true) until which nothing asks the sidecar. */
    public int $downUntil = 0;
    /** Why it could not decide, until it answers again. */
    public ?SidecarError $unreachable = null;
    /** @var array<string, array{0: int, 1: CircuitOpen}> breaker => [when it came (hrtime), the refusal] */
    public array $refusals = [];
    public int $connects = 0;
    public int $requests = 0;
    public int $failedOpen = 0;
    public int $refusedLocally = 0;

    public static function of(string $endpoint): self
    {
        return self::$known[$endpoint] ??= new self();
    }

    public function backingOff(): bool
    {
        return $this->downUntil > 0 && hrtime(true) < $this->downUntil;
    }
}
