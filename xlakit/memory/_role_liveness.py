"""Live bytes per role at every program step, each byte charged once: the liveness of an attribution in the
user's terms (residual, recomputed, optimizer state ...) rather than XLA's buffer kinds.

The charging rule (:mod:`xlakit.memory._charging`) is the same at every step, so the peak step's split equals
:meth:`xlakit.memory.Peak.by` ``("role")``: a result written into a donated argument (role ``aliased``) takes
the argument's bytes from the step it is written; otherwise the larger of two buffers sharing bytes is
charged. The charges at a step sum to the bytes occupied there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xlakit.memory._charging import charge, step_array

__all__ = ["charge", "role_columns", "liveness_frame", "TAKES_OVER", "nullable_ints", "int_array"]

#: Roles charged before the other buffers sharing their bytes: a result written into a donated argument.
TAKES_OVER = frozenset({"aliased"})


def nullable_ints(column: Any) -> list[int | None]:
    """A nullable column (allocation, offset) as ints and None."""
    import pandas as pd

    if isinstance(column, pd.Series):
        missing = column.isna().to_numpy()
        values = column.astype("Int64").to_numpy(dtype="int64", na_value=0).tolist()
        return [None if m else v for v, m in zip(values, missing.tolist(), strict=True)] if missing.any() else values
    values = column.tolist() if hasattr(column, "tolist") else list(column)
    return [None if v is None or v is pd.NA or v != v else int(v) for v in values]


def role_columns(buffers: Any, steps: int, roles: Sequence[str]) -> dict[str, Any]:
    """``{role: bytes at step 0, 1, ... (a numpy int64 array)}`` for every role in ``roles`` (and any other role
    the buffers hold), from an attribution's buffers (a frame, or its columns as lists: ``bytes``, ``role``,
    ``allocation``, ``offset``, ``start``, ``end``; a buffer with ``start`` < 0 has no place in the schedule and is
    left out), by one sweep over the schedule (:func:`xlakit.memory._charging.step_array`)."""
    import numpy as np

    role_of = list(map(str, buffers["role"]))
    names = list(dict.fromkeys([*roles, *dict.fromkeys(role_of)]))
    label = {r: k for k, r in enumerate(names)}
    cols = step_array(steps, _ints(buffers["start"]), _ints(buffers["end"]), _ints(buffers["bytes"]),
                      _ints(buffers["allocation"]), _ints(buffers["offset"]),
                      np.array(list(map(label.__getitem__, role_of)), dtype=np.int64), len(names),
                      np.array(list(map(TAKES_OVER.__contains__, role_of)), dtype=bool))
    return dict(zip(names, cols, strict=True))


def _ints(column: Any) -> Any:
    """A column of ints (a nullable frame column, or a list with None) as numpy int64, -1 where missing."""
    import numpy as np
    import pandas as pd

    if isinstance(column, pd.Series):
        return column.astype("Int64").to_numpy(dtype=np.int64, na_value=-1)
    values, missing = int_array(column)
    values[missing] = -1
    return values


def int_array(values: Sequence[int | None]) -> tuple[Any, Any]:
    """A column of ints and None as numpy: (int64 values, 0 where None; bool mask of the None)."""
    import numpy as np

    try:  # most columns have no None: numpy reads the list at once
        return np.array(values, dtype=np.int64), np.zeros(len(values), dtype=bool)
    except TypeError:
        held = np.array(values, dtype=object)
        missing = held == None  # noqa: E711 - element by element at C speed (``is None`` for these values)
        held[missing] = 0
        return held.astype(np.int64), missing


def liveness_frame(order: Sequence[int], mod: Any, buffers: Any, roles: Sequence[str]) -> Any:
    """An attribution's liveness: one row per program step (``order``: the instruction ids of the flattened
    schedule, ``mod``: the module), with step, instruction, opcode, one column of live bytes per role (``roles``
    first, then any other the buffers hold; each byte charged once, as at the peak) and live_bytes (their sum: the
    bytes occupied). ``buffers``: as :func:`role_columns` takes them."""
    import numpy as np
    import pandas as pd

    get, known = mod.instructions.get, getattr(mod.instructions, "known", {})  # decoded ones: a plain dict
    instructions = [known.get(iid) or get(iid) for iid in order]
    columns: dict[str, Any] = {"step": np.arange(len(order), dtype=np.int64),
                               "instruction": [i.name if i is not None else None for i in instructions],
                               "opcode": [i.opcode if i is not None else None for i in instructions]}
    by_role = role_columns(buffers, len(order), roles)
    columns.update(by_role)
    columns["live_bytes"] = np.sum(list(by_role.values()), axis=0, dtype=np.int64) if by_role else 0
    frame = pd.DataFrame(columns)
    frame.attrs["stacked_by"] = "role"
    return frame
