// The errors a caller sees. Each says what happened in its message and carries the
// details as properties.

/** Everything this package throws. */
export class FuseboxError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * A short-circuited call: the circuit is open, half-open with every probe slot taken,
 * held open, out of permits, over its share of the fleet's limit on calls in flight, or
 * (with Unreachable.FAIL_CLOSED) the sidecar could not decide. It is the cause call()
 * gives its open fallback.
 */
export class CircuitOpen extends FuseboxError {
  constructor(breaker, state, reason, retryAfterMs) {
    super(`fusebox: ${breaker}: short-circuited, circuit ${state} (${reason}); ask again in ${retryAfterMs} ms`);
    this.breaker = breaker;
    this.state = state;
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * The sidecar refused a request as wrong (a name that cannot be a CircuitBreaker's, say):
 * a mistake of the caller, thrown before any call ran.
 */
export class SidecarError extends FuseboxError {
  constructor(message, status = 0, options) {
    super(message, options);
    this.status = status;
  }
}

/**
 * The sidecar could not decide: it refused or timed out the connection, or answered what
 * fuseboxd never would. Breakers fail open (or closed) instead of throwing it; only
 * describe() and trip(), which cannot, throw it.
 */
export class SidecarUnreachable extends SidecarError {}

/** The answer is not one fuseboxd would write (internal: becomes SidecarUnreachable). */
export class Malformed extends Error {}
