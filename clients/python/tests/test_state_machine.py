"""The breaker's states through a real fuseboxd, with the sync and the asyncio client."""

from __future__ import annotations

import asyncio

import pytest

import fusebox
from fusebox.aio import AsyncClient

from .conftest import PATIENT, Daemon, eventually


class Down(Exception):
    pass


def test_closed_open_half_open_closed(daemon: Daemon) -> None:
    daemon.publish("py-cycle")
    client = fusebox.Client(daemon.socket, **PATIENT)
    b = client.breaker("py-cycle")
    assert b.state() is fusebox.State.CLOSED

    causes: list[Exception] = []

    def fallback(cause: Exception) -> str:
        causes.append(cause)
        return "fallback"

    def failing() -> str:
        raise Down("payments-api is down")

    for _ in range(4):
        assert b.call(fallback=fallback, close=failing) == "fallback"
    assert all(isinstance(c, Down) for c in causes)
    assert b.state() is fusebox.State.OPEN

    ran: list[str] = []
    refused = b.call(fallback=lambda cause: cause, close=lambda: ran.append("close"))
    assert ran == [], "an open circuit ran the protected call"
    assert isinstance(refused, fusebox.CircuitOpen)
    assert (refused.state, refused.reason) == (fusebox.State.OPEN, "open")
    assert 0 < refused.retry_after_ms <= 1000
    assert "short-circuited" in str(refused)

    # After the open timeout (1s) a call probes, with the half_open callback.
    used: list[str] = []

    def probe_once() -> bool:
        result = b.call(
            fallback=lambda cause: "fallback",
            close=lambda: used.append("close") or "closed",
            half_open=lambda: used.append("half_open") or "probed",
        )
        return result == "probed"

    eventually("a probe after the open timeout", probe_once)
    assert used == ["half_open"]
    assert b.state() is fusebox.State.CLOSED
    assert b.call(fallback=lambda c: "fallback", close=lambda: "ok", half_open=lambda: "probed") == "ok"
    assert client.unreachable is None
    client.close()


def test_without_open_the_causes_are_raised(daemon: Daemon) -> None:
    daemon.publish("py-raise", minimumThroughput=2, openTimeout="30s")
    b = fusebox.Client(daemon.socket, **PATIENT).breaker("py-raise")
    for _ in range(2):
        with pytest.raises(Down):
            b.call(close=lambda: (_ for _ in ()).throw(Down("down")))
    with pytest.raises(fusebox.CircuitOpen) as refused:
        b.call(close=lambda: "never")
    assert refused.value.breaker == "py-raise"


def test_retry_after_is_honoured_without_asking(daemon: Daemon) -> None:
    daemon.publish("py-retry-after", openTimeout="30s")
    client = fusebox.Client(daemon.socket, max_retry_after_ms=60_000, **PATIENT)
    b = client.breaker("py-retry-after")
    b.trip()
    first = b.call(fallback=lambda cause: cause, close=lambda: "never")
    assert isinstance(first, fusebox.CircuitOpen)
    assert 25_000 < first.retry_after_ms <= 30_000
    asked = client.stats().requests
    for _ in range(50):
        again = b.call(fallback=lambda cause: cause, close=lambda: "never")
        assert isinstance(again, fusebox.CircuitOpen)
        assert again.retry_after_ms <= first.retry_after_ms
        assert again.reason == "open"
    assert client.stats().requests == asked, "a refusal within its Retry-After asked the sidecar again"
    assert client.stats().refused_locally == 50

    # With no Retry-After honoured, every call asks.
    eager = fusebox.Client(daemon.socket, max_retry_after_ms=0, **PATIENT)
    for _ in range(3):
        eager.breaker("py-retry-after").call(fallback=lambda cause: cause, close=lambda: "never")
    assert eager.stats().requests == 3


def test_two_step_acquire_and_release(daemon: Daemon) -> None:
    daemon.publish("py-two-step", minimumThroughput=2, openTimeout="30s")
    client = fusebox.Client(daemon.socket, **PATIENT)
    b = client.breaker("py-two-step")
    permit = b.acquire(lease_ms=5000)
    assert permit.id and permit.state is fusebox.State.CLOSED and permit.lease_ms == 5000
    assert b.release(permit, fusebox.Outcome.FAILURE) is True
    assert b.release(permit, fusebox.Outcome.FAILURE) is False, "a permit released twice counted twice"
    assert b.release(b.acquire(), fusebox.Outcome.IGNORED) is True
    assert b.describe()["counts"] == {"calls": 1, "failures": 1, "successes": 0, "slow": 0}
    assert b.release(b.acquire(), False) is True
    with pytest.raises(fusebox.CircuitOpen):
        b.acquire()


def test_every_client_sees_the_same_breaker(daemon: Daemon) -> None:
    daemon.publish("py-shared", minimumThroughput=2, openTimeout="30s")
    a = fusebox.Client(daemon.socket, **PATIENT).breaker("py-shared")
    other = fusebox.Client(daemon.socket, **PATIENT).breaker("py-shared")
    a.call(fallback=lambda c: None, close=lambda: (_ for _ in ()).throw(Down()))
    other.call(fallback=lambda c: None, close=lambda: (_ for _ in ()).throw(Down()))
    assert a.state() is fusebox.State.OPEN
    assert other.state() is fusebox.State.OPEN


def test_an_exception_that_is_no_failure_is_raised_and_counts_as_success(daemon: Daemon) -> None:
    daemon.publish("py-classify", minimumThroughput=2, openTimeout="30s")
    b = fusebox.Client(daemon.socket, **PATIENT).breaker("py-classify", is_failure=lambda e: not isinstance(e, KeyError))
    with pytest.raises(KeyError):
        b.call(fallback=lambda c: "fallback", close=lambda: {}["missing"])
    counts = b.describe()["counts"]
    assert (counts["calls"], counts["failures"]) == (1, 0)


def test_a_name_that_cannot_be_a_circuit_breaker_is_raised(daemon: Daemon) -> None:
    b = fusebox.Client(daemon.socket, **PATIENT).breaker("Not_A_Name")
    ran = []
    with pytest.raises(fusebox.SidecarError) as refused:
        b.call(fallback=lambda c: "fallback", close=lambda: ran.append(1))
    assert refused.value.status == 400
    assert not isinstance(refused.value, fusebox.SidecarUnreachable)
    assert ran == []


def test_asyncio_closed_open_half_open_closed(daemon: Daemon) -> None:
    daemon.publish("py-aio-cycle")

    async def scenario() -> None:
        async with AsyncClient(daemon.socket, **PATIENT) as client:
            b = client.breaker("py-aio-cycle")

            async def failing() -> str:
                raise Down("down")

            async def fallback(cause: Exception) -> str:
                return "fallback"

            results = await asyncio.gather(*(b.call(fallback=fallback, close=failing) for _ in range(4)))
            assert results == ["fallback"] * 4
            assert await b.state() is fusebox.State.OPEN
            refused = await b.call(fallback=lambda cause: cause, close=failing)
            assert isinstance(refused, fusebox.CircuitOpen) and refused.reason == "open"

            async def probed() -> str:
                return "probed"

            deadline = asyncio.get_running_loop().time() + 30
            while await b.call(fallback=fallback, close=failing, half_open=probed) != "probed":
                assert asyncio.get_running_loop().time() < deadline, "no probe within 30s of the open timeout"
                await asyncio.sleep(0.01)
            assert await b.state() is fusebox.State.CLOSED

            # A cancelled call counts for nothing.
            async def slow() -> str:
                await asyncio.sleep(60)
                return "never"

            task = asyncio.ensure_future(b.call(fallback=fallback, close=slow))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = asyncio.get_running_loop().time() + 30
            while client._settling:
                assert asyncio.get_running_loop().time() < deadline, "the cancelled call was never settled"
                await asyncio.sleep(0.01)
            assert (await b.describe())["counts"]["failures"] == 0

    asyncio.run(scenario())


def test_open_keyword_still_works_and_warns(daemon: Daemon) -> None:
    """call()'s fallback was named open=, which shadowed the builtin: the old name still
    runs it, with a DeprecationWarning; both names at once, or another keyword, are a
    TypeError."""
    daemon.publish("py-renamed")
    b = fusebox.Client(daemon.socket, **PATIENT).breaker("py-renamed")

    def failing() -> str:
        raise Down("down")

    with pytest.warns(DeprecationWarning, match="fallback="):
        assert b.call(open=lambda cause: "old name", close=failing) == "old name"
    with pytest.raises(TypeError, match="both"):
        b.call(open=lambda c: "x", fallback=lambda c: "y", close=failing)
    with pytest.raises(TypeError, match="unexpected keyword argument 'opne'"):
        b.call(opne=lambda c: "x", close=failing)

    async def old_name() -> str:
        return await AsyncClient(daemon.socket, **PATIENT).breaker("py-renamed").call(open=lambda c: "async old name", close=failing)

    with pytest.warns(DeprecationWarning, match="fallback="):
        assert asyncio.run(old_name()) == "async old name"


def test_a_concurrency_limit_reached_is_a_short_circuit(daemon: Daemon) -> None:
    # The pod's share of the fleet's limit on calls in flight (docs/design.md §12): one.
    daemon.publish("py-bulkhead", concurrency={"share": 1, "pods": 0, "generation": 1, "maxWait": "0s"})
    client = fusebox.Client(daemon.socket, **PATIENT)
    b = client.breaker("py-bulkhead")
    held = b.acquire()
    ran: list[str] = []
    refused = b.call(fallback=lambda cause: cause, close=lambda: ran.append("close"))
    assert ran == [], "a call over the limit ran"
    assert isinstance(refused, fusebox.CircuitOpen)
    assert (refused.state, refused.reason) == (fusebox.State.CLOSED, "concurrency")
    assert 0 < refused.retry_after_ms <= 1000
    with pytest.raises(fusebox.CircuitOpen) as raised:
        b.call(close=lambda: "never")
    assert raised.value.reason == "concurrency"
    # The circuit is closed: the refusal is not honoured without asking, and the slot a
    # release frees is the next call's.
    assert b.release(held, fusebox.Outcome.SUCCESS) is True
    assert b.call(fallback=lambda cause: "fallback", close=lambda: "ran") == "ran"
    assert client.stats().refused_locally == 0
    assert b.describe()["concurrency"]["limited"] == 2
