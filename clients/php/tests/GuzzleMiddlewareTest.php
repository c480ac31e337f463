<?php

declare(strict_types=1);

namespace Fusebox\Tests;

use Fusebox\Breaker;
use Fusebox\CircuitOpen;
use Fusebox\Client;
use Fusebox\Guzzle\BreakerMiddleware;
use Fusebox\Guzzle\ShortCircuited;
use Fusebox\State;
use GuzzleHttp\Exception\ClientException;
use GuzzleHttp\Exception\ConnectException;
use GuzzleHttp\Exception\ServerException;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Promise\Utils;
use GuzzleHttp\Psr7\Response;
use PHPUnit\Framework\TestCase;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The Guzzle middleware with Debian's Guzzle, a real fuseboxd and a real local upstream.
 */
final class GuzzleMiddlewareTest extends TestCase
{
    private static Daemon $daemon;
    private static Upstream $upstream;

    public static function setUpBeforeClass(): void
    {
        if (!class_exists(HandlerStack::class)) {
            $msg = 'Guzzle not installed: apt-get install php-guzzlehttp-guzzle';
            getenv('CI') ? self::fail($msg) : self::markTestSkipped($msg);
        }
        self::$daemon = new Daemon();
        self::$upstream = new Upstream();
    }

    public static function tearDownAfterClass(): void
    {
        if (isset(self::$daemon)) {
            self::$daemon->stop();
            self::$upstream->stop();
        }
    }

    private static function breaker(string $name, array $fields = ['minimumThroughput' => 4, 'openTimeout' => '30s']): Breaker
    {
        self::$daemon->publish($name, $fields);
        return self::$daemon->patientClient()->breaker($name);
    }

    private static function http(Breaker $breaker, ?\Closure $isFailure = null, ?\Closure $open = null, string $baseUri = ''): \GuzzleHttp\Client
    {
        $stack = HandlerStack::create();
        $stack->push(BreakerMiddleware::create($breaker, $isFailure, $open), 'fusebox');
        return new \GuzzleHttp\Client(['handler' => $stack, 'base_uri' => $baseUri ?: self::$upstream->url, 'timeout' => 10]);
    }

    public function testServerErrorsOpenTheCircuitAndLaterRequestsAreNeverSent(): void
    {
        $breaker = self::breaker('guzzle-5xx');
        $http = self::http($breaker);
        for ($i = 0; $i < 4; $i++) {
            try {
                $http->get('/status/503');
                self::fail('no exception');
            } catch (ServerException $e) {
                self::assertSame(503, $e->getResponse()->getStatusCode());
            }
        }
        self::assertSame(State::Open, $breaker->state());
        $served = self::$upstream->served();
        try {
            $http->get('/status/200');
            self::fail('an open circuit sent the request');
        } catch (ShortCircuited $e) {
            self::assertSame('open', $e->circuitOpen()->reason);
            self::assertInstanceOf(CircuitOpen::class, $e->getPrevious());
            self::assertStringContainsString('short-circuited', $e->getMessage());
        }
        self::assertSame($served, self::$upstream->served());
    }

    public function testClientErrorsAreAnswersNotFailures(): void
    {
        $breaker = self::breaker('guzzle-4xx');
        $http = self::http($breaker);
        for ($i = 0; $i < 6; $i++) {
            try {
                $http->get('/status/404');
                self::fail('no exception');
            } catch (ClientException $e) {
                self::assertSame(404, $e->getResponse()->getStatusCode());
            }
        }
        self::assertSame(State::Closed, $breaker->state());
        self::assertSame(200, $http->get('/status/200')->getStatusCode());
    }

    public function testConnectionErrorsAreFailures(): void
    {
        $breaker = self::breaker('guzzle-refused');
        $http = self::http($breaker, baseUri: 'http://127.0.0.1:' . Upstream::freePort());
        for ($i = 0; $i < 4; $i++) {
            try {
                $http->get('/');
                self::fail('no exception');
            } catch (ConnectException) {
            }
        }
        self::assertSame(State::Open, $breaker->state());
        $this->expectException(ShortCircuited::class);
        $http->get('/');
    }

    public function testFailuresAndTheFallbackAreTheCallersToChoose(): void
    {
        $breaker = self::breaker('guzzle-custom');
        $http = self::http(
            $breaker,
            isFailure: fn (RequestInterface $r, ?ResponseInterface $response, ?\Throwable $e) => $response?->getStatusCode() === 429,
            open: fn (RequestInterface $r, CircuitOpen $cause) => new Response(200, ['X-Fusebox' => $cause->reason], 'cached'),
        );
        $options = ['http_errors' => false];
        for ($i = 0; $i < 4; $i++) {
            self::assertSame(429, $http->get('/status/429', $options)->getStatusCode());
        }
        $answer = $http->get('/status/200', $options);
        self::assertSame('cached', (string) $answer->getBody());
        self::assertSame('open', $answer->getHeaderLine('X-Fusebox'));
    }

    public function testConcurrentRequestsAreSettledAsTheyComplete(): void
    {
        $breaker = self::breaker('guzzle-async');
        $http = self::http($breaker);
        $promises = [];
        for ($i = 0; $i < 4; $i++) {
            $promises[] = $http->getAsync('/status/500');
        }
        $results = Utils::settle($promises)->wait();
        foreach ($results as $r) {
            self::assertSame('rejected', $r['state']);
            self::assertInstanceOf(ServerException::class, $r['reason']);
        }
        self::assertSame(State::Open, $breaker->state());
    }

    public function testWithTheSidecarDownRequestsGoThrough(): void
    {
        $client = new Client(sys_get_temp_dir() . '/fbphp-none-' . bin2hex(random_bytes(4)) . '.sock', backoffMs: 600_000, logger: interface_exists(\Psr\Log\LoggerInterface::class) ? new MemoryLogger() : null);
        $http = self::http($client->breaker('payments-api'));
        $served = self::$upstream->served();
        for ($i = 0; $i < 10; $i++) {
            self::assertSame(200, $http->get('/status/200')->getStatusCode());
        }
        self::assertSame($served + 10, self::$upstream->served());
        self::assertSame(1, $client->stats()['requests']);
    }
}
