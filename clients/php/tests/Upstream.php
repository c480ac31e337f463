<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use PHPUnit\Framework\Assert;

/** A local HTTP upstream (`php -S 127.0.0.1:PORT fixtures/upstream.php`) that counts what it serves. */
final class Upstream
{
    public readonly string $url;
    private readonly string $log;
    /** @var resource */
    private $proc;

    public function __construct()
    {
        $this->log = tempnam(sys_get_temp_dir(), 'fbup');
        $port = self::freePort();
        $this->url = "http://127.0.0.1:$port";
        $proc = proc_open(
            [PHP_BINARY, '-S', "127.0.0.1:$port", __DIR__ . '/fixtures/upstream.php'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']],
            $pipes,
            null,
            ['UPSTREAM_LOG' => $this->log],
        );
        Assert::assertIsResource($proc);
        $this->proc = $proc;
        Daemon::eventually('the upstream to listen', function () use ($port) {
            $s = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 5);
            if ($s === false) {
                return false;
            }
            fclose($s);
            return true;
        });
    }

    /** How many requests it has served. */
    public function served(): int
    {
        $text = (string) file_get_contents($this->log);
        return $text === '' ? 0 : substr_count($text, "\n");
    }

    public function stop(): void
    {
        proc_terminate($this->proc);
        proc_close($this->proc);
        @unlink($this->log);
    }

    /** A loopback port nothing listens on (a moment ago). */
    public static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0');
        $name = stream_socket_get_name($s, false);
        fclose($s);
        return (int) substr($name, strrpos($name, ':') + 1);
    }
}
