<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Fusebox\Breaker;
use Fusebox\CircuitOpen;
use Fusebox\Client;
use Fusebox\Outcome;
use Fusebox\Permit;
use Fusebox\SidecarError;
use Fusebox\State;
use Fusebox\Unreachable;
use PHPUnit\Framework\TestCase;

/**
 * Against a real fuseboxd, whose socket and config directory the environment names.
 */
final class BreakerTest extends TestCase
{
    private static string $socket;
    private static string $configDir;

    public static function setUpBeforeClass(): void
    {
        $socket = getenv('FUSEBOX_SOCKET');
        $dir = getenv('FUSEBOX_CONFIG_DIR');
        if ($socket === false || $dir === false) {
            self::fail('FUSEBOX_SOCKET and FUSEBOX_CONFIG_DIR are not set: run these tests through `go test ./cmd/fuseboxd -run TestPHPClient`, which starts fuseboxd');
        }
        self::$socket = $socket;
        self::$configDir = $dir;
    }

    /** Publishes a breaker as the operator would, and waits until fuseboxd has loaded it. */
    private function publish(string $name, array $fields = []): Breaker
    {
        $doc = array_merge([
            'name' => $name, 'generation' => 1, 'openTimeout' => '1s', 'window' => '10s',
            'failureRatio' => 0.5, 'minimumThroughput' => 4, 'successThreshold' => 1,
            'halfOpenPermittedCalls' => 1, 'mode' => 'Enforce', 'scope' => 'Pod',
        ], $fields);
        $tmp = self::$configDir . '/.tmp-' . $name;
        file_put_contents($tmp, json_encode($doc, JSON_THROW_ON_ERROR));
        rename($tmp, self::$configDir . '/' . $name . '.json');
        $client = new Client(self::$socket);
        $deadline = microtime(true) + 10;
        while ($client->describe($name)['generation'] !== $doc['generation']) {
            if (microtime(true) > $deadline) {
                self::fail("fuseboxd did not load $name within 10s");
            }
            usleep(20_000);
        }
        return $client->breaker($name);
    }

    public function testCallOpensAfterTheFailureRateAndShortCircuits(): void
    {
        $breaker = $this->publish('php-opens', ['openTimeout' => '30s']);
        $causes = [];
        for ($i = 0; $i < 4; $i++) {
            $result = $breaker->call(
                open: function (\Throwable $cause) use (&$causes) {
                    $causes[] = $cause;
                    return 'fallback';
                },
                close: fn () => throw new \RuntimeException('payments-api is down'),
            );
            self::assertSame('fallback', $result);
        }
        self::assertCount(4, $causes);
        self::assertInstanceOf(\RuntimeException::class, $causes[3]);
        self::assertSame(State::Open, $breaker->state());

        $ran = false;
        $result = $breaker->call(
            open: fn (\Throwable $cause) => $cause,
            close: function () use (&$ran) {
                $ran = true;
                return 'called';
            },
        );
        self::assertFalse($ran, 'an open circuit ran the protected callback');
        self::assertInstanceOf(CircuitOpen::class, $result);
        self::assertSame('open', $result->reason);
        self::assertGreaterThan(0, $result->retryAfterMs);
        self::assertLessThanOrEqual(30000, $result->retryAfterMs);
    }

    public function testHalfOpenCallbackProbesAndCloses(): void
    {
        $breaker = $this->publish('php-probes');
        $breaker->trip();
        self::assertTrue($breaker->isOpen());
        usleep(1_100_000); // the open timeout
        $used = null;
        $result = $breaker->call(
            open: fn () => 'fallback',
            close: function () use (&$used) {
                $used = 'close';
                return 'ok';
            },
            halfOpen: function () use (&$used) {
                $used = 'halfOpen';
                return 'probed';
            },
        );
        self::assertSame('probed', $result);
        self::assertSame('halfOpen', $used);
        self::assertTrue($breaker->isClosed());
        self::assertSame('ok', $breaker->call(open: fn () => 'fallback', close: fn () => 'ok', halfOpen: fn () => 'probed'));
    }

    public function testTwoStepAcquireAndRelease(): void
    {
        $breaker = $this->publish('php-two-step', ['minimumThroughput' => 2, 'openTimeout' => '30s']);
        $permit = $breaker->acquire(leaseMs: 5000);
        self::assertInstanceOf(Permit::class, $permit);
        self::assertSame(State::Closed, $permit->state);
        self::assertSame(5000, $permit->leaseMs);
        self::assertTrue($breaker->release($permit, Outcome::Failure));
        self::assertFalse($breaker->release($permit, Outcome::Failure), 'a permit released twice counted twice');

        $ignored = $breaker->acquire();
        self::assertTrue($breaker->release($ignored, Outcome::Ignored));
        $counts = (new Client(self::$socket))->describe('php-two-step')['counts'];
        self::assertSame(['calls' => 1, 'failures' => 1, 'successes' => 0, 'slow' => 0], $counts);

        $second = $breaker->acquire();
        self::assertTrue($breaker->release($second, false));
        self::assertInstanceOf(CircuitOpen::class, $breaker->acquire());
    }

    public function testEveryClientSeesTheSameBreaker(): void
    {
        $a = $this->publish('php-shared', ['minimumThroughput' => 2, 'openTimeout' => '30s']);
        $b = (new Client(self::$socket))->breaker('php-shared');
        $a->call(open: fn () => null, close: fn () => throw new \RuntimeException('down'));
        $b->call(open: fn () => null, close: fn () => throw new \RuntimeException('down'));
        self::assertTrue($a->isOpen());
        self::assertTrue($b->isOpen());
    }

    public function testUnreachableSidecarFailsOpenByDefault(): void
    {
        $client = new Client('/nonexistent/fusebox.sock', timeoutMs: 100);
        $breaker = $client->breaker('payments-api');
        self::assertSame('called', $breaker->call(open: fn () => 'fallback', close: fn () => 'called'));
        self::assertSame(State::Closed, $breaker->state());

        $strict = $client->breaker('payments-api', Unreachable::FailClosed);
        $cause = $strict->call(open: fn (\Throwable $c) => $c, close: fn () => 'called');
        self::assertInstanceOf(CircuitOpen::class, $cause);
        self::assertSame('unreachable', $cause->reason);
        self::assertSame(State::Open, $strict->state());
    }

    public function testANameThatCannotBeACircuitBreakerIsThrown(): void
    {
        $breaker = (new Client(self::$socket))->breaker('Not_A_Name');
        try {
            $breaker->call(open: fn () => 'fallback', close: fn () => 'called');
            self::fail('no exception');
        } catch (SidecarError $e) {
            self::assertSame(400, $e->status);
        }
    }
}
