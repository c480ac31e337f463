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
use PHPUnit\Framework\TestCase;

/**
 * The breaker's states through a real fuseboxd.
 */
final class BreakerTest extends TestCase
{
    private static Daemon $daemon;

    public static function setUpBeforeClass(): void
    {
        self::$daemon = new Daemon();
    }

    public static function tearDownAfterClass(): void
    {
        self::$daemon->stop();
    }

    private function publish(string $name, array $fields = [], int $maxRetryAfterMs = 1000): Breaker
    {
        self::$daemon->publish($name, $fields);
        return self::$daemon->patientClient($maxRetryAfterMs)->breaker($name);
    }

    public function testClosedOpenHalfOpenClosed(): void
    {
        $breaker = $this->publish('php-cycle');
        self::assertSame(State::Closed, $breaker->state());
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
        self::assertLessThanOrEqual(1000, $result->retryAfterMs);
        self::assertStringContainsString('short-circuited', $result->getMessage());

        // After the open timeout (1s) a call probes, with the halfOpen callback.
        $used = [];
        Daemon::eventually('a probe after the open timeout', function () use ($breaker, &$used) {
            return $breaker->call(
                open: fn () => 'fallback',
                close: function () use (&$used) {
                    $used[] = 'close';
                    return 'ok';
                },
                halfOpen: function () use (&$used) {
                    $used[] = 'halfOpen';
                    return 'probed';
                },
            ) === 'probed';
        });
        self::assertSame(['halfOpen'], $used);
        self::assertTrue($breaker->isClosed());
        self::assertSame('ok', $breaker->call(open: fn () => 'fallback', close: fn () => 'ok', halfOpen: fn () => 'probed'));
    }

    public function testWithoutOpenTheCausesAreThrown(): void
    {
        $breaker = $this->publish('php-throw', ['minimumThroughput' => 2, 'openTimeout' => '30s']);
        for ($i = 0; $i < 2; $i++) {
            try {
                $breaker->call(null, fn () => throw new \DomainException('down'));
                self::fail('no exception');
            } catch (\DomainException $e) {
                self::assertSame('down', $e->getMessage());
            }
        }
        $this->expectException(CircuitOpen::class);
        $breaker->call(null, fn () => 'never');
    }

    public function testRetryAfterIsHonouredWithoutAsking(): void
    {
        $breaker = $this->publish('php-retry-after', ['openTimeout' => '30s'], maxRetryAfterMs: 60_000);
        $breaker->trip();
        $first = $breaker->call(open: fn ($cause) => $cause, close: fn () => 'never');
        self::assertInstanceOf(CircuitOpen::class, $first);
        self::assertGreaterThan(25_000, $first->retryAfterMs);
        $client = self::$daemon->patientClient();
        $asked = $client->stats()['requests'];
        for ($i = 0; $i < 50; $i++) {
            $again = $breaker->call(open: fn ($cause) => $cause, close: fn () => 'never');
            self::assertInstanceOf(CircuitOpen::class, $again);
            self::assertLessThanOrEqual($first->retryAfterMs, $again->retryAfterMs);
        }
        self::assertSame($asked, $client->stats()['requests'], 'a refusal within its Retry-After asked the sidecar again');

        // With no Retry-After honoured, every call asks.
        $eager = new Client(self::$daemon->socket, baseUrl: 'http://fuseboxd', timeoutMs: 10_000, connectTimeoutMs: 10_000, maxRetryAfterMs: 0);
        $before = $eager->stats()['requests'];
        for ($i = 0; $i < 3; $i++) {
            $eager->breaker('php-retry-after')->call(open: fn ($cause) => $cause, close: fn () => 'never');
        }
        self::assertSame($before + 3, $eager->stats()['requests']);
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
        $counts = self::$daemon->patientClient()->describe('php-two-step')['counts'];
        self::assertSame(['calls' => 1, 'failures' => 1, 'successes' => 0, 'slow' => 0], $counts);

        $second = $breaker->acquire();
        self::assertTrue($breaker->release($second, false));
        self::assertInstanceOf(CircuitOpen::class, $breaker->acquire());
    }

    public function testEveryClientSeesTheSameBreaker(): void
    {
        $a = $this->publish('php-shared', ['minimumThroughput' => 2, 'openTimeout' => '30s']);
        $b = new Breaker('php-shared', self::$daemon->patientClient());
        $a->call(open: fn () => null, close: fn () => throw new \RuntimeException('down'));
        $b->call(open: fn () => null, close: fn () => throw new \RuntimeException('down'));
        self::assertTrue($a->isOpen());
        self::assertTrue($b->isOpen());
    }

    public function testAThrowableThatIsNoFailureIsRethrownAndCountsAsNone(): void
    {
        self::$daemon->publish('php-classify', ['minimumThroughput' => 2, 'openTimeout' => '30s']);
        $breaker = self::$daemon->patientClient()->breaker('php-classify', isFailure: fn (\Throwable $e) => !$e instanceof \OutOfBoundsException);
        try {
            $breaker->call(open: fn () => 'fallback', close: fn () => throw new \OutOfBoundsException('a 404'));
            self::fail('no exception');
        } catch (\OutOfBoundsException) {
        }
        $counts = self::$daemon->patientClient()->describe('php-classify')['counts'];
        self::assertSame([1, 0], [$counts['calls'], $counts['failures']]);
    }

    public function testANameThatCannotBeACircuitBreakerIsThrown(): void
    {
        $breaker = self::$daemon->patientClient()->breaker('Not_A_Name');
        $ran = false;
        try {
            $breaker->call(open: fn () => 'fallback', close: function () use (&$ran) {
                $ran = true;
            });
            self::fail('no exception');
        } catch (SidecarError $e) {
            self::assertSame(400, $e->status);
            self::assertFalse($e->isUnavailable());
        }
        self::assertFalse($ran);
    }

    public function testAConcurrencyLimitReachedIsAShortCircuit(): void
    {
        // The pod's share of the fleet's limit on calls in flight (docs/design.md §12): one.
        $breaker = $this->publish('php-bulkhead', ['concurrency' => ['share' => 1, 'pods' => 0, 'generation' => 1, 'maxWait' => '0s']]);
        $held = $breaker->acquire();
        self::assertInstanceOf(Permit::class, $held);
        $before = self::$daemon->patientClient()->stats()['refusedLocally'];
        $ran = false;
        $refused = $breaker->call(
            open: fn (\Throwable $cause) => $cause,
            close: function () use (&$ran) {
                $ran = true;
            },
        );
        self::assertFalse($ran, 'a call over the limit ran');
        self::assertInstanceOf(CircuitOpen::class, $refused);
        self::assertSame(State::Closed, $refused->state);
        self::assertSame('concurrency', $refused->reason);
        self::assertGreaterThan(0, $refused->retryAfterMs);
        self::assertLessThanOrEqual(1000, $refused->retryAfterMs);
        try {
            $breaker->call(open: null, close: fn () => 'never');
            self::fail('no exception');
        } catch (CircuitOpen $e) {
            self::assertSame('concurrency', $e->reason);
        }
        // The circuit is closed: the refusal is not honoured without asking, and the slot a
        // release frees is the next call's.
        self::assertTrue($breaker->release($held, Outcome::Success));
        self::assertSame('ran', $breaker->call(open: fn () => 'fallback', close: fn () => 'ran'));
        self::assertSame($before, self::$daemon->patientClient()->stats()['refusedLocally']);
        self::assertSame(2, self::$daemon->patientClient()->describe('php-bulkhead')['concurrency']['limited']);
    }
}
