"""The asyncio client: the same breakers, for coroutines (ASGI applications, workers on
an event loop). Use one AsyncClient per event loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from . import _core
from ._core import DEFAULT_SOCKET, IsFailure, Options, Sidecar, Stale, describe_error
from ._http import Answer, Malformed, Reader, encode
from ._types import CircuitOpen, Description, Outcome, Permit, SidecarUnreachable, State, Stats, Unreachable

__all__ = ["AsyncClient", "AsyncBreaker"]

T = TypeVar("T")

_MAX_IDLE = 8

_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class AsyncClient:
    """fusebox.Client for asyncio: the same options, back-off and answers, with every
    method a coroutine. Concurrent calls each take a kept-alive connection of their own."""

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
        self._idle: list[_Stream] = []
        self._settling: set[asyncio.Task[bool]] = set()

    def breaker(
        self,
        name: str,
        *,
        when_unreachable: Unreachable = Unreachable.FAIL_OPEN,
        is_failure: IsFailure | None = None,
    ) -> AsyncBreaker:
        return AsyncBreaker(self, name, when_unreachable, is_failure or _core.every_exception)

    @property
    def socket(self) -> str:
        return self._sidecar.options.socket

    @property
    def unreachable(self) -> SidecarUnreachable | None:
        """As Client.unreachable."""
        return self._sidecar.unreachable

    def stats(self) -> Stats:
        return self._sidecar.stats()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _exchange(self, what: str, request: tuple[str, str, bytes]) -> Answer:
        data = encode(*request)
        try:
            try:
                return await self._send(data, reuse=True)
            except Stale:
                return await self._send(data, reuse=False)
        except (OSError, Malformed, Stale) as e:
            error = self._sidecar.unreachable_error(what, describe_error(e))
            self._sidecar.down(error)
            raise error from e

    async def _send(self, data: bytes, reuse: bool) -> Answer:
        options = self._sidecar.options
        stream = self._idle.pop() if reuse and self._idle else None
        kept = stream is not None
        if stream is None:
            stream = await self._connect()
        reader, writer = stream
        parser = Reader()
        received = False
        try:
            self._sidecar.requested()
            writer.write(data)
            try:
                async with asyncio.timeout(options.timeout_ms / 1000):
                    await writer.drain()
                    while True:
                        chunk = await reader.read(65536)
                        if not chunk:
                            if kept and not received:
                                raise Stale()
                            raise ConnectionResetError("the sidecar closed the connection before its answer was whole")
                        received = True
                        answer = parser.feed(chunk)
                        if answer is not None:
                            break
            except TimeoutError:
                raise TimeoutError(f"no answer within {options.timeout_ms} ms") from None
        except BaseException as e:
            writer.close()
            if kept and not received and isinstance(e, (BrokenPipeError, ConnectionResetError)):
                raise Stale() from e
            raise
        if answer.keep_alive and len(self._idle) < _MAX_IDLE:
            self._idle.append(stream)
        else:
            writer.close()
        return answer

    async def _connect(self) -> _Stream:
        self._sidecar.connected()
        timeout_ms = self._sidecar.options.connect_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await asyncio.open_unix_connection(self._sidecar.options.socket)
        except TimeoutError:
            raise TimeoutError(f"connecting timed out after {timeout_ms} ms") from None


class AsyncBreaker:
    """fusebox.Breaker for asyncio. Its callbacks may be coroutine functions or plain
    ones."""

    def __init__(self, client: AsyncClient, name: str, when_unreachable: Unreachable, is_failure: IsFailure) -> None:
        self.name = name
        self.client = client
        self._when = when_unreachable
        self._is_failure = is_failure

    async def call(
        self,
        *,
        close: Callable[[], Awaitable[T] | T],
        fallback: Callable[[Exception], Awaitable[T] | T] | None = None,
        half_open: Callable[[], Awaitable[T] | T] | None = None,
        **renamed: Callable[[Exception], Awaitable[T] | T],
    ) -> T:
        """As Breaker.call (``open=`` still works as ``fallback=``, and warns); a cancelled
        call (asyncio.CancelledError) counts for nothing and is raised."""
        fallback = _core.fallback_of(fallback, renamed)
        permit = await self._admit(None)
        if isinstance(permit, CircuitOpen):
            if fallback is None:
                raise permit
            return await _result(fallback(permit))
        run = half_open if permit.probe and half_open is not None else close
        try:
            result = await _result(run())
        except Exception as e:
            failed = self._is_failure(e)
            await self.release(permit, Outcome.FAILURE if failed else Outcome.SUCCESS)
            if failed and fallback is not None:
                return await _result(fallback(e))
            raise
        except BaseException:
            # Cancelled: the outcome is settled on its own, so that a second cancellation
            # cannot interrupt it.
            task = asyncio.ensure_future(self.release(permit, Outcome.IGNORED))
            self.client._settling.add(task)
            task.add_done_callback(self.client._settling.discard)
            raise
        await self.release(permit, Outcome.SUCCESS)
        return result

    async def acquire(self, lease_ms: int | None = None) -> Permit:
        permit = await self._admit(lease_ms)
        if isinstance(permit, CircuitOpen):
            raise permit
        return permit

    async def release(self, permit: Permit, outcome: Outcome | bool) -> bool:
        if isinstance(outcome, bool):
            outcome = Outcome.SUCCESS if outcome else Outcome.FAILURE
        sidecar = self.client._sidecar
        if permit.id is None or sidecar.backing_off():
            return False
        try:
            return sidecar.settled(await self.client._exchange("release", _core.release_request(permit, outcome)))
        except SidecarUnreachable:
            return False
        except Malformed as e:
            sidecar.down(sidecar.unreachable_error("release", e))
            return False

    async def state(self) -> State:
        if not self.client._sidecar.backing_off():
            try:
                return _core.state_of(await self.describe())
            except (SidecarUnreachable, Malformed):
                pass
        return State.CLOSED if self._when is Unreachable.FAIL_OPEN else State.OPEN

    async def describe(self) -> Description:
        sidecar = self.client._sidecar
        answer = await self.client._exchange("describe", _core.describe_request(self.name))
        try:
            return sidecar.description(self.name, answer)
        except Malformed as e:
            error = sidecar.unreachable_error("describe", e)
            sidecar.down(error)
            raise error from None

    async def trip(self) -> None:
        sidecar = self.client._sidecar
        answer = await self.client._exchange("trip", _core.trip_request(self.name))
        try:
            sidecar.tripped(self.name, answer)
        except Malformed as e:
            error = sidecar.unreachable_error("trip", e)
            sidecar.down(error)
            raise error from None

    async def _admit(self, lease_ms: int | None) -> Permit | CircuitOpen:
        sidecar = self.client._sidecar
        local = sidecar.without_asking(self.name, self._when)
        if local is not None:
            return local
        try:
            answer = await self.client._exchange("acquire", _core.acquire_request(self.name, lease_ms))
            return sidecar.permit(self.name, answer)
        except SidecarUnreachable:
            return sidecar.cannot_decide(self.name, self._when)
        except Malformed as e:
            sidecar.down(sidecar.unreachable_error("acquire", e))
            return sidecar.cannot_decide(self.name, self._when)


async def _result(value: Awaitable[T] | T) -> T:
    if inspect.isawaitable(value):
        return cast(T, await value)
    return cast(T, value)

