"""What the sync and asyncio clients share: when to ask the sidecar at all, and what its
answers mean. No I/O here."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from ._http import Answer, Malformed, path_segment
from ._types import CircuitOpen, Description, Outcome, Permit, SidecarError, SidecarUnreachable, State, Stats, Unreachable

DEFAULT_SOCKET = "/var/run/fusebox/fusebox.sock"

log = logging.getLogger("fusebox")

# fuseboxd's permit ids are base32; anything else could break the request line it goes in.
_PERMIT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

_STATES = frozenset(s.value for s in State)

# When a refusal says nothing usable about when to ask again: long enough not to spin,
# as fuseboxd's own default for a refusal it cannot time.
_UNKNOWN_RETRY_AFTER_MS = 1000


@dataclass(frozen=True, slots=True)
class Options:
    socket: str
    connect_timeout_ms: int
    timeout_ms: int
    backoff_ms: int
    max_retry_after_ms: int

    def __post_init__(self) -> None:
        for name in ("connect_timeout_ms", "timeout_ms", "backoff_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"fusebox: {name} must be a positive number of milliseconds, not {value!r}")
        if not isinstance(self.max_retry_after_ms, int) or self.max_retry_after_ms < 0:
            raise ValueError(f"fusebox: max_retry_after_ms must be zero or more milliseconds, not {self.max_retry_after_ms!r}")


IsFailure = Callable[[Exception], bool]
R = TypeVar("R")
F = TypeVar("F")


def every_exception(_: Exception) -> bool:
    return True


class Sidecar:
    """One client's view of its sidecar: whether it is backing off, the refusals it still
    honours, and its counters. Safe for threads; the asyncio client uses it from one."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._unreachable: SidecarUnreachable | None = None
        self._refusals: dict[str, tuple[float, CircuitOpen]] = {}
        self._connects = 0
        self._requests = 0
        self._failed_open = 0
        self._refused_locally = 0

    # Counters.

    def connected(self) -> None:
        with self._lock:
            self._connects += 1

    def requested(self) -> None:
        with self._lock:
            self._requests += 1

    def stats(self) -> Stats:
        with self._lock:
            return Stats(self._connects, self._requests, self._failed_open, self._refused_locally)

    # The dead-sidecar rule (docs/design.md §8).

    @property
    def unreachable(self) -> SidecarUnreachable | None:
        return self._unreachable

    def backing_off(self) -> bool:
        return time.monotonic() < self._down_until

    def down(self, error: SidecarUnreachable) -> None:
        """The sidecar could not decide: nothing asks it again for backoff_ms."""
        with self._lock:
            self._down_until = time.monotonic() + self.options.backoff_ms / 1000
            first = self._unreachable is None
            self._unreachable = error
        if first:
            log.warning(
                "%s; breakers fail open (or closed, as each was made) without asking it, trying again every %d ms",
                error,
                self.options.backoff_ms,
            )

    def _answered(self, read: Callable[[], R]) -> R:
        """Reads an answer with read; any answer it can read (a refusal of the request
        included) shows the sidecar deciding again."""
        try:
            result = read()
        except Malformed:
            raise
        except BaseException:
            self.up()
            raise
        self.up()
        return result

    def up(self) -> None:
        if self._unreachable is None:
            return
        with self._lock:
            was, self._unreachable = self._unreachable, None
        if was is not None:
            log.info("fusebox: the sidecar at %s answers again", self.options.socket)

    def unreachable_error(self, what: str, cause: BaseException | str) -> SidecarUnreachable:
        return SidecarUnreachable(f"fusebox: {what}: sidecar unreachable at {self.options.socket}: {cause}")

    # Acquiring.

    def without_asking(self, name: str, when: Unreachable) -> Permit | CircuitOpen | None:
        """What acquire() answers without a request: a refusal still within its Retry-After,
        or, while backing off, what the breaker does when the sidecar cannot decide."""
        now = time.monotonic()
        refusal = self._refusals.get(name)
        if refusal is not None:
            until, cause = refusal
            if now < until:
                with self._lock:
                    self._refused_locally += 1
                left = max(1, int((until - now) * 1000))
                return CircuitOpen(name, cause.state, cause.reason, left)
            self._refusals.pop(name, None)
        if now < self._down_until:
            return self.cannot_decide(name, when)
        return None

    def cannot_decide(self, name: str, when: Unreachable) -> Permit | CircuitOpen:
        if when is Unreachable.FAIL_CLOSED:
            return CircuitOpen(name, State.OPEN, "unreachable", self.options.backoff_ms)
        with self._lock:
            self._failed_open += 1
        return Permit(name, None, State.CLOSED, 0, time.monotonic())

    def permit(self, name: str, answer: Answer) -> Permit | CircuitOpen:
        return self._answered(lambda: self._permit(name, answer))

    def _permit(self, name: str, answer: Answer) -> Permit | CircuitOpen:
        """Reads the answer to an acquire: a permit, a refusal, a SidecarError for a request
        the sidecar judged wrong, or Malformed."""
        if answer.status == 201:
            doc = answer.document()
            permit = doc.get("permit")
            if not isinstance(permit, str) or not _PERMIT_ID.fullmatch(permit):
                raise Malformed(f"a 201 without a permit ({answer.body[:80]!r})")
            state = State.HALF_OPEN if doc.get("state") == State.HALF_OPEN else State.CLOSED
            lease = doc.get("leaseMs")
            return Permit(name, permit, state, lease if isinstance(lease, int) else 0, time.monotonic())
        if answer.status == 429:
            return self._refusal(name, answer)
        if answer.status in (400, 413):
            raise SidecarError(f"fusebox: {name}: the sidecar refused the request ({answer.status}): {_why(answer)}", answer.status)
        raise Malformed(f"a {answer.status} to an acquire: {_why(answer)}")

    def _refusal(self, name: str, answer: Answer) -> CircuitOpen:
        """Every 429 is a short-circuit, whatever its state and reason: a refusal the
        client does not understand still says not to call."""
        try:
            doc = answer.document()
        except Malformed:
            doc = {}
        named = doc.get("state")
        state = State(named) if isinstance(named, str) and named in _STATES else State.OPEN
        reason = doc.get("reason")
        retry_after = doc.get("retryAfterMs")
        if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
            header = answer.headers.get("retry-after", "")
            retry_after = int(header) * 1000 if header.isdigit() else _UNKNOWN_RETRY_AFTER_MS
        cause = CircuitOpen(name, state, reason if isinstance(reason, str) and reason else "unknown", retry_after)
        # Only an open circuit's wait is a time: a half-open one's is a guess, and the probe
        # in flight may close the circuit any moment.
        honour = min(retry_after, self.options.max_retry_after_ms) if state is State.OPEN else 0
        if honour > 0:
            self._refusals[name] = (time.monotonic() + honour / 1000, cause)
        return cause

    # Releasing.

    def settled(self, answer: Answer) -> bool:
        return self._answered(lambda: self._settled(answer))

    def _settled(self, answer: Answer) -> bool:
        if answer.status == 204:
            return True
        if answer.status == 410:
            return False
        raise Malformed(f"a {answer.status} to a release: {_why(answer)}")

    # Reading and tripping.

    def description(self, name: str, answer: Answer) -> Description:
        return self._answered(lambda: self._description(name, answer))

    def _description(self, name: str, answer: Answer) -> Description:
        if answer.status == 200:
            return cast(Description, answer.document())
        if 400 <= answer.status < 500:
            raise SidecarError(f"fusebox: {name}: the sidecar refused the request ({answer.status}): {_why(answer)}", answer.status)
        raise Malformed(f"a {answer.status} to a read: {_why(answer)}")

    def tripped(self, name: str, answer: Answer) -> None:
        return self._answered(lambda: self._tripped(name, answer))

    def _tripped(self, name: str, answer: Answer) -> None:
        if answer.status == 204:
            return
        if 400 <= answer.status < 500:
            raise SidecarError(f"fusebox: {name}: the sidecar refused the request ({answer.status}): {_why(answer)}", answer.status)
        raise Malformed(f"a {answer.status} to a trip: {_why(answer)}")


def acquire_request(name: str, lease_ms: int | None) -> tuple[str, str, bytes]:
    body = b"" if lease_ms is None else json.dumps({"leaseMs": lease_ms}).encode()
    return "POST", f"/v1/breakers/{path_segment(name)}/permits", body


def release_request(permit: Permit, outcome: Outcome) -> tuple[str, str, bytes]:
    duration = max(0, int((time.monotonic() - permit.granted_at) * 1000))
    body = f'{{"outcome":"{outcome}","durationMs":{duration}}}'.encode()
    return "POST", f"/v1/permits/{permit.id}", body


def describe_request(name: str) -> tuple[str, str, bytes]:
    return "GET", f"/v1/breakers/{path_segment(name)}", b""


def trip_request(name: str) -> tuple[str, str, bytes]:
    return "POST", f"/v1/breakers/{path_segment(name)}/trip", b""


def state_of(description: Description) -> State:
    named: object = description.get("state")
    if isinstance(named, str) and named in _STATES:
        return State(named)
    raise Malformed(f"a breaker whose state is {named!r}")


class Stale(Exception):
    """A kept-alive connection the sidecar had closed before this request reached it: the
    request is sent again on a new one."""


def describe_error(e: BaseException) -> str:
    """What went wrong reaching the sidecar, in words for a log line."""
    if isinstance(e, Stale):
        return "the sidecar closed the connection"
    if isinstance(e, Malformed):
        return f"it answered {e}"
    if isinstance(e, TimeoutError):
        return str(e) or "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _why(answer: Answer) -> str:
    try:
        error = answer.document().get("error")
    except Malformed:
        return repr(answer.body[:80]) if answer.body else "no body"
    return str(error) if error is not None else "no error given"


def fallback_of(fallback: F | None, renamed: dict[str, F]) -> F | None:
    """The fallback call() was given: fallback=, or open=, its name until it shadowed the
    builtin no more, which still works with a DeprecationWarning. Any other keyword is the
    TypeError Python would raise."""
    for keyword in renamed:
        if keyword != "open":
            raise TypeError(f"call() got an unexpected keyword argument {keyword!r}")
    if "open" not in renamed:
        return fallback
    if fallback is not None:
        raise TypeError("call() got both fallback= and open=, its former name")
    warnings.warn("call(open=...) is deprecated: pass fallback=", DeprecationWarning, stacklevel=3)
    return renamed["open"]
