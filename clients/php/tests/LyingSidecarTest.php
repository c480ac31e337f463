<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Fusebox\CircuitOpen;
use Fusebox\Client;
use Fusebox\SidecarError;
use PHPUnit\Framework\TestCase;

/**
 * A sidecar that answers what fuseboxd never would (a test double of a misbehaving
 * peer): whatever it says, call() never throws after the call ran and never loses its
 * result; every 429 is a short-circuit.
 */
final class LyingSidecarTest extends TestCase
{
    private const PERMIT = '{"permit":"Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA","state":"closed","leaseMs":30000}' . "\n";

    /** @var list<LyingSidecar> */
    private array $liars = [];

    protected function tearDown(): void
    {
        foreach ($this->liars as $liar) {
            $liar->stop();
        }
    }

    /** @param array<string, string|null> $answers */
    private function liar(array $answers): LyingSidecar
    {
        return $this->liars[] = new LyingSidecar($answers);
    }

    private static function quiet(string $socket, int $backoffMs = 1000, int $maxRetryAfterMs = 1000): Client
    {
        $logger = interface_exists(\Psr\Log\LoggerInterface::class) ? new MemoryLogger() : null;
        return new Client($socket, timeoutMs: 2000, backoffMs: $backoffMs, maxRetryAfterMs: $maxRetryAfterMs, logger: $logger);
    }

    /** Answers to an acquire that are no decision: the call runs (fails open), once. */
    public static function undecided(): array
    {
        $a = [LyingSidecar::class, 'answer'];
        return [
            '200 instead of 201' => [$a('200 OK', self::PERMIT)],
            '201 without a permit' => [$a('201 Created', '{"state":"closed","leaseMs":30000}')],
            '201 with a permit that is not an id' => [$a('201 Created', '{"permit":"../../trip","state":"closed"}')],
            '201 with a number for a permit' => [$a('201 Created', '{"permit":42}')],
            '201 of garbage' => [$a('201 Created', "\x00\xffnot json")],
            '201 of a JSON array' => [$a('201 Created', '[1,2]')],
            '500' => [$a('500 Internal Server Error', '{"error":"boom"}')],
            '503 out of permits (the old daemon)' => [$a('503 Service Unavailable', '{"error":"too many outstanding permits"}')],
            '302' => [$a('302 Found', '', "Location: /elsewhere\r\n")],
            '404' => [$a('404 Not Found', '{"error":"no such endpoint"}')],
            'chunked' => ["HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
            'no Content-Length' => ["HTTP/1.1 201 Created\r\n\r\n" . self::PERMIT],
            'not HTTP' => ["SSH-2.0-OpenSSH_9.2\r\n\r\n"],
            'a head that never ends' => ["HTTP/1.1 201 Created\r\n" . str_repeat("X: y\r\n", 4000)],
            'half an answer, then closed' => ['HTTP/1.1 201 Crea'],
            'closed without an answer' => [null],
        ];
    }

    /** @dataProvider undecided */
    public function testAnUndecidedAcquireRunsTheCallOnceAndKeepsItsResult(?string $raw): void
    {
        $liar = $this->liar(['acquire' => $raw, 'release' => LyingSidecar::answer('204 No Content')]);
        $client = self::quiet($liar->socket, backoffMs: 600_000);
        $ran = 0;
        $result = $client->breaker('payments-api')->call(open: fn () => 'fallback', close: function () use (&$ran) {
            $ran++;
            return 'result';
        });
        self::assertSame('result', $result);
        self::assertSame(1, $ran);
        self::assertSame(['acquire'], $liar->asked(), 'released a permit it never got');
        self::assertNotNull($client->unreachable());
        self::assertSame(1, $client->stats()['failedOpen']);
    }

    /** Refusals the client cannot fully read: still short-circuits (the fallback runs). */
    public static function refusals(): array
    {
        $a = [LyingSidecar::class, 'answer'];
        return [
            '429 with an unknown state' => [$a('429 Too Many Requests', '{"state":"sideways","reason":"open","retryAfterMs":10}'), 10],
            '429 permits exhausted, state closed' => [$a('429 Too Many Requests', '{"state":"closed","reason":"permits exhausted","retryAfterMs":20}'), 20],
            '429 of garbage with a Retry-After' => [$a('429 Too Many Requests', '<html>slow down</html>', "Retry-After: 3\r\n"), 3000],
            '429 with nothing' => [$a('429 Too Many Requests'), 1000],
        ];
    }

    /** @dataProvider refusals */
    public function testEvery429IsAShortCircuit(string $raw, int $retryAfterMs): void
    {
        $liar = $this->liar(['acquire' => $raw]);
        $client = self::quiet($liar->socket, maxRetryAfterMs: 0);
        $ran = false;
        $cause = $client->breaker('payments-api')->call(open: fn ($c) => $c, close: function () use (&$ran) {
            $ran = true;
        });
        self::assertFalse($ran, 'a refusal ran the call');
        self::assertInstanceOf(CircuitOpen::class, $cause);
        self::assertSame($retryAfterMs, $cause->retryAfterMs);
        self::assertNull($client->unreachable());
    }

    /** Answers to a release, after the call ran: the result is kept, release() says false. */
    public static function settleLies(): array
    {
        $lies = [
            '200' => LyingSidecar::answer('200 OK', '{}'),
            '500' => LyingSidecar::answer('500 Internal Server Error', '{"error":"boom"}'),
            'garbage' => "\x00\x01\x02\r\n\r\n",
            'closed without an answer' => null,
        ];
        $cases = [];
        foreach ($lies as $lie => $raw) {
            foreach (['returns', 'throws'] as $outcome) {
                $cases["$lie, a call that $outcome"] = [$raw, $outcome];
            }
        }
        return $cases;
    }

    /** @dataProvider settleLies */
    public function testALyingReleaseKeepsTheResult(?string $raw, string $outcome): void
    {
        $liar = $this->liar(['acquire' => LyingSidecar::answer('201 Created', self::PERMIT), 'release' => $raw]);
        $client = self::quiet($liar->socket);
        $result = $client->breaker('payments-api')->call(
            open: fn (\Throwable $e) => 'fallback after ' . $e->getMessage(),
            close: fn () => $outcome === 'throws' ? throw new \RuntimeException('down') : 'result',
        );
        self::assertSame($outcome === 'returns' ? 'result' : 'fallback after down', $result);
        self::assertSame(['acquire', 'release'], array_slice($liar->asked(), 0, 2));

        $other = self::quiet($liar->socket)->breaker('payments-api');
        // The back-off the lie began is the socket's, for every client of the process.
        self::assertNull($other->acquire()->id);
    }

    public function testTheTwoStepReleaseOfALiarSaysFalse(): void
    {
        $liar = $this->liar(['acquire' => LyingSidecar::answer('201 Created', self::PERMIT), 'release' => LyingSidecar::answer('500 Internal Server Error')]);
        $breaker = self::quiet($liar->socket)->breaker('payments-api');
        $permit = $breaker->acquire();
        self::assertSame('Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA', $permit->id);
        self::assertFalse($breaker->release($permit, true));
    }

    public function testA400IsThrownBeforeTheCallRuns(): void
    {
        $liar = $this->liar(['acquire' => LyingSidecar::answer('400 Bad Request', '{"error":"breaker name \"X\": invalid"}')]);
        $ran = false;
        try {
            self::quiet($liar->socket)->breaker('payments-api')->call(null, function () use (&$ran) {
                $ran = true;
            });
            self::fail('no exception');
        } catch (SidecarError $e) {
            self::assertSame(400, $e->status);
            self::assertStringContainsString('invalid', $e->getMessage());
        }
        self::assertFalse($ran);
    }

    /** @return array<string, array{0: string, 1: int}> */
    public static function refusalStates(): array
    {
        return ['open' => ['open', 1], 'half_open' => ['half_open', 3], 'closed' => ['closed', 3]];
    }

    /** @dataProvider refusalStates */
    public function testOnlyAnOpenCircuitsRetryAfterIsHonoured(string $state, int $asks): void
    {
        $liar = $this->liar(['acquire' => LyingSidecar::answer('429 Too Many Requests', "{\"state\":\"$state\",\"reason\":\"r\",\"retryAfterMs\":5000}")]);
        $breaker = self::quiet($liar->socket, maxRetryAfterMs: 60_000)->breaker('payments-api');
        for ($i = 0; $i < 3; $i++) {
            self::assertInstanceOf(CircuitOpen::class, $breaker->call(open: fn ($c) => $c, close: fn () => 'never'));
        }
        self::assertSame(array_fill(0, $asks, 'acquire'), $liar->asked());
    }
}
