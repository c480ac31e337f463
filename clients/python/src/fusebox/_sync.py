"""The blocking client: for threads, WSGI workers, scripts."""

from __future__ import annotations

import socket as stdsocket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from . import _core
from ._core import DEFAULT_SOCKET, IsFailure, Options, Sidecar, Stale, describe_error
from ._http import Answer, Malformed, Reader, encode
from ._types import CircuitOpen, Description, Outcome, Permit, SidecarUnreachable, State, Stats, Unreachable

T = TypeVar("T")

# Idle connections a client keeps for its threads; more are opened when more threads
# call at once, and closed after.
_MAX_IDLE = 8


class Client:
    """Speaks the pod's fuseboxd over its Unix socket (docs/design.md §8). Keeps its
    connections alive and is safe to share between threads.

    After a refused or timed-out connection, or an answer fuseboxd would never give, the
    client does not touch the socket for ``backoff_ms``: every breaker then fails open
    (runs the call) or closed at once, as each was made, and logs a warning on the
    ``fusebox`` logger when that begins (and an info line when the sidecar answers
    again). ``unreachable`` says why, while it lasts.
    """

    def __init__(
        self,
        socket: str = DEFAULT_SOCKET,
        *,
        connect_timeout_ms: int = 100,
        timeout_ms: int = 250,
        backoff_ms: int = 1000,
        max_retry_after_ms: int = 1000,
    ) -> None:
        self._sidecar = Sidecar(Options(socket, connect_timeout_ms, timeout_ms, backoff_ms, max_retry_after_ms))
        self._idle: list[stdsocket.socket] = []
        self._lock = threading.Lock()

    def breaker(
        self,
        name: str,
        *,
        when_unreachable: Unreachable = Unreachable.FAIL_OPEN,
        is_failure: IsFailure | None = None,
    ) -> Breaker:
        """A breaker of this pod, by its CircuitBreaker name. ``is_failure`` decides which
        exceptions of a call count as failures (default: all); one it does not count is a
        success, and call() raises it without running the fallback."""
        return Breaker(self, name, when_unreachable, is_failure or _core.every_exception)

    @property
    def socket(self) -> str:
        return self._sidecar.options.socket

    @property
    def unreachable(self) -> SidecarUnreachable | None:
        """Why the sidecar could not decide, from its first refused or timed-out connection
        (or malformed answer) until it answers again; None while it answers."""
        return self._sidecar.unreachable

    def stats(self) -> Stats:
        return self._sidecar.stats()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # The wire.

    def _exchange(self, what: str, request: tuple[str, str, bytes]) -> Answer:
        """One request and its answer, or SidecarUnreachable (and the back-off begins)."""
        data = encode(*request)
        try:
            try:
                return self._send(data, reuse=True)
            except Stale:
                return self._send(data, reuse=False)
        except (OSError, Malformed, Stale) as e:
            error = self._sidecar.unreachable_error(what, describe_error(e))
            self._sidecar.down(error)
            raise error from e

    def _send(self, data: bytes, reuse: bool) -> Answer:
        options = self._sidecar.options
        conn = None
        if reuse:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
        kept = conn is not None
        if conn is None:
            conn = self._connect()
        deadline = time.monotonic() + options.timeout_ms / 1000
        reader = Reader()
        received = False
        try:
            conn.settimeout(options.timeout_ms / 1000)
            self._sidecar.requested()
            conn.sendall(data)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no answer within {options.timeout_ms} ms")
                conn.settimeout(left)
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    raise TimeoutError(f"no answer within {options.timeout_ms} ms") from None
                if not chunk:
                    if kept and not received:
                        raise Stale()
                    raise ConnectionResetError("the sidecar closed the connection before its answer was whole")
                received = True
                answer = reader.feed(chunk)
                if answer is not None:
                    break
        except BaseException as e:
            conn.close()
            if kept and not received and isinstance(e, (BrokenPipeError, ConnectionResetError)):
                raise Stale() from e
            raise
        if answer.keep_alive:
            with self._lock:
                if len(self._idle) < _MAX_IDLE:
                    self._idle.append(conn)
                    conn = None
        if conn is not None:
            conn.close()
        return answer

    def _connect(self) -> stdsocket.socket:
        self._sidecar.connected()
        conn = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        timeout_ms = self._sidecar.options.connect_timeout_ms
        try:
            conn.settimeout(timeout_ms / 1000)
            conn.connect(self._sidecar.options.socket)
        except TimeoutError:
            conn.close()
            raise TimeoutError(f"connecting timed out after {timeout_ms} ms") from None
        except BaseException:
            conn.close()
            raise
        return conn


class Breaker:
    """One CircuitBreaker of the pod, decided by its fuseboxd and so shared by every
    process of the pod. Made by Client.breaker() or fusebox.breaker()."""

    def __init__(self, client: Client, name: str, when_unreachable: Unreachable, is_failure: IsFailure) -> None:
        self.name = name
        self.client = client
        self._when = when_unreachable
        self._is_failure = is_failure

    def call(
        self,
        *,
        close: Callable[[], T],
        fallback: Callable[[Exception], T] | None = None,
        half_open: Callable[[], T] | None = None,
        **renamed: Callable[[Exception], T],
    ) -> T:
        """call(open, close, halfOpen), as utopia-php/circuit-breaker has it: runs ``close``
        while the circuit is closed (``half_open``, when given, while it probes), and
        ``fallback`` instead when the call is short-circuited (its cause a CircuitOpen) or
        when the call fails (its cause what it raised). Without ``fallback`` those are
        raised. ``open=``, its name until it shadowed the builtin no more, still works and
        warns (DeprecationWarning). A call that returns is a
        success; one interrupted (KeyboardInterrupt, SystemExit) counts for nothing."""
        fallback = _core.fallback_of(fallback, renamed)
        permit = self._admit(None)
        if isinstance(permit, CircuitOpen):
            if fallback is None:
                raise permit
            return fallback(permit)
        run = half_open if permit.probe and half_open is not None else close
        try:
            result = run()
        except Exception as e:
            failed = self._is_failure(e)
            self.release(permit, Outcome.FAILURE if failed else Outcome.SUCCESS)
            if failed and fallback is not None:
                return fallback(e)
            raise
        except BaseException:
            self.release(permit, Outcome.IGNORED)
            raise
        self.release(permit, Outcome.SUCCESS)
        return result

    def acquire(self, lease_ms: int | None = None) -> Permit:
        """The first step of a call made in two: a Permit, or CircuitOpen raised. Release
        the permit with the call's outcome."""
        permit = self._admit(lease_ms)
        if isinstance(permit, CircuitOpen):
            raise permit
        return permit

    def release(self, permit: Permit, outcome: Outcome | bool) -> bool:
        """The second step: reports how the call went. False when the outcome counted for
        nothing (released already, its lease ran out, or the sidecar could not take it).
        It never raises: the call has run, and its result is the caller's."""
        if isinstance(outcome, bool):
            outcome = Outcome.SUCCESS if outcome else Outcome.FAILURE
        if permit.id is None or self.client._sidecar.backing_off():
            return False
        try:
            answer = self.client._exchange("release", _core.release_request(permit, outcome))
            return self.client._sidecar.settled(answer)
        except SidecarUnreachable:
            return False
        except Malformed as e:
            self.client._sidecar.down(self.client._sidecar.unreachable_error("release", e))
            return False

    def state(self) -> State:
        """The state the sidecar holds now; while it cannot decide, the state calls are
        treated as (closed when failing open). Client.unreachable says which."""
        if not self.client._sidecar.backing_off():
            try:
                return _core.state_of(self.describe())
            except (SidecarUnreachable, Malformed):
                pass
        return State.CLOSED if self._when is Unreachable.FAIL_OPEN else State.OPEN

    def describe(self) -> Description:
        """The breaker as the sidecar serves it: name, state, mode, counts, policy,
        generation. Raises SidecarUnreachable when it cannot."""
        sidecar = self.client._sidecar
        answer = self.client._exchange("describe", _core.describe_request(self.name))
        try:
            return sidecar.description(self.name, answer)
        except Malformed as e:
            error = sidecar.unreachable_error("describe", e)
            sidecar.down(error)
            raise error from None

    def trip(self) -> None:
        """Opens the circuit now, for every process of the pod (trip(), as utopia-php/circuit-breaker has it)."""
        sidecar = self.client._sidecar
        answer = self.client._exchange("trip", _core.trip_request(self.name))
        try:
            sidecar.tripped(self.name, answer)
        except Malformed as e:
            error = sidecar.unreachable_error("trip", e)
            sidecar.down(error)
            raise error from None

    def _admit(self, lease_ms: int | None) -> Permit | CircuitOpen:
        sidecar = self.client._sidecar
        local = sidecar.without_asking(self.name, self._when)
        if local is not None:
            return local
        try:
            answer = self.client._exchange("acquire", _core.acquire_request(self.name, lease_ms))
            return sidecar.permit(self.name, answer)
        except SidecarUnreachable:
            return sidecar.cannot_decide(self.name, self._when)
        except Malformed as e:
            sidecar.down(sidecar.unreachable_error("acquire", e))
            return sidecar.cannot_decide(self.name, self._when)

