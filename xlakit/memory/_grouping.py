"""Grouping the buffers of an attribution or a peak: one table shape (group, bytes, count) for every view.

:func:`group_frame` is the raw grouping (every value of the column its own row). :func:`grouped` is what
``Peak.by`` / ``Attribution.by`` return and every summary reads: the same rows with the entry arguments of a
``source`` grouping folded into one "arguments" row (a train step has hundreds), the buffers without a value
in the column under a label that says what they are, and a display (repr and HTML) with readable bytes and the
share of the total, never cut; the unfolded rows stay in ``.raw``. :func:`top_groups` is the one place the
peak's summary line and its chart caption take their "largest groups" from, so both show the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

from xlakit._text.format import fmt_bytes

__all__ = ["GROUPS", "group_frame", "grouped", "top_groups", "group_text", "role_note", "UNKNOWN_LABELS",
           "ARGUMENTS_LABEL"]

GROUPS = ("source", "scope", "role", "parameter", "layer", "block", "instruction", "output")
#: Column -> what the buffers without a value in it are (shown in place of ``unknown`` / a missing value).
UNKNOWN_LABELS = {"source": "(no line of your code: made by XLA or inside a library)",
                  "layer": "(no layer of your code: made by XLA or inside a library)",
                  "scope": "(no name stack: made by XLA)",
                  "parameter": "(not an argument: values the program makes)",
                  "block": "(no block told apart)",
                  "role": "(no role)", "instruction": "(no instruction)",
                  "output": "(not a result of the program)"}
#: The folded row of every entry argument in a ``source`` grouping.
ARGUMENTS_LABEL = "arguments"
_ARGUMENT_SOURCE = "argument "
_HTML_ROWS = 50  # groups a notebook's HTML table shows; the frame keeps all
_PLURAL = {"parameter": "parameters", "residual": "residuals", "temporary": "temporaries", "output": "outputs",
           "constant": "constants", "aliased": "aliased outputs", "recomputed": "recomputed values"}
# The arguments' split: the role "parameter" is every argument that is not optimizer state (XLA's entry
# parameters), the input batch too — "8.3 MiB parameters" beside 6.8 MiB of weights misled (a trial, 2026-12-07)
_ARGUMENT_PARTS = {**_PLURAL, "parameter": "parameters and inputs"}


def group_frame(frame: Any, column: str, value: str = "bytes"):
    """``frame`` grouped by ``column``: a DataFrame with columns group, bytes, count, sorted by bytes
    descending (missing groups, e.g. a temporary's ``parameter``, shown as ``"—"``)."""
    import pandas as pd

    if not isinstance(column, str) or column not in frame.columns:  # ["role"] raised "unhashable type: 'list'"
        raise ValueError(f"cannot group by {column!r}: use one of {', '.join(GROUPS)} (one column name)")
    keys = frame[column].astype(object).where(frame[column].notna(), "—")
    grouped = frame.assign(_g=keys).groupby("_g", sort=False)[value].agg(["sum", "count"]).reset_index()
    grouped.columns = ["group", "bytes", "count"]
    grouped = grouped.sort_values(["bytes", "group"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return pd.DataFrame(grouped).astype({"bytes": "int64", "count": "int64"})


def _keys(frame: Any, column: str) -> Any:
    """The group of each row: the column's value; the unknown label for a missing or ``unknown`` one; for
    ``source``, every entry argument folded into :data:`ARGUMENTS_LABEL`."""
    values = frame[column].astype(object)
    missing = values.isna() | values.astype(str).isin(["unknown", "None", "<NA>", ""])
    keys = values.where(~missing, UNKNOWN_LABELS.get(column, "(unknown)"))
    if column == "source":
        keys = keys.where(~keys.astype(str).str.startswith(_ARGUMENT_SOURCE), ARGUMENTS_LABEL)
    elif column in ("scope", "layer"):
        keys = keys.where(keys.astype(str) != "argument", ARGUMENTS_LABEL)
    return keys


def top_groups(frame: Any, column: str = "source", n: int = 3, value: str = "bytes") -> list[dict[str, Any]]:
    """The ``n`` largest groups of ``frame`` by ``column`` (arguments folded, unknowns labelled, as
    :func:`grouped`), each ``{"group", "bytes", "count", "roles"}``: ``roles`` the bytes per role within the
    group, largest first. The peak's summary and its chart caption read this, so they agree."""
    if frame is None or frame.empty or column not in frame.columns:
        return []
    keyed = frame.assign(_g=_keys(frame, column))
    sums = keyed.groupby("_g", sort=False)[value].agg(["sum", "count"])
    sums = sums.sort_values("sum", ascending=False, kind="stable").head(n)
    out = []
    for group, row in sums.iterrows():
        part = keyed[keyed["_g"] == group]
        roles = part.groupby("role", sort=False)[value].sum().sort_values(ascending=False, kind="stable") \
            if "role" in part.columns else None
        out.append({"group": str(group), "bytes": int(row["sum"]), "count": int(row["count"]),
                    "roles": {str(r): int(b) for r, b in roles.items() if b} if roles is not None else {}})
    return out


def group_text(group: dict[str, Any]) -> str:
    """``"43.0 MiB from cell [4], line 3 (block) (41.0 MiB of it residuals)"`` for one :func:`top_groups`
    entry; the arguments read ``"3.0 MiB arguments (2.0 MiB parameters and inputs, 1.0 MiB optimizer state)"``."""
    roles = role_note(group)
    if group["group"] == ARGUMENTS_LABEL:
        return f"{fmt_bytes(group['bytes'])} arguments" + (f" ({roles})" if roles else "")
    return f"{fmt_bytes(group['bytes'])} from {group['group']}" + (f" ({roles})" if roles else "")


def role_note(group: dict[str, Any]) -> str:
    """What holds one :func:`top_groups` entry's bytes: ``"residuals"``, ``"41.0 MiB of it residuals"``, or
    for the arguments each role (``"2.0 MiB parameters and inputs, 1.0 MiB optimizer state"``, ``""`` for
    one)."""
    roles = group["roles"]
    if not roles:
        return ""
    if group["group"] == ARGUMENTS_LABEL:
        return ", ".join(f"{fmt_bytes(b)} {_ARGUMENT_PARTS.get(r, r)}" for r, b in roles.items()) \
            if len(roles) > 1 else ""
    role, nbytes = next(iter(roles.items()))
    return (_PLURAL.get(role, role) if nbytes >= 0.995 * group["bytes"] else
            f"{fmt_bytes(nbytes)} of it {_PLURAL.get(role, role)}")


@functools.cache
def _grouped_class() -> type:
    """The DataFrame subclass :func:`grouped` returns (made on first use: importing this module imports no
    pandas)."""
    import pandas as pd

    from xlakit._text.table import Column, Table

    class GroupedBytes(pd.DataFrame):
        """Bytes grouped by one column, as shown: columns group, bytes (int), count (buffers), share (of the
        total). Displayed with readable bytes and whole names; ``.raw`` holds every group unfolded, with its
        own label (``group_frame``). Operations on it (``set_index``, ``head``...) give plain DataFrames."""

        _metadata = ["raw", "column", "total", "notes"]

        @property
        def _constructor(self) -> type:
            return pd.DataFrame

        def _shown(self) -> Any:
            def column(values: list[str], left: bool = False) -> list[str]:
                width = max(map(len, values), default=0)
                return [v.ljust(width) if left else v.rjust(width) for v in values]

            return pd.DataFrame({
                self.column: column([str(g) for g in self["group"]], left=True),
                "bytes": column([fmt_bytes(int(b)) for b in self["bytes"]]),
                "share": column([f"{s:.0%}" if s >= 0.005 else "<1%" for s in self["share"]]),
                "buffers": column([str(int(c)) for c in self["count"]])})

        def _caption(self) -> str:
            return (f"{fmt_bytes(int(self.total))} by {self.column}, {len(self)} groups"
                    + "".join(f"; {n}" for n in self.notes) + " (.raw: every group, unfolded)")

        def __repr__(self) -> str:
            with pd.option_context("display.max_colwidth", None, "display.width", 10_000,
                                   "display.max_rows", 60):
                return self._caption() + "\n" + self._shown().to_string(index=False, justify="left")

        def _repr_html_(self) -> str:
            rows = [{"group": g, "bytes": int(b), "share": f"{s:.0%}" if s >= 0.005 else "<1%", "count": int(c)}
                    for g, b, s, c in zip(self["group"], self["bytes"], self["share"], self["count"], strict=True)]
            more = len(rows) - _HTML_ROWS
            table = Table([Column("group", self.column, nowrap=False), Column("bytes", "bytes", "bytes"),
                           Column("share", "share"), Column("count", "buffers", "count")], rows[:_HTML_ROWS],
                          caption=self._caption(), css_class="xlakit-peak-by")._repr_html_()
            rest = sum(r["bytes"] for r in rows[_HTML_ROWS:])
            return table + (f"<p class='xlakit-note'>+{more} smaller groups ({fmt_bytes(rest)}) not shown: the "
                            "frame itself has every row</p>" if more > 0 else "")

    return GroupedBytes


def grouped(frame: Any, column: str, value: str = "bytes", *, total: int | None = None,
            zero_note: str | None = None) -> Any:
    """``frame`` grouped by ``column`` as every view shows it (see the module docstring): a DataFrame with
    columns group, bytes (int64), count, share (bytes / ``total``, default the sum), largest first, whose
    ``.raw`` is :func:`group_frame` of the same rows.

    ``zero_note``: where given, groups of 0 bytes are left out of the rows (``.raw`` keeps them) and one note
    says how many, followed by this text (why they hold nothing).

    Raises:
      ValueError: ``column`` is not a column of ``frame``.
    """
    import pandas as pd

    raw = group_frame(frame, column, value)
    keyed = frame.assign(_g=_keys(frame, column))
    sums = keyed.groupby("_g", sort=False)[value].agg(["sum", "count"]).reset_index()
    sums.columns = ["group", "bytes", "count"]
    sums = sums.sort_values(["bytes", "group"], ascending=[False, True], kind="stable").reset_index(drop=True)
    sums = pd.DataFrame(sums).astype({"bytes": "int64", "count": "int64"})
    zero_names = [str(g) for g in sums.loc[sums["bytes"] == 0, "group"]] if zero_note is not None else []
    zero = len(zero_names)
    if zero:
        sums = sums[sums["bytes"] != 0].reset_index(drop=True)
    whole = int(total if total is not None else sums["bytes"].sum())
    sums["share"] = sums["bytes"] / whole if whole else 0.0
    out = _grouped_class()(sums)
    out.raw, out.column, out.total = raw, column, whole
    folded = int(frame[column].astype(str).str.startswith(_ARGUMENT_SOURCE).sum()) if column == "source" else 0
    out.notes = [f"{folded} argument rows folded into '{ARGUMENTS_LABEL}'"] if folded > 1 else []
    if zero:
        shown = "; ".join(zero_names[:3]) + ("; …" if zero > 3 else "")
        out.notes.append(f"{zero} group{'s' if zero > 1 else ''} of 0 B left out ({shown}): {zero_note}")
    return out
