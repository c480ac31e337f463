<?php

declare(strict_types=1);

namespace Fusebox\Tests;

/**
 * A sidecar that answers what fuseboxd never would (fixtures/lying-sidecar.php, in a
 * process of its own, since curl blocks this one): each request gets the bytes given
 * for its kind ("acquire", "release", "describe"); null closes the connection unanswered.
 */
final class LyingSidecar
{
    public readonly string $socket;
    private readonly string $base;
    private readonly string $log;
    /** @var resource */
    private $proc;

    /** @param array<string, string|null> $answers */
    public function __construct(array $answers)
    {
        $this->base = sys_get_temp_dir() . '/fblie' . bin2hex(random_bytes(4));
        mkdir($this->base);
        $this->socket = $this->base . '/lying.sock';
        $this->log = $this->base . '/asked';
        $spec = $this->base . '/answers.json';
        file_put_contents($spec, json_encode(array_map(fn (?string $a) => $a === null ? null : base64_encode($a), $answers), JSON_THROW_ON_ERROR));
        $proc = proc_open([PHP_BINARY, __DIR__ . '/fixtures/lying-sidecar.php', $this->socket, $spec, $this->log], [0 => ['file', '/dev/null', 'r'], 1 => STDOUT, 2 => STDERR], $pipes);
        \PHPUnit\Framework\Assert::assertIsResource($proc);
        $this->proc = $proc;
        // The file exists once bound, a moment before it listens: wait for a connection.
        Daemon::eventually('the lying sidecar to listen', function () {
            $s = @stream_socket_client('unix://' . $this->socket, $errno, $errstr, 5);
            if ($s === false) {
                return false;
            }
            fclose($s);
            return true;
        });
    }

    /** @return list<string> the kinds of request it was asked, in order */
    public function asked(): array
    {
        $text = @file_get_contents($this->log);
        return $text === false || $text === '' ? [] : explode("\n", trim($text));
    }

    public function stop(): void
    {
        proc_terminate($this->proc);
        proc_close($this->proc);
        Daemon::removeTree($this->base);
    }

    public static function answer(string $status, string $body = '', string $headers = ''): string
    {
        return "HTTP/1.1 $status\r\nContent-Type: application/json\r\n{$headers}Content-Length: " . strlen($body) . "\r\n\r\n" . $body;
    }
}
