<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Fusebox\Breaker;
use Fusebox\CircuitOpen;
use Fusebox\Client;
use Fusebox\Sidecar;
use Fusebox\SidecarError;
use Fusebox\State;
use Fusebox\Unreachable;
use PHPUnit\Framework\TestCase;

/**
 * The dead-sidecar rule (docs/design.md §8): after a refused or timed-out connection the
 * client fails open at once, without touching the socket, for its back-off. What that
 * costs per call is a benchmark's figure (docs/benchmarks.md); here the behaviour is
 * asserted: the calls run, and no request is attempted.
 */
final class SidecarDownTest extends TestCase
{
    /** Long enough that nothing in a test outlives it: the test sees the back-off, not its end. */
    private const LONG_BACKOFF_MS = 600_000;
    // A live daemon answers well within it on a loaded machine; a hung one costs it once.
    private const HUNG_TIMEOUT_MS = 1000;

    private string $dir;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/fbphp-down' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        Daemon::removeTree($this->dir);
    }

    private static function logger(): MemoryLogger
    {
        if (!interface_exists(\Psr\Log\LoggerInterface::class)) {
            $msg = 'psr/log not installed: apt-get install php-psr-log';
            getenv('CI') ? self::fail($msg) : self::markTestSkipped($msg);
        }
        return new MemoryLogger();
    }

    public function testAMissingSocketFailsOpenWithoutTouchingItAndSaysSoOnce(): void
    {
        $missing = $this->dir . '/none.sock';
        $logger = self::logger();
        $client = new Client($missing, backoffMs: self::LONG_BACKOFF_MS, logger: $logger);
        $breaker = $client->breaker('payments-api');
        self::assertSame('called', $breaker->call(open: fn () => 'fallback', close: fn () => 'called'));
        self::assertSame(1, $client->stats()['requests']);
        for ($i = 0; $i < 1000; $i++) {
            self::assertSame($i, $breaker->call(open: fn () => 'fallback', close: fn () => $i));
        }
        $stats = $client->stats();
        self::assertSame(1, $stats['requests'], 'a call tried the socket while backing off');
        self::assertSame(1001, $stats['failedOpen']);
        self::assertInstanceOf(SidecarError::class, $client->unreachable());
        self::assertStringContainsString($missing, $client->unreachable()->getMessage());
        self::assertTrue($client->unreachable()->isUnavailable());
        $warnings = $logger->messages('warning');
        self::assertCount(1, $warnings, 'the fail-open is logged once, not once a call');
        self::assertStringContainsString($missing, $warnings[0]);
        self::assertSame(State::Closed, $breaker->state());
        $this->expectException(SidecarError::class);
        $client->describe('payments-api');
    }

    public function testEveryClientOfTheSocketSharesTheBackOff(): void
    {
        // As a request that makes `new Breaker(...)` each time would.
        $missing = $this->dir . '/none.sock';
        $first = new Breaker('payments-api', new Client($missing, backoffMs: self::LONG_BACKOFF_MS, logger: self::logger()));
        self::assertSame(1, $first->call(null, fn () => 1));
        for ($i = 0; $i < 100; $i++) {
            $client = new Client($missing, backoffMs: self::LONG_BACKOFF_MS);
            self::assertSame($i, (new Breaker('payments-api', $client))->call(null, fn () => $i));
        }
        self::assertSame(1, $client->stats()['requests']);
        self::assertNotNull($client->unreachable());
    }

    public function testWithoutALoggerTheFailOpenGoesToErrorLog(): void
    {
        $log = $this->dir . '/php-errors.log';
        $was = ini_set('error_log', $log);
        try {
            $client = new Client($this->dir . '/elsewhere.sock', backoffMs: self::LONG_BACKOFF_MS);
            self::assertSame(1, $client->breaker('payments-api')->call(null, fn () => 1));
        } finally {
            ini_set('error_log', (string) $was);
        }
        self::assertStringContainsString('sidecar unreachable at ' . $this->dir . '/elsewhere.sock', (string) file_get_contents($log));
    }

    public function testARefusedConnectionFailsOpen(): void
    {
        if (!function_exists('socket_create')) {
            self::markTestSkipped('needs the sockets extension to leave a socket file nobody listens on');
        }
        $path = $this->dir . '/refusing.sock';
        $s = socket_create(AF_UNIX, SOCK_STREAM, 0);
        socket_bind($s, $path); // bound, never listening: connecting is refused
        try {
            $client = new Client($path, backoffMs: self::LONG_BACKOFF_MS, logger: self::logger());
            $breaker = $client->breaker('payments-api');
            for ($i = 0; $i < 100; $i++) {
                self::assertSame($i, $breaker->call(null, fn () => $i));
            }
            self::assertSame(1, $client->stats()['requests']);
            self::assertMatchesRegularExpression('/refused|Couldn\'t connect/i', $client->unreachable()->getMessage());
        } finally {
            socket_close($s);
        }
    }

    public function testFailClosedShortCircuitsWhileUnreachable(): void
    {
        $client = new Client($this->dir . '/none.sock', backoffMs: self::LONG_BACKOFF_MS, logger: self::logger());
        $strict = $client->breaker('payments-api', Unreachable::FailClosed);
        $ran = false;
        $cause = $strict->call(open: fn ($c) => $c, close: function () use (&$ran) {
            $ran = true;
        });
        self::assertInstanceOf(CircuitOpen::class, $cause);
        self::assertSame('unreachable', $cause->reason);
        self::assertFalse($ran);
        self::assertSame(State::Open, $strict->state());
        self::assertSame(0, $client->stats()['failedOpen']);
    }

    public function testAHungSidecarCostsOneTimeoutThenNothing(): void
    {
        $daemon = new Daemon();
        try {
            $daemon->publish('php-hung');
            $logger = self::logger();
            $client = new Client($daemon->socket, timeoutMs: self::HUNG_TIMEOUT_MS, backoffMs: self::LONG_BACKOFF_MS, logger: $logger);
            $breaker = $client->breaker('php-hung');
            self::assertSame('warm', $breaker->call(null, fn () => 'warm'));
            $daemon->pause();
            try {
                self::assertSame('first', $breaker->call(open: fn () => 'fallback', close: fn () => 'first'));
                $seen = $client->stats();
                for ($i = 0; $i < 200; $i++) {
                    self::assertSame($i, $breaker->call(open: fn () => 'fallback', close: fn () => $i));
                }
                $now = $client->stats();
                self::assertSame([$seen['requests'], $seen['connects']], [$now['requests'], $now['connects']], 'a call touched the hung sidecar');
                self::assertSame($seen['failedOpen'] + 200, $now['failedOpen']);
                self::assertStringContainsString('timed out', $client->unreachable()->getMessage());
                self::assertCount(1, $logger->messages('warning'));
            } finally {
                $daemon->resume();
            }
        } finally {
            $daemon->stop();
        }
    }

    public function testAfterTheBackOffTheSidecarIsAskedAgain(): void
    {
        $daemon = new Daemon();
        try {
            $daemon->publish('php-recovers');
            $logger = self::logger();
            $client = new Client($daemon->socket, timeoutMs: self::HUNG_TIMEOUT_MS, backoffMs: 50, logger: $logger);
            $breaker = $client->breaker('php-recovers');
            $daemon->pause();
            try {
                self::assertSame('unprotected', $breaker->call(null, fn () => 'unprotected'));
                self::assertNotNull($client->unreachable());
            } finally {
                $daemon->resume();
            }
            Daemon::eventually('a call through the sidecar again', fn () => $breaker->call(null, fn () => true) && $client->unreachable() === null);
            self::assertCount(1, $logger->messages('info'));
            self::assertStringContainsString('answers again', $logger->messages('info')[0]);
            $permit = $breaker->acquire();
            self::assertNotNull($permit->id);
            self::assertTrue($breaker->release($permit, true));
        } finally {
            $daemon->stop();
        }
    }

    public function testAnotherProcessAdoptsTheBackOff(): void
    {
        // As the next request of a PHP-FPM pool would, which keeps nothing of the last.
        $missing = $this->dir . '/none.sock';
        $client = new Client($missing, backoffMs: self::LONG_BACKOFF_MS, logger: self::logger());
        self::assertSame(1, $client->breaker('payments-api')->call(null, fn () => 1));
        self::assertFileExists(Sidecar::markerOf($missing));

        $script = 'require ' . var_export(__DIR__ . '/../autoload.php', true) . ';'
            . '$c = new Fusebox\Client(' . var_export($missing, true) . ');'
            . 'echo json_encode([$c->breaker("payments-api")->call(null, fn () => "ran"), $c->stats(), $c->unreachable()?->getMessage()]);';
        exec(escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg($script) . ' 2>&1', $out, $code);
        self::assertSame(0, $code, implode("\n", $out));
        [$result, $stats, $why] = json_decode(implode('', $out), true, 8, JSON_THROW_ON_ERROR);
        self::assertSame('ran', $result);
        self::assertSame(0, $stats['requests'], 'the other process tried the socket while the back-off lasted');
        self::assertStringContainsString('found by another process', $why);
    }

    public function testTheBackOffEndsForEveryProcessWhenTheSidecarAnswers(): void
    {
        $daemon = new Daemon();
        try {
            $daemon->publish('php-marker');
            $client = new Client($daemon->socket, timeoutMs: self::HUNG_TIMEOUT_MS, backoffMs: 50, logger: self::logger());
            $breaker = $client->breaker('php-marker');
            $daemon->pause();
            try {
                self::assertSame(1, $breaker->call(null, fn () => 1));
                self::assertFileExists(Sidecar::markerOf($daemon->socket));
            } finally {
                $daemon->resume();
            }
            Daemon::eventually('a call through the sidecar again', fn () => $breaker->call(null, fn () => true) && $client->unreachable() === null);
            self::assertFileDoesNotExist(Sidecar::markerOf($daemon->socket));
        } finally {
            $daemon->stop();
        }
    }
}
