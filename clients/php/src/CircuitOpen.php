<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * A call the breaker short-circuited: the circuit is open, or half-open with every probe
 * slot taken. It is the cause given to call()'s open callback in that case.
 */
final class CircuitOpen extends \RuntimeException
{
    public function __construct(
        public readonly string $breaker,
        public readonly State $state,
        /** Why: "open", "half_open_saturated", "forced_open", or "unreachable". */
        public readonly string $reason,
        /** How long until asking again is worthwhile, in milliseconds. */
        public readonly int $retryAfterMs,
    ) {
        parent::__construct(sprintf('fusebox: circuit %s is %s (%s)', $breaker, $state->value, $reason));
    }
}
