<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Fusebox\Client;
use PHPUnit\Framework\Assert;

/**
 * A real fuseboxd --config-dir for the tests: the binary FUSEBOXD names, else one built
 * here with go.
 */
final class Daemon
{
    /** A generous bound for what a loaded machine may take; the tests wait for the thing itself. */
    public const PATIENCE_S = 30.0;

    private static ?string $built = null;

    public readonly string $socket;
    public readonly string $config;
    private readonly string $base;
    /** @var resource */
    private $proc;
    private readonly int $pid;

    public function __construct()
    {
        $this->base = sys_get_temp_dir() . '/fbphp' . bin2hex(random_bytes(4));
        mkdir($this->base);
        $this->socket = $this->base . '/fusebox.sock';
        $this->config = $this->base . '/config';
        mkdir($this->config);
        $cmd = [self::binary(), 'serve', '--socket', $this->socket, '--config-dir', $this->config];
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        Assert::assertIsResource($proc, 'starting fuseboxd');
        $this->proc = $proc;
        $this->pid = proc_get_status($proc)['pid'];
        self::eventually('fuseboxd to be ready', fn () => self::status($this->socket, '/readyz') === 200 || !proc_get_status($this->proc)['running']);
        Assert::assertTrue(proc_get_status($this->proc)['running'], 'fuseboxd exited before it was ready');
    }

    /** A client that waits far longer than an application's would, so that a busy machine never makes a healthy sidecar look hung. */
    public function patientClient(int $maxRetryAfterMs = 1000): Client
    {
        return new Client($this->socket, timeoutMs: 10_000, connectTimeoutMs: 10_000, maxRetryAfterMs: $maxRetryAfterMs);
    }

    /** Publishes a breaker as the operator would, and waits until fuseboxd serves it. */
    public function publish(string $name, array $fields = []): void
    {
        $doc = array_merge([
            'name' => $name, 'generation' => 1, 'openTimeout' => '1s', 'window' => '10s',
            'failureRatio' => 0.5, 'minimumThroughput' => 4, 'successThreshold' => 1,
            'halfOpenPermittedCalls' => 1, 'mode' => 'Enforce', 'scope' => 'Pod',
        ], $fields);
        $tmp = $this->config . '/.tmp-' . $name;
        file_put_contents($tmp, json_encode($doc, JSON_THROW_ON_ERROR));
        rename($tmp, $this->config . '/' . $name . '.json');
        $client = $this->patientClient();
        self::eventually("fuseboxd to load $name", fn () => $client->describe($name)['generation'] === $doc['generation']);
    }

    /** SIGSTOP, then waits until every thread has stopped, so that no request can still be served. */
    public function pause(): void
    {
        proc_terminate($this->proc, 19);
        self::eventually('fuseboxd to stop', fn () => $this->stopped());
    }

    public function resume(): void
    {
        proc_terminate($this->proc, 18);
    }

    public function stop(): void
    {
        $this->resume();
        proc_terminate($this->proc, 15);
        proc_close($this->proc);
        self::removeTree($this->base);
    }

    public static function removeTree(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS), \RecursiveIteratorIterator::CHILD_FIRST);
        foreach ($files as $f) {
            $f->isDir() && !$f->isLink() ? rmdir($f->getPathname()) : unlink($f->getPathname());
        }
        rmdir($dir);
    }

    private function stopped(): bool
    {
        foreach (glob("/proc/{$this->pid}/task/*/stat") ?: [] as $stat) {
            $text = @file_get_contents($stat);
            if ($text !== false && !in_array($text[strrpos($text, ')') + 2], ['T', 't'], true)) {
                return false;
            }
        }
        return true;
    }

    public static function eventually(string $what, callable $cond): void
    {
        $deadline = microtime(true) + self::PATIENCE_S;
        while (!$cond()) {
            if (microtime(true) > $deadline) {
                Assert::fail(sprintf('timed out after %.0fs waiting for %s', self::PATIENCE_S, $what));
            }
            usleep(10_000);
        }
    }

    private static function binary(): string
    {
        $given = getenv('FUSEBOXD');
        if ($given !== false && $given !== '') {
            return $given;
        }
        if (self::$built === null) {
            $out = sys_get_temp_dir() . '/fbphp-fuseboxd-' . getmypid();
            exec('cd ' . escapeshellarg(__DIR__ . '/../../..') . ' && go build -o ' . escapeshellarg($out) . ' ./cmd/fuseboxd 2>&1', $lines, $code);
            Assert::assertSame(0, $code, "FUSEBOXD is not set and building fuseboxd with go failed:\n" . implode("\n", $lines));
            self::$built = $out;
        }
        return self::$built;
    }

    private static function status(string $socket, string $target): int
    {
        $s = @stream_socket_client('unix://' . $socket, $errno, $errstr, 5);
        if ($s === false) {
            return 0;
        }
        stream_set_timeout($s, 5);
        fwrite($s, "GET $target HTTP/1.1\r\nHost: fuseboxd\r\nConnection: close\r\n\r\n");
        $head = (string) fread($s, 64);
        fclose($s);
        return preg_match('~^HTTP/1\.1 (\d{3})~', $head, $m) === 1 ? (int) $m[1] : 0;
    }
}
