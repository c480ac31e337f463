"""The values a caller sees: states, outcomes, permits, and the errors."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypedDict


class State(enum.StrEnum):
    """A breaker's state, spelled as the Go library and the fuseboxd API spell it."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Outcome(enum.StrEnum):
    """How a call went, as its permit is released with it."""

    SUCCESS = "success"
    """The dependency answered (an answer that refuses the request is an answer)."""
    FAILURE = "failure"
    """The dependency failed: it counts towards opening the circuit."""
    IGNORED = "ignored"
    """The call says nothing about the dependency (the caller gave up)."""


class Unreachable(enum.Enum):
    """What a breaker does while its sidecar cannot decide (down, hung, missing, or
    answering what fuseboxd never would)."""

    FAIL_OPEN = "fail_open"
    """Run the call, as if the circuit were closed (the default): losing the sidecar must
    not take the application down with it."""
    FAIL_CLOSED = "fail_closed"
    """Short-circuit the call: its fallback gets a CircuitOpen whose reason is
    "unreachable"."""


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to make one call, until its outcome is released."""

    breaker: str
    id: str | None
    """The sidecar's id; None for a call run without asking, the sidecar being unable to
    decide. Releasing such a permit counts for nothing."""
    state: State
    """The state it was granted in: HALF_OPEN means this call is a probe."""
    lease_ms: int
    granted_at: float
    """time.monotonic() when it was granted, for the call's duration."""

    @property
    def probe(self) -> bool:
        return self.state is State.HALF_OPEN


@dataclass(frozen=True, slots=True)
class Stats:
    """What a client did, since it was made: counters an application may export."""

    connects: int
    """Connections tried (the failed ones included)."""
    requests: int
    """Requests written to the sidecar."""
    failed_open: int
    """Calls run without a permit because the sidecar could not decide."""
    refused_locally: int
    """Calls short-circuited without asking, within a refusal's Retry-After."""


class FuseboxError(Exception):
    """Everything this package raises."""


class CircuitOpen(FuseboxError):
    """A short-circuited call: the circuit is open, half-open with every probe slot taken,
    held open, out of permits, over its share of the fleet's limit on calls in flight, or
    (with FAIL_CLOSED) the sidecar could not decide. It is the cause call() gives its open
    fallback."""

    def __init__(self, breaker: str, state: State, reason: str, retry_after_ms: int) -> None:
        super().__init__(f"fusebox: {breaker}: short-circuited, circuit {state} ({reason}); ask again in {retry_after_ms} ms")
        self.breaker = breaker
        self.state = state
        self.reason = reason
        """fuseboxd's reason ("open", "half_open_saturated", "forced_open", "concurrency"
        for a concurrency limit reached, with the circuit closed, one for a client holding
        too many permits, ...), "unknown" when it gave none, or "unreachable"."""
        self.retry_after_ms = retry_after_ms


class SidecarError(FuseboxError):
    """The sidecar refused a request as wrong (a name that cannot be a CircuitBreaker's,
    say): a mistake of the caller, raised before any call ran."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status the sidecar answered; 0 when it answered nothing usable."""


class SidecarUnreachable(SidecarError):
    """The sidecar could not decide: it refused or timed out the connection, or answered
    what fuseboxd never would. Breakers fail open (or closed) instead of raising it; only
    describe() and trip(), which cannot, raise it."""


class Counts(TypedDict):
    """A breaker's tallies (Breaker.Counts in the Go library)."""

    calls: int
    failures: int
    successes: int
    slow: int


class PermitFigures(TypedDict):
    """The permits the sidecar's clients hold, let lapse, and were refused at a cap."""

    held: int
    lapsed: int
    refusedAtCap: int


class Policy(TypedDict, total=False):
    """A published policy (docs/config-format.md); durations in Go's syntax ("30s"). The
    optional judgements (slowCallDuration, maxOpenTimeout, retryBudget, ...) are there
    only when set."""

    name: str
    generation: int
    uid: str
    openTimeout: str
    window: str
    failureRatio: float
    minimumThroughput: int
    successThreshold: int
    halfOpenPermittedCalls: int
    slowCallDuration: str
    slowCallRatio: float
    maxOpenTimeout: str
    mode: str
    scope: str
    retryBudget: dict[str, int]
    throttle: dict[str, float]
    fleet: dict[str, int]
    verdict: dict[str, object]
    candidate: dict[str, object]


class _Described(TypedDict):
    name: str
    state: str
    """closed, open or half_open (a State's value)."""
    mode: str
    counts: Counts
    permits: PermitFigures
    policy: Policy
    generation: int
    """The generation of the published config it runs; 0 for the default policy."""


class Description(_Described, total=False):
    """A breaker as fuseboxd serves it (GET /v1/breakers/{name}; docs/fuseboxd.md)."""

    candidate: dict[str, object]
    """What its candidate policy did in shadow (docs/design.md §11); absent without one."""
