"""The dead-sidecar rule (docs/design.md §8): after a refused or timed-out connection the
client fails open at once, without touching the socket, for its back-off. What that costs
per call is a benchmark's figure (docs/benchmarks.md); here the behaviour is asserted:
the calls run, and no connection or request is attempted."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

import fusebox
from fusebox.aio import AsyncClient

from .conftest import PATIENT, Daemon, eventually

# Long enough that nothing in a test outlives it: the test sees the back-off, not its end.
LONG_BACKOFF_MS = 600_000
# A live daemon answers well within it on a loaded machine; a hung one costs it once.
HUNG_TIMEOUT_MS = 1000


def test_missing_socket_fails_open_without_touching_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = str(tmp_path / "none.sock")
    client = fusebox.Client(missing, backoff_ms=LONG_BACKOFF_MS)
    b = client.breaker("payments-api")
    with caplog.at_level(logging.INFO, logger="fusebox"):
        assert b.call(fallback=lambda c: "fallback", close=lambda: "called") == "called"
        assert client.stats().connects == 1
        for i in range(1000):
            assert b.call(fallback=lambda c: "fallback", close=lambda: i) == i
    stats = client.stats()
    assert (stats.connects, stats.requests) == (1, 0), "a call tried the socket while backing off"
    assert stats.failed_open == 1001
    assert isinstance(client.unreachable, fusebox.SidecarUnreachable)
    assert missing in str(client.unreachable)
    assert "No such file" in str(client.unreachable)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "the fail-open is logged once, not once a call"
    assert missing in warnings[0].getMessage()
    # state() says what calls get, and unreachable why.
    assert b.state() is fusebox.State.CLOSED
    with pytest.raises(fusebox.SidecarUnreachable):
        b.describe()


def test_refused_connection_fails_open(tmp_path: Path) -> None:
    path = str(tmp_path / "refusing.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(path)  # bound, never listening: connecting is refused
        client = fusebox.Client(path, backoff_ms=LONG_BACKOFF_MS)
        b = client.breaker("payments-api")
        for i in range(100):
            assert b.call(close=lambda: i) == i
        assert client.stats().connects == 1
        assert "refused" in str(client.unreachable)


def test_fail_closed_short_circuits_while_unreachable(tmp_path: Path) -> None:
    client = fusebox.Client(str(tmp_path / "none.sock"), backoff_ms=LONG_BACKOFF_MS)
    strict = client.breaker("payments-api", when_unreachable=fusebox.Unreachable.FAIL_CLOSED)
    ran: list[int] = []
    cause = strict.call(fallback=lambda c: c, close=lambda: ran.append(1))
    assert isinstance(cause, fusebox.CircuitOpen) and cause.reason == "unreachable"
    assert ran == []
    assert strict.state() is fusebox.State.OPEN
    assert client.stats().failed_open == 0


def test_hung_sidecar_costs_one_timeout_then_nothing(own_daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    own_daemon.publish("py-hung")
    client = fusebox.Client(own_daemon.socket, timeout_ms=HUNG_TIMEOUT_MS, backoff_ms=LONG_BACKOFF_MS)
    b = client.breaker("py-hung")
    assert b.call(close=lambda: "warm") == "warm"
    assert client.unreachable is None
    own_daemon.pause()
    try:
        with caplog.at_level(logging.WARNING, logger="fusebox"):
            # The first call waits for the timeout, then runs.
            assert b.call(fallback=lambda c: "fallback", close=lambda: "first") == "first"
            seen = client.stats()
            for i in range(200):
                assert b.call(fallback=lambda c: "fallback", close=lambda: i) == i
        after = client.stats()
        assert (after.connects, after.requests) == (seen.connects, seen.requests), "a call touched the hung sidecar"
        assert after.failed_open == seen.failed_open + 200
        assert f"no answer within {HUNG_TIMEOUT_MS} ms" in str(client.unreachable)
        assert len(caplog.records) == 1
    finally:
        own_daemon.resume()


def test_after_the_back_off_the_sidecar_is_asked_again(own_daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    own_daemon.publish("py-recovers")
    client = fusebox.Client(own_daemon.socket, timeout_ms=HUNG_TIMEOUT_MS, backoff_ms=50)
    b = client.breaker("py-recovers")
    own_daemon.pause()
    try:
        assert b.call(close=lambda: "unprotected") == "unprotected"
        assert client.unreachable is not None
    finally:
        own_daemon.resume()
    with caplog.at_level(logging.INFO, logger="fusebox"):
        eventually("a call through the sidecar again", lambda: b.call(close=lambda: True) and client.unreachable is None)
    assert any("answers again" in r.getMessage() for r in caplog.records)
    permit = b.acquire()
    assert permit.id is not None
    assert b.release(permit, True)


def test_asyncio_missing_socket_and_hung_sidecar(tmp_path: Path, own_daemon: Daemon) -> None:
    own_daemon.publish("py-aio-hung")

    async def scenario() -> None:
        missing = AsyncClient(str(tmp_path / "none.sock"), backoff_ms=LONG_BACKOFF_MS)
        b = missing.breaker("payments-api")
        results = [await b.call(close=lambda i=i: i) for i in range(500)]
        assert results == list(range(500))
        assert (missing.stats().connects, missing.stats().requests) == (1, 0)

        hung = AsyncClient(own_daemon.socket, timeout_ms=HUNG_TIMEOUT_MS, backoff_ms=LONG_BACKOFF_MS)
        h = hung.breaker("py-aio-hung")

        async def ok() -> str:
            return "ok"

        assert await h.call(close=ok) == "ok"
        own_daemon.pause()
        try:
            assert await h.call(close=ok) == "ok"
            seen = hung.stats()
            results = await asyncio.gather(*(h.call(close=ok) for _ in range(200)))
            assert results == ["ok"] * 200
            assert (hung.stats().connects, hung.stats().requests) == (seen.connects, seen.requests)
        finally:
            own_daemon.resume()
        await hung.aclose()

    asyncio.run(scenario())



def test_the_process_breakers_share_one_client() -> None:
    a, b = fusebox.breaker("payments-api"), fusebox.breaker("inventory")
    assert a.client is b.client is fusebox.default_client()
    assert a.client.socket == fusebox.DEFAULT_SOCKET == "/var/run/fusebox/fusebox.sock"
