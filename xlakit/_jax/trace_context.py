"""What JAX's tracing cache keys a trace on beyond the arguments, as comparable text: the global settings of its
trace context (x64, matmul precision, user contexts, XLA metadata...), the mesh the trace ran under, and the
``jax.jit`` options of the ``PjitInfo`` (donation, shardings, static arguments...). Read by
:mod:`xlakit._jax.retrace` at trace time; compared by :mod:`xlakit._jax.retrace_changes`.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["CONFIG_NAMES", "config", "mesh", "options"]

#: Global settings that change what JAX traces (part of its trace context), compared between traces.
CONFIG_NAMES = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
                "jax_numpy_dtype_promotion", "jax_default_prng_impl", "jax_debug_nans", "jax_disable_jit")


def config(kept: dict[str, tuple[str, Any]] | None = None) -> dict[str, str]:
    """The global settings in JAX's trace context (part of its tracing cache key) as text (an object printed with
    its address: by its hash), plus :data:`CONFIG_NAMES`. ``kept``, when given, gets each trace-context entry's
    ``(type name, value)`` under the same key: JAX tells them apart by ``==``, and two may print alike."""
    import enum

    import jax

    out = {n: str(getattr(jax.config, n, None)) for n in CONFIG_NAMES}
    try:
        from jax._src import config as jax_config

        names, values = jax_config.trace_context_names(), jax_config.trace_context()
    except Exception:  # noqa: BLE001 - an older JAX names no trace context: the listed settings only
        return out
    if len(names) != len(values):
        return out
    seen: collections.Counter[str] = collections.Counter()
    for name, value in zip(names, values, strict=True):
        seen[name] += 1
        if name in CONFIG_NAMES:
            continue
        text = str(value.value if isinstance(value, enum.Enum) else value)
        if " at 0x" in text and hasattr(value, "val"):  # XlaMetadata prints its address; its value is .val
            text = f"{type(value).__name__}({value.val!r})"
        if " at 0x" in text:  # an object printing its address: JAX's cache keys on its hash and ==, so do we
            hashed = _by_hash(value)
            if hashed is None:
                continue
            text = hashed
        # JAX names every jax.make_user_context "user_context" (and keeps one of its own): one key each
        key = name if seen[name] == 1 else f"{name} #{seen[name]}"
        out[key] = _shortened(text)
        if kept is not None:
            kept[key] = (type(value).__name__, value)
    return out


def _by_hash(value: Any) -> str | None:
    """``Mode (hash 1f2e...)``: a value whose text is its address, compared the way JAX's tracing cache compares
    it (equal values hash alike); None for an unhashable one (it cannot be in JAX's cache key either)."""
    try:
        return f"{type(value).__name__} object (hash {hash(value) & (2**64 - 1):x})"
    except Exception:  # noqa: BLE001
        return None


def _shortened(text: str, keep: int = 100) -> str:
    """``text`` cut for display, with a digest of the whole where cut: two long values that differ only at the
    end still compare unequal."""
    if len(text) <= keep + 20:
        return text
    import hashlib

    return f"{text[:keep]}… (sha256 {hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:12]})"


def mesh(ctx_mesh: Any, config: dict[str, str]) -> str:
    """The mesh the trace ran under: JAX's ``ctx_mesh`` (``jax.set_mesh``), with those of ``with mesh:`` and
    ``use_abstract_mesh`` (in the trace context, not in ``ctx_mesh``), taken out of ``config``: one change."""
    text = str(ctx_mesh if ctx_mesh is not None else "")
    legacy = config.pop("mesh_context_manager", "()")
    abstract = config.pop("abstract_mesh_context_manager", "None")
    if legacy != "()":
        text += f", with mesh {legacy}"
    if abstract != "None" and getattr(ctx_mesh, "empty", True):  # jax.set_mesh sets it to ctx_mesh's own
        text += f", abstract {abstract}"
    return text


#: The jax.jit options of JAX's ``PjitInfo`` a trace depends on (its tracing cache keys on them).
_OPTIONS = ("keep_unused", "inline", "device", "backend", "compiler_options_kvs")
#: Options JAX resolves into each other (names to positions and back): one change each.
_PAIRED = {"donation": ("donate_argnums", "donate_argnames"), "static arguments": ("static_argnums", "static_argnames")}
_TREE_OPTIONS = ("in_shardings", "out_shardings", "in_layouts", "out_layouts")


def options(ji: Any) -> dict[str, str]:
    """The jax.jit options of ``ji`` as comparable text (an object that prints its address: its type only)."""
    out: dict[str, str] = {}

    def text(value: Any) -> str:
        shown = repr(value)
        return type(value).__name__ if " at 0x" in shown else shown[:300]

    for label, names in _PAIRED.items():
        if all(hasattr(ji, n) for n in names):
            out[label] = ", ".join(f"{n}={text(getattr(ji, n))}" for n in names)
    for name in _OPTIONS:
        if hasattr(ji, name):
            out[name] = text(getattr(ji, name))
    for name in _TREE_OPTIONS:
        leaves = getattr(ji, f"{name}_leaves", None)
        if leaves is not None:
            out[name] = text(tuple(leaves))
    return out
