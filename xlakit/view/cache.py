"""The cache browser view: entries filtered and totalled per partition, argument signatures, explanations.

Pure functions of the entries frame (:func:`xlakit.view.folder.entries_frame`: ``CacheFolder.entries()`` with
signatures) and entry headers; shared by
:class:`xlakit.widgets.CacheBrowser`, its snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xlakit._text.format import fmt_bytes, fmt_count
from xlakit._text.table import Column, Table
from xlakit.view.html import frame_records, note, snapshot
from xlakit.view.signatures import sharding_text, signature_text

__all__ = ["filter_entries", "partition_totals", "explain_entry", "signature_text", "sharding_text", "entries_html",
           "partitions_html", "cache_html", "ENTRY_COLUMNS", "entry_label", "disk_total", "entry_origins",
           "library_html"]

#: The entries table: (frame column, header, kind).
#: The signature cell shows the leaves that tell a function's entries apart (:func:`xlakit.view.folder.entries_frame`);
#: hovering it shows the whole signature.
ENTRY_COLUMNS = (Column("name", "name"), Column("signature", "arguments (dtype[shape] sharding)",
                                                title_key="signature_full", nowrap=False),
                 Column("key", "key"), Column("partition", "partition"), Column("size_bytes", "size", "bytes"),
                 Column("compile_s", "compile", "seconds"), Column("hits", "hits (this process)", "count"),
                 Column("loadable", "loadable"),
                 Column("origin", "whose (this process)"), Column("argument_size_in_bytes", "arguments", "bytes"),
                 Column("output_size_in_bytes", "outputs", "bytes"),
                 Column("temp_size_in_bytes", "temporaries", "bytes"),
                 Column("last_used", "last used", "datetime"))


def entry_label(row: dict[str, Any]) -> str:
    """One selector line: name, argument signature, size, partition, short key — entries of one function
    with different arguments read differently."""
    sig = row.get("signature") or "arguments not recorded"
    name = str(row.get("name") or "?")
    name = name if len(name) <= 80 else name[:79] + "…"
    return (f"{name}({sig}) · {fmt_bytes(row.get('size_bytes'))} · {row.get('partition')} · "
            f"{str(row.get('key') or '')[-12:]}")


def entry_origins(frame, events: Iterable[Any]) -> list[str | None]:
    """Whose program each entry is, as this process's events say: ``"user"``, ``"library"`` (called only from
    inside jax/flax/optax: ``jit_broadcast_in_dim``…) or None (no event of this process names it: an entry
    written by another process stays unknown and is shown as the user's).

    An entry is matched by its key first (xlakit's events carry it), then by its program name; a program
    called once from user code is the user's (:func:`xlakit.view.lanes.combine_origin`).
    """
    from xlakit.view.lanes import combine_origin

    by_key: dict[str, str | None] = {}
    by_name: dict[str, str | None] = {}
    for e in events:
        if e.origin is None:
            continue
        if e.key:
            by_key[e.key] = combine_origin(by_key.get(e.key), e.origin)
        if e.name:
            by_name[e.name] = combine_origin(by_name.get(e.name), e.origin)
    if frame is None or frame.empty:
        return []
    return [by_key.get(k) or by_name.get(n) for k, n in zip(frame["key"], frame["name"].fillna(""), strict=True)]


def library_html(frame) -> str:
    """The folded "library helpers" line of an entries frame's library rows: entries, bytes, compile seconds
    and the first names; "" when there are none."""
    if frame is None or frame.empty or "origin" not in frame.columns:
        return ""
    lib = frame[frame["origin"] == "library"]
    if lib.empty:
        return ""
    names = sorted(set(lib["name"].fillna("?")))
    shown = ", ".join(names[:4]) + (f", … ({len(names) - 4} more)" if len(names) > 4 else "")
    return note(f"library helpers: {len(lib)} entries of {len(names)} program(s) called from inside "
                f"jax/flax/optax ({shown}), {fmt_bytes(disk_total(lib))} on disk, "
                f"{float(lib['compile_s'].fillna(0).sum()):.2f} s of recorded compile time — folded; untick "
                "“fold library helpers” to list them")


def filter_entries(frame, name_filter: str = "", partition: str | None = None, *, fold_library: bool = False):
    """Rows of an entries frame whose name contains ``name_filter`` (case-insensitive), if given in
    ``partition``, and with ``fold_library`` not of origin "library" (needs an ``origin`` column)."""
    if frame.empty:
        return frame
    mask = frame["partition"].notna()
    if fold_library and "origin" in frame.columns:
        mask &= frame["origin"] != "library"
    if name_filter:
        mask &= frame["name"].fillna("").str.lower().str.contains(name_filter.lower(), regex=False)
    if partition:
        mask &= frame["partition"] == partition
    return frame[mask]


def partition_totals(frame):
    """Per partition: entries, bytes on disk, recorded compile seconds, hits in this process (a DataFrame
    indexed by partition; empty without entries)."""
    import pandas as pd

    columns = ["entries", "size_bytes", "compile_s", "hits"]
    if frame.empty:
        return pd.DataFrame(columns=["partition", *columns]).set_index("partition")
    out = frame.groupby("partition").agg(entries=("key", "size"), size_bytes=("size_bytes", "sum"),
                                         compile_s=("compile_s", "sum"), hits=("hits", "sum"))
    return out[columns]


def disk_total(frame) -> int:
    """Bytes on disk of the entries in ``frame`` (the sum the partition table shows; int)."""
    return 0 if frame is None or frame.empty else int(frame["size_bytes"].fillna(0).sum())


def explain_entry(info: Any, environment: Any):
    """Could this cache entry be loaded here? Its recorded environment against ``environment`` (the current
    one), as an :class:`~xlakit.explain.Explanation` (status ``hit`` when nothing differs and the partition is
    this one, else ``miss`` with the differing fields).

    Uses :func:`xlakit.explain.compare` with the entry's own key parts and signature, so only the
    environment can differ (the program itself is not known to a cache browser; ``ExecutableCache.explain``
    compares a function you pass).
    """
    from xlakit.explain import Explanation, compare

    header = dict(getattr(info, "header", None) or {})
    now = {"key_parts": header.get("key_parts"), "environment": environment.to_dict(),
           "signature": header.get("signature"), "module_text": None}
    diffs, _ = compare(now, header)
    here = environment.partition_name()
    status = "hit" if not diffs and info.partition == here else "miss"
    nearest = {"key": info.key, "partition": info.partition, "created": info.created}
    return Explanation(info.name or "?", info.key, here, status, nearest=nearest if status == "miss" else None,
                       differences=tuple(diffs))


def entries_html(frame, max_rows: int = 200) -> str:
    """The entries of an entries frame as a table (sizes exact in ``data-bytes``)."""
    rows = frame_records(frame)
    for r in rows:
        if r.get("key"):
            r["key"] = r["key"] if len(r["key"]) <= 24 else "…" + r["key"][-23:]
    columns = [c for c in ENTRY_COLUMNS if frame is not None and c.key in frame.columns]
    if rows and len({r.get("partition") for r in rows}) == 1:  # one partition: named once, in its own table
        columns = [c for c in columns if c.key != "partition"]
    return (Table(columns, rows, max_rows=max_rows, css_class="xlakit-entries").to_html()
            if rows else note("No entries."))


def partitions_html(totals) -> str:
    """Per-partition totals (:func:`partition_totals`) as a table; partition names never wrap."""
    rows = frame_records(totals)
    if not rows:
        return ""
    columns = [Column("partition", "partition"), Column("entries", "entries", "count"),
               Column("size_bytes", "bytes on disk", "bytes"), Column("compile_s", "compile", "seconds"),
               Column("hits", "hits (this process)", "count")]
    present = {"partition", *totals.columns}
    return Table([c for c in columns if c.key in present], rows, caption="Per partition",
                 css_class="xlakit-partitions").to_html()


def cache_html(frame, totals, *, max_rows: int = 200, folder: str | None = None, status: str | None = None,
               library: str = "") -> str:
    """Snapshot of the cache browser: one on-disk total, per-partition totals, the entries table and the
    folded library helpers line (``library``, see :func:`library_html`)."""
    n = 0 if frame is None else len(frame)
    head = note(f"folder: {folder}: {fmt_count(n)} entries, {fmt_bytes(disk_total(frame))} on disk "
                "(the sum of the entries' files, as in the partition table)") if folder else ""
    return snapshot(f"Cache ({n} entries)", head + partitions_html(totals) + entries_html(frame, max_rows)
                    + library + (status or ""))
