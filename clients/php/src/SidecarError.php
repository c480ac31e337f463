<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * The sidecar could not be reached, or refused a request. A breaker treats the first
 * kind (status 0, or a 5xx such as too many outstanding permits) by its Unreachable
 * behaviour; a 4xx is a mistake of the caller (a name that cannot be a CircuitBreaker's,
 * say) and is thrown.
 */
final class SidecarError extends \RuntimeException
{
    public function __construct(
        string $message,
        /** The HTTP status the sidecar answered; 0 when it could not be reached. */
        public readonly int $status = 0,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, 0, $previous);
    }

    /** Whether the sidecar is down or overloaded, rather than the request wrong. */
    public function isUnavailable(): bool
    {
        return $this->status === 0 || $this->status >= 500;
    }
}
