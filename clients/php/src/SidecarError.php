<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * The sidecar could not decide (status 0: it refused or timed out the connection, or
 * answered what fuseboxd never would), or it refused a request as wrong (a 4xx: a name
 * that cannot be a CircuitBreaker's, say). A breaker treats the first kind by its
 * Unreachable behaviour and throws the second, before any call ran.
 */
final class SidecarError extends \RuntimeException
{
    public function __construct(
        string $message,
        /** The HTTP status of a refused request; 0 when the sidecar could not decide. */
        public readonly int $status = 0,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, 0, $previous);
    }

    /** Whether the sidecar could not decide, rather than the request being wrong. */
    public function isUnavailable(): bool
    {
        return $this->status === 0 || $this->status >= 500;
    }
}
