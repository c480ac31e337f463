<?php

declare(strict_types=1);

namespace Fusebox\Guzzle;

use Fusebox\Breaker;
use Fusebox\CircuitOpen;
use Fusebox\Outcome;
use Fusebox\Permit;
use GuzzleHttp\Exception\RequestException;
use GuzzleHttp\Exception\TransferException;
use GuzzleHttp\Promise\Create;
use GuzzleHttp\Promise\PromiseInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * Guzzle middleware that sends each request through a Fusebox breaker: a permit before
 * the request, its outcome when the answer (or the error) comes, and a short-circuit
 * instead of the request while the circuit is open.
 *
 *     $stack = GuzzleHttp\HandlerStack::create();
 *     $stack->push(BreakerMiddleware::create($client->breaker('payments-api')), 'fusebox');
 *
 * Pushed last, it is the outermost middleware, so it sees Guzzle's http_errors
 * rejections with their responses, and redirects and retries inside it count as one
 * call.
 */
final class BreakerMiddleware
{
    /** @var \Closure(RequestInterface, ?ResponseInterface, ?\Throwable): bool */
    private readonly \Closure $isFailure;

    /**
     * @param (\Closure(RequestInterface, ?ResponseInterface, ?\Throwable): bool)|null $isFailure
     *        which answers count as failures; default: a 5xx, or no answer at all (a
     *        connection refused, reset or timed out)
     * @param (\Closure(RequestInterface, CircuitOpen): (ResponseInterface|PromiseInterface))|null $open
     *        the answer to a short-circuited request; default: rejected with ShortCircuited
     */
    public function __construct(
        private readonly Breaker $breaker,
        ?\Closure $isFailure = null,
        private readonly ?\Closure $open = null,
    ) {
        $this->isFailure = $isFailure ?? self::serverOrConnectionError(...);
    }

    /** The middleware, for HandlerStack::push. */
    public static function create(Breaker $breaker, ?\Closure $isFailure = null, ?\Closure $open = null): callable
    {
        return new self($breaker, $isFailure, $open);
    }

    /** The default judgement: a 5xx answer, or a transfer that got no answer. */
    public static function serverOrConnectionError(RequestInterface $request, ?ResponseInterface $response, ?\Throwable $error): bool
    {
        if ($response !== null) {
            return $response->getStatusCode() >= 500;
        }
        return $error instanceof TransferException;
    }

    public function __invoke(callable $handler): callable
    {
        return function (RequestInterface $request, array $options) use ($handler): PromiseInterface {
            try {
                $permit = $this->breaker->acquire();
            } catch (\Throwable $e) {
                return Create::rejectionFor($e);
            }
            if ($permit instanceof CircuitOpen) {
                if ($this->open === null) {
                    return Create::rejectionFor(new ShortCircuited($request, $permit));
                }
                try {
                    return Create::promiseFor(($this->open)($request, $permit));
                } catch (\Throwable $e) {
                    return Create::rejectionFor($e);
                }
            }
            try {
                $sent = $handler($request, $options);
            } catch (\Throwable $e) {
                $this->settle($permit, $request, null, $e);
                return Create::rejectionFor($e);
            }
            return $sent->then(
                function (ResponseInterface $response) use ($permit, $request): ResponseInterface {
                    $this->settle($permit, $request, $response, null);
                    return $response;
                },
                function ($reason) use ($permit, $request): PromiseInterface {
                    $error = $reason instanceof \Throwable ? $reason : null;
                    $response = $reason instanceof RequestException ? $reason->getResponse() : null;
                    $this->settle($permit, $request, $response, $error);
                    return Create::rejectionFor($reason);
                },
            );
        };
    }

    private function settle(Permit $permit, RequestInterface $request, ?ResponseInterface $response, ?\Throwable $error): void
    {
        try {
            $failed = ($this->isFailure)($request, $response, $error);
        } catch (\Throwable $e) {
            // A judgement that breaks says nothing about the dependency; the caller hears
            // of it instead of the answer.
            $this->breaker->release($permit, Outcome::Ignored);
            throw $e;
        }
        $this->breaker->release($permit, $failed ? Outcome::Failure : Outcome::Success);
    }
}
