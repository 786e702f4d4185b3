"""Grouping the buffers of an attribution or a peak: one table shape (group, bytes, count) for every view."""

from __future__ import annotations

from typing import Any

__all__ = ["GROUPS", "group_frame"]

GROUPS = ("source", "scope", "role", "parameter", "layer", "instruction", "output")


def group_frame(frame: Any, column: str, value: str = "bytes"):
    """``frame`` grouped by ``column``: a DataFrame with columns group, bytes, count, sorted by bytes
    descending (missing groups, e.g. a temporary's ``parameter``, shown as ``"—"``)."""
    import pandas as pd

    if column not in frame.columns:
        raise ValueError(f"cannot group by {column!r}: use one of {', '.join(GROUPS)}")
    keys = frame[column].astype(object).where(frame[column].notna(), "—")
    grouped = frame.assign(_g=keys).groupby("_g", sort=False)[value].agg(["sum", "count"]).reset_index()
    grouped.columns = ["group", "bytes", "count"]
    grouped = grouped.sort_values(["bytes", "group"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return pd.DataFrame(grouped).astype({"bytes": "int64", "count": "int64"})
