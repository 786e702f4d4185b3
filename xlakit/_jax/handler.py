"""Compatibility names for code written against xlakit 0.1 (the bundle loader imports two of them).

The cache policy that lived here moved to :mod:`xlakit.cache.handler` (``StoreHandler``) and
:mod:`xlakit.cache.path` (the fetch/publish path). What remains are adapters:

* :func:`_expectations` = :func:`xlakit._jax.environment.expectations`
* :func:`_memory_stats` = :func:`xlakit._jax.executables.memory_stats`
"""

from __future__ import annotations

from typing import Any

from xlakit._jax.environment import expectations as _expectations
from xlakit._jax.executables import memory_stats as _memory_stats

__all__ = ["_expectations", "_memory_stats"]


def __getattr__(name: str) -> Any:
    if name == "StoreHandler":  # resolved lazily: this adapter layer never imports the feature layer eagerly
        import importlib

        return importlib.import_module("xlakit.cache.handler").StoreHandler
    raise AttributeError(f"module 'xlakit._jax.handler' has no attribute {name!r}")
