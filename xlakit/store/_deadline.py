"""One remote operation under one deadline, and how a failure of any layer below reads: the helpers
:class:`~xlakit.store.tiered.TieredStore` runs each remote read and upload through. No JAX."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from .base import DeadlineExceeded

__all__ = ["_with_deadline", "_timed_out", "_describe"]

_T = TypeVar("_T")


def _with_deadline(call: Callable[[], _T], timeout_s: float | None) -> _T:
    """``call()`` in a daemon thread, waiting at most ``timeout_s`` seconds; raises DeadlineExceeded after that
    (the call is abandoned, not cancelled: a daemon thread never delays interpreter exit)."""
    if timeout_s is None:
        return call()
    box: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the caller below
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name="xlakit-remote-read", daemon=True).start()
    if not done.wait(timeout_s):
        raise DeadlineExceeded(f"no answer from the remote store within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _timed_out(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) is a timeout of any layer: Python's TimeoutError (asyncio, sockets,
    aiohttp, the deadline) or a library's own timeout class (botocore's ``ReadTimeoutError`` and
    ``ConnectTimeoutError`` derive from no TimeoutError, only from classes named ``...Timeout``)."""
    seen: BaseException | None = e
    for _ in range(6):
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or any("Timeout" in k.__name__ for k in type(seen).__mro__):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e) or type(e).__name__}"[:300]
