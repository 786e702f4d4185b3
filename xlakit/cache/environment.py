"""The environment this process compiles for, and the cache partition it reads and writes (imports JAX).

The public accessor to what :mod:`xlakit._jax.environment` computes, so that views (the CacheBrowser's
"Explain selected", the CLI) compare an entry with this process without reaching into the JAX adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xlakit._jax.environment import Environment

__all__ = ["current_environment", "current_partition"]


def current_environment(backend: str | None = None) -> Environment:
    """The environment of this process for ``backend`` (None: JAX's default backend): jax/jaxlib versions,
    platform, device kinds and count, compile-relevant flags; ``.to_dict()`` is what an entry records and
    ``.partition_name()`` its folder. Memoized per backend for the life of the process.

    Raises:
      RuntimeError: from JAX if ``backend`` is unknown or absent (e.g. ``"gpu"`` on a CPU-only install).
    """
    from xlakit._jax.environment import current_environment as _current

    return _current(backend)


def current_partition(backend: str | None = None) -> str:
    """The partition (folder name under the cache root) this process reads and writes for ``backend``, e.g.
    ``cpu-jaxlib0.10.2-x86_64-avx512-884c77ee``; see :func:`current_environment` for what it encodes.

    Raises:
      RuntimeError: as :func:`current_environment`.
    """
    return current_environment(backend).partition_name()
