"""The two private JAX names bundles use: lowering without Python source locations, and weak types.

JAX records the caller's stack in every op's location, so the same function exported from another line (or
another script) gives other module bytes, and a bundle module whose bytes change loses its compiled
programs. With the traceback-in-locations limit at 0 only op names remain, and the bytes depend on the
function alone. The limit is a thread-local config context in ``jax._src.config``
(``traceback_in_locations_limit``), present in JAX 0.9 to 0.12 (:data:`CHECKED_RANGE`). Outside that range,
or where the name is missing, the export still works, only with locations (less deterministic bytes).

A weakly typed parameter (a Python scalar) is marked weak again inside the exported function with
:func:`weakly_typed` (``jax._src.lax.lax._convert_element_type``).
"""

from __future__ import annotations

import contextlib
import re

__all__ = ["CHECKED_RANGE", "no_source_locations", "weakly_typed"]

CHECKED_RANGE = ((0, 9, 0), (0, 13, 0))  # [min, max): versions where the name was checked to exist


def no_source_locations():
    """A context manager under which ``jax.export`` lowers without source locations (a no-op context where
    this JAX lacks the setting)."""
    try:
        import jax

        version = tuple(int(n) for n in re.findall(r"\d+", jax.__version__)[:3])
        if not CHECKED_RANGE[0] <= version < CHECKED_RANGE[1]:
            return contextlib.nullcontext()
        from jax._src import config

        return config.traceback_in_locations_limit(0)
    except Exception:  # noqa: BLE001 - another JAX layout: export with locations
        return contextlib.nullcontext()


def weakly_typed(x):
    """``x`` (a traced array) marked weakly typed, as ``jax.jit`` traces a Python scalar parameter: a bundle
    stores such a parameter as a strongly typed array, and its exported function marks it weak again so that
    e.g. ``x_bf16 * scale`` stays bfloat16, as it did under ``jax.jit``. JAX has no public way to make a
    weakly typed value from an array; ``lax._convert_element_type(..., weak_type=True)`` is checked in
    :data:`CHECKED_RANGE`. Raises ``RuntimeError`` where this JAX lacks it (the export would change the
    parameter's type)."""
    try:
        from jax._src.lax.lax import _convert_element_type
    except ImportError as e:
        raise RuntimeError("this JAX cannot mark a bundle parameter weakly typed (jax._src.lax.lax."
                           "_convert_element_type is gone); pass the Python scalar as a typed array, e.g. "
                           "np.float32(x)") from e
    return _convert_element_type(x, weak_type=True)
