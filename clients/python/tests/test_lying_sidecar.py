"""A sidecar that answers what fuseboxd never would (a test double of a misbehaving
peer): whatever it says, call() never raises after the call ran and never loses its
result; every 429 is a short-circuit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import fusebox
from fusebox.aio import AsyncClient

from .conftest import LyingSidecar

PERMIT = b'{"permit":"Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA","state":"closed","leaseMs":30000}\n'


def answer(status: str, body: bytes = b"", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body


# Answers to an acquire that are no decision: the call runs (fails open), once.
UNDECIDED = {
    "200 instead of 201": answer("200 OK", PERMIT),
    "201 without a permit": answer("201 Created", b'{"state":"closed","leaseMs":30000}'),
    "201 with a permit that is not an id": answer("201 Created", b'{"permit":"../../trip","state":"closed"}'),
    "201 with a number for a permit": answer("201 Created", b'{"permit":42}'),
    "201 of garbage": answer("201 Created", b"\x00\xffnot json"),
    "201 of a JSON array": answer("201 Created", b"[1,2]"),
    "500": answer("500 Internal Server Error", b'{"error":"boom"}'),
    "503 out of permits (the old daemon)": answer("503 Service Unavailable", b'{"error":"too many outstanding permits"}'),
    "302": answer("302 Found", b"", "Location: /elsewhere\r\n"),
    "404": answer("404 Not Found", b'{"error":"no such endpoint"}'),
    "chunked": b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "no Content-Length": b"HTTP/1.1 201 Created\r\n\r\n" + PERMIT,
    "not HTTP": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    "a head that never ends": b"HTTP/1.1 201 Created\r\n" + b"X: y\r\n" * 4000,
    "half an answer, then closed": b"HTTP/1.1 201 Crea",
    "closed without an answer": None,
}

# Refusals the client cannot fully read: still short-circuits (the fallback runs).
REFUSALS = {
    "429 with an unknown state": (answer("429 Too Many Requests", b'{"state":"sideways","reason":"open","retryAfterMs":10}'), 10),
    "429 permits exhausted, state closed": (answer("429 Too Many Requests", b'{"state":"closed","reason":"permits exhausted","retryAfterMs":20}'), 20),
    "429 of garbage with a Retry-After": (answer("429 Too Many Requests", b"<html>slow down</html>", "Retry-After: 3\r\n"), 3000),
    "429 with nothing": (answer("429 Too Many Requests"), 1000),
}

# Answers to a release, after the call ran: the result is kept, release() says False.
SETTLE_LIES = {
    "200": answer("200 OK", b"{}"),
    "500": answer("500 Internal Server Error", b'{"error":"boom"}'),
    "garbage": b"\x00\x01\x02\r\n\r\n",
    "closed without an answer": None,
}


@pytest.mark.parametrize("lie", UNDECIDED.keys())
def test_an_undecided_acquire_runs_the_call_once_and_keeps_its_result(
    lie: str, lying: Callable[[dict[str, bytes | None]], LyingSidecar]
) -> None:
    sidecar = lying({"acquire": UNDECIDED[lie], "release": answer("204 No Content")})
    client = fusebox.Client(sidecar.socket, timeout_ms=2000, backoff_ms=600_000)
    ran: list[int] = []
    result = client.breaker("payments-api").call(fallback=lambda c: "fallback", close=lambda: ran.append(1) or "result")
    assert result == "result"
    assert ran == [1]
    assert sidecar.asked == ["acquire"], "released a permit it never got"
    assert isinstance(client.unreachable, fusebox.SidecarUnreachable)
    assert client.stats().failed_open == 1


@pytest.mark.parametrize("lie", REFUSALS.keys())
def test_every_429_is_a_short_circuit(lie: str, lying: Callable[[dict[str, bytes | None]], LyingSidecar]) -> None:
    raw, retry_after_ms = REFUSALS[lie]
    sidecar = lying({"acquire": raw})
    client = fusebox.Client(sidecar.socket, timeout_ms=2000, max_retry_after_ms=0)
    ran: list[int] = []
    cause = client.breaker("payments-api").call(fallback=lambda c: c, close=lambda: ran.append(1))
    assert ran == [], "a refusal ran the call"
    assert isinstance(cause, fusebox.CircuitOpen)
    assert cause.retry_after_ms == retry_after_ms
    assert cause.state in (fusebox.State.OPEN, fusebox.State.HALF_OPEN, fusebox.State.CLOSED)
    assert client.unreachable is None


@pytest.mark.parametrize("lie", SETTLE_LIES.keys())
@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_a_lying_release_keeps_the_result(
    lie: str, outcome: str, lying: Callable[[dict[str, bytes | None]], LyingSidecar]
) -> None:
    sidecar = lying({"acquire": answer("201 Created", PERMIT), "release": SETTLE_LIES[lie]})
    client = fusebox.Client(sidecar.socket, timeout_ms=2000)
    b = client.breaker("payments-api")

    def run() -> str:
        if outcome == "raises":
            raise RuntimeError("down")
        return "result"

    result = b.call(fallback=lambda c: f"fallback after {c}", close=run)
    assert result == ("result" if outcome == "returns" else "fallback after down")
    # A kept-alive connection closed under a request is tried once more on a new one.
    assert sidecar.asked in (["acquire", "release"], ["acquire", "release", "release"])
    # The two-step form says the outcome did not count, and does not raise either.
    other = fusebox.Client(sidecar.socket, timeout_ms=2000).breaker("payments-api")
    permit = other.acquire()
    assert permit.id == "Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA"
    assert other.release(permit, True) is False


def test_a_400_is_raised_before_the_call_runs(lying: Callable[[dict[str, bytes | None]], LyingSidecar]) -> None:
    sidecar = lying({"acquire": answer("400 Bad Request", b'{"error":"breaker name \\"X\\": invalid"}')})
    ran: list[int] = []
    with pytest.raises(fusebox.SidecarError) as refused:
        fusebox.Client(sidecar.socket).breaker("payments-api").call(close=lambda: ran.append(1))
    assert refused.value.status == 400
    assert "invalid" in str(refused.value)
    assert ran == []


@pytest.mark.parametrize("lie", ["201 without a permit", "201 of garbage", "500", "closed without an answer"])
def test_asyncio_an_undecided_acquire_keeps_the_result(lie: str, lying: Callable[[dict[str, bytes | None]], LyingSidecar]) -> None:
    sidecar = lying({"acquire": UNDECIDED[lie], "release": SETTLE_LIES["garbage"]})

    async def scenario() -> None:
        client = AsyncClient(sidecar.socket, timeout_ms=2000)

        async def run() -> str:
            return "result"

        assert await client.breaker("payments-api").call(fallback=lambda c: "fallback", close=run) == "result"
        assert client.unreachable is not None

    asyncio.run(scenario())


def test_asyncio_a_lying_release_keeps_the_result(lying: Callable[[dict[str, bytes | None]], LyingSidecar]) -> None:
    sidecar = lying({"acquire": answer("201 Created", PERMIT), "release": SETTLE_LIES["500"]})

    async def scenario() -> None:
        client = AsyncClient(sidecar.socket, timeout_ms=2000)
        b = client.breaker("payments-api")
        permit = await b.acquire()
        assert await b.release(permit, fusebox.Outcome.SUCCESS) is False
        assert await b.call(close=lambda: "result") == "result"

    asyncio.run(scenario())


@pytest.mark.parametrize(("state", "asks"), [("open", 1), ("half_open", 3), ("closed", 3)])
def test_only_an_open_circuits_retry_after_is_honoured(
    state: str, asks: int, lying: Callable[[dict[str, bytes | None]], LyingSidecar]
) -> None:
    body = f'{{"state":"{state}","reason":"r","retryAfterMs":5000}}'.encode()
    sidecar = lying({"acquire": answer("429 Too Many Requests", body)})
    b = fusebox.Client(sidecar.socket, timeout_ms=2000, max_retry_after_ms=60_000).breaker("payments-api")
    for _ in range(3):
        assert isinstance(b.call(fallback=lambda c: c, close=lambda: "never"), fusebox.CircuitOpen)
    assert sidecar.asked == ["acquire"] * asks
