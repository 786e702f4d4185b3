"""The columns of an attribution's buffers frame (:data:`BUFFER_COLUMNS`) and the frame
made from them, each column built with its dtype rather than inferred from thousands of Python objects."""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["BUFFER_COLUMNS", "TEXT_COLUMNS", "buffer_columns", "buffer_frame"]

#: The buffers frame's columns, in order (:class:`xlakit.memory.Attribution` says what each holds).
BUFFER_COLUMNS = ["buffer_id", "instruction", "opcode", "bytes", "shape", "dtype", "role", "scope", "phase",
                  "layer", "source", "file", "line", "parameter", "output", "donated", "allocation", "offset",
                  "start", "end", "stack", "block"]

TEXT_COLUMNS = ("phase", "scope", "layer", "source", "file", "line", "stack")


def buffer_columns(rows: Any, ranges: dict[int, tuple[int, int]], table: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The buffers' columns (:data:`BUFFER_COLUMNS`): those of the assignment as they
    are (read, not changed), the rest from ``table`` (the attribution's rows: role, parameter, output, donated,
    and the :data:`TEXT_COLUMNS`); the columns filled later (output, parameter, layer, block) as lists."""
    spans = list(map(ranges.get, rows.ids, itertools.repeat((-1, -1), len(rows.ids))))
    starts, ends = (list(c) for c in zip(*spans, strict=True)) if spans else ([], [])
    role, parameter, output, donated, text = (list(c) for c in zip(*table, strict=True)) if table else (
        [] for _ in range(5))
    cols = dict(zip(TEXT_COLUMNS, (list(c) for c in zip(*text, strict=True)), strict=True)) if text else {
        c: [] for c in TEXT_COLUMNS}
    cols.update(buffer_id=rows.ids, instruction=rows.instructions, opcode=rows.opcodes, bytes=rows.sizes,
                shape=rows.shapes, dtype=rows.dtypes, role=role, parameter=parameter, output=output, donated=donated,
                allocation=rows.allocations, offset=rows.offsets, start=starts, end=ends, block=[None] * len(role))
    return {c: cols[c] for c in BUFFER_COLUMNS}


def buffer_frame(cols: dict[str, list[Any]]) -> tuple[Any, dict[str, Any]]:
    """The buffers frame from its column lists (:func:`buffer_columns`), each column built with its dtype (int64,
    nullable Int64, bool, object where a value may be None) rather than inferred from thousands of Python objects;
    and the columns the liveness sweeps as numpy int64 (-1 where missing), made once for both."""
    import numpy as np
    import pandas as pd

    from xlakit.memory._role_liveness import int_array
    typed: dict[str, Any] = dict(cols)
    for name in ("buffer_id", "bytes", "start", "end"):
        typed[name] = np.array(cols[name], dtype=np.int64)
    swept = {name: typed[name] for name in ("bytes", "start", "end")}
    for name in ("line", "allocation", "offset"):
        values, missing = int_array(cols[name])
        typed[name] = pd.arrays.IntegerArray(values, missing)
        swept[name] = np.where(missing, -1, values)
    typed["donated"] = np.array(cols["donated"], dtype=bool)
    typed["block"] = pd.Series(np.array(cols["block"], dtype=object), dtype=object)
    return pd.DataFrame(typed, columns=BUFFER_COLUMNS), swept
