"""The old home of the cache policy, kept so that ``from xlakit._jax.handler import StoreHandler`` (code
written against xlakit 0.1) still works.

The policy moved to :mod:`xlakit.cache.handler` (``StoreHandler``) and :mod:`xlakit.cache.path` (the
fetch/publish path). ``StoreHandler`` is resolved on first access only, so this adapter layer never imports
the feature layer when it is itself imported. Nothing inside xlakit imports this module.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    """``StoreHandler`` from :mod:`xlakit.cache.handler`; AttributeError for any other name."""
    if name == "StoreHandler":
        import importlib

        return importlib.import_module("xlakit.cache.handler").StoreHandler
    raise AttributeError(f"module 'xlakit._jax.handler' has no attribute {name!r}")
