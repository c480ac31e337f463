"""Fusebox circuit breakers for Python: the pod's breakers, decided by its fuseboxd
sidecar and so shared by every process of the pod (docs/clients.md).

    import fusebox

    payments = fusebox.breaker("payments-api")
    quote = payments.call(
        fallback=lambda cause: cache.get("quote"),   # short-circuited, or close raised
        close=lambda: api.quote(),
        half_open=lambda: api.quote(timeout=1),  # optional: used while probing
    )

fusebox.aio has the same for asyncio.
"""

from __future__ import annotations

import threading

from ._core import DEFAULT_SOCKET, IsFailure
from ._sync import Breaker, Client
from ._types import (
    CircuitOpen,
    Description,
    FuseboxError,
    Outcome,
    Permit,
    SidecarError,
    SidecarUnreachable,
    State,
    Stats,
    Unreachable,
)

__all__ = [
    "DEFAULT_SOCKET",
    "Breaker",
    "CircuitOpen",
    "Client",
    "Description",
    "FuseboxError",
    "Outcome",
    "Permit",
    "SidecarError",
    "SidecarUnreachable",
    "State",
    "Stats",
    "Unreachable",
    "breaker",
    "default_client",
]

_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process's client of the sidecar at DEFAULT_SOCKET, made on first use, so that
    every breaker made by fusebox.breaker() shares its connections and its back-off."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def breaker(
    name: str,
    *,
    when_unreachable: Unreachable = Unreachable.FAIL_OPEN,
    is_failure: IsFailure | None = None,
) -> Breaker:
    """A breaker of the pod, by its CircuitBreaker name, through default_client()."""
    return default_client().breaker(name, when_unreachable=when_unreachable, is_failure=is_failure)
