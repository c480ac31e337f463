<?php

declare(strict_types=1);

namespace Fusebox\Guzzle;

use Fusebox\CircuitOpen;
use GuzzleHttp\Exception\RequestException;
use Psr\Http\Message\RequestInterface;

/**
 * A request the breaker short-circuited: it was never sent. A Guzzle RequestException
 * without a response, so that code catching Guzzle's exceptions catches it too; its
 * previous exception is the CircuitOpen that says why and when to ask again.
 */
final class ShortCircuited extends RequestException
{
    public function __construct(RequestInterface $request, private readonly CircuitOpen $cause)
    {
        parent::__construct($cause->getMessage(), $request, null, $cause);
    }

    public function circuitOpen(): CircuitOpen
    {
        return $this->cause;
    }
}
