"""Lazy public names for a package: ``import xlakit.bundle`` stays cheap, and each name's module is imported
on first use (PEP 562 module ``__getattr__``), then cached as a plain attribute."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, home: Mapping[str, str], namespace: dict[str, Any], names: Iterable[str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``home`` maps a public name to the submodule defining it;
    ``namespace`` is the package's ``globals()``, where a resolved name is stored; ``names`` its ``__all__``.
    An unknown name raises AttributeError as a module attribute lookup does."""
    listed = list(names)

    def __getattr__(name: str) -> Any:
        if name in home:
            value = getattr(importlib.import_module(f"{package}.{home[name]}"), name)
            namespace[name] = value  # later lookups are plain attribute reads
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*namespace, *listed])

    return __getattr__, __dir__
