<?php

declare(strict_types=1);

namespace Fusebox;

/**
 * A call the breaker short-circuited: the circuit is open, half-open with every probe
 * slot taken, held open, out of permits, over its share of the fleet's limit on calls
 * in flight, or (with Unreachable::FailClosed) the sidecar could not decide. It is the
 * cause given to call()'s open callback in that case.
 */
final class CircuitOpen extends \RuntimeException
{
    public function __construct(
        public readonly string $breaker,
        public readonly State $state,
        /** fuseboxd's reason ("open", "half_open_saturated", "forced_open",
         *  "concurrency" for a concurrency limit reached, with the circuit closed, one
         *  for a client holding too many permits, ...), "unknown" when it gave none, or
         *  "unreachable". */
        public readonly string $reason,
        /** How long until asking again is worthwhile, in milliseconds. */
        public readonly int $retryAfterMs,
    ) {
        parent::__construct(sprintf('fusebox: %s: short-circuited, circuit %s (%s); ask again in %d ms', $breaker, $state->value, $reason, $retryAfterMs));
    }
}
