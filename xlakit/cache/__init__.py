"""The cache feature: xlakit's store as JAX's compilation cache, explicitly or transparently.

Modules, one concept each:

* :mod:`.decision` — :class:`Decision`, the outcome of one lookup or publish, as a value.
* :mod:`.path` — :class:`CachePath`, the one fetch/publish path (transparent mode, ExecutableCache, bundles).
* :mod:`.entry` — what an entry holds: payload kinds, header fields, module text packing.
* :mod:`.handler` — :class:`StoreHandler`, the answers to JAX's compile hooks.
* :mod:`.transparent` — :class:`TransparentCache` and :func:`enable` / :func:`disable` / :func:`active`.
* :mod:`.executable` — :class:`ExecutableCache` (jit, compile, load, explain).
* :mod:`.explaining` — explanations of a lookup against a store.
* :mod:`.folder` — :class:`CacheFolder`: a cache folder as data, without JAX (CLI, report, widgets).
* :mod:`.environment` — :func:`current_environment` / :func:`current_partition` of this process (JAX).

Importing this package imports neither JAX nor pandas, nor any of its modules: each name loads its own module
on first use (a bundle load needs :mod:`.path` and :mod:`.entry`, not transparent mode or the folder view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xlakit.cache.decision import DECISION_KINDS, Decision
    from xlakit.cache.environment import current_environment, current_partition
    from xlakit.cache.executable import CacheEvent, ExecutableCache
    from xlakit.cache.folder import CacheFolder
    from xlakit.cache.path import CachePath
    from xlakit.cache.transparent import TransparentCache, active, disable, enable

__all__ = ["Decision", "DECISION_KINDS", "CachePath", "CacheFolder", "ExecutableCache", "CacheEvent",
           "TransparentCache", "enable", "disable", "active", "current_environment", "current_partition"]

from xlakit._lazy import lazy_exports  # noqa: E402 - placed by the names it serves

#: Public name -> the module that defines it.
_HOME = {
    **dict.fromkeys(("DECISION_KINDS", "Decision"), "decision"),
    **dict.fromkeys(("current_environment", "current_partition"), "environment"),
    **dict.fromkeys(("CacheEvent", "ExecutableCache"), "executable"),
    "CacheFolder": "folder",
    "CachePath": "path",
    **dict.fromkeys(("TransparentCache", "active", "disable", "enable"), "transparent"),
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals(), __all__)
