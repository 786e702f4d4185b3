"""A :class:`~xlakit.memory.CompiledMemory` as a researcher reads it: each number in words beside what it means
and which XLA field it comes from; the fields XLA does not report gathered in one line (their notes say why)
rather than a row of "not reported" each; the footprint shown as the sum it is."""

from __future__ import annotations

from typing import Any

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Column, Table

__all__ = ["compiled_html", "compiled_rows"]

# category -> (words, what it is — and XLA's CompiledMemoryStats field it comes from)
_MEANING = {
    "argument": ("arguments", "the inputs the program reads (XLA: argument_size_in_bytes)"),
    "output": ("outputs", "what the program returns (output_size_in_bytes)"),
    "alias": ("outputs aliased to donated inputs", "output bytes written into a donated argument's buffer: held once, "
              "so the footprint takes them off (alias_size_in_bytes)"),
    "temp": ("temporaries", "working memory XLA's buffer assignment reserves for one run (temp_size_in_bytes)"),
    "generated_code": ("generated code", "the compiled program's machine code (generated_code_size_in_bytes)"),
}
_HOST = "in host memory (pinned_host)"


def compiled_rows(m: Any) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of ``m``'s table (``{"what", "bytes", "meaning"}``, texts) and the words of the fields XLA did
    not report (each left out of the rows; ``m.notes`` says why)."""
    from xlakit.memory._footprint import footprint_terms

    rows: list[dict[str, str]] = []
    missing: list[str] = []

    def add(what: str, value: int | None, meaning: str) -> None:
        if value is None:
            missing.append(what)
        else:
            rows.append({"what": what, "bytes": fmt_bytes(value), "meaning": meaning})

    for category, (words, meaning) in _MEANING.items():
        add(words, getattr(m, f"{category}_bytes"), meaning)
    add("constants", m.constant_bytes, "arrays built into the program: closed-over weights and literals (the "
        "buffer assignment's constant allocations)")
    host_missing = 0
    for category, (words, _) in _MEANING.items():
        value = getattr(m, f"host_{category}_bytes")
        host_missing += value is None
        if value is not None:
            add(f"{words} {_HOST}", value, f"host_{category}_size_in_bytes")
    if host_missing:  # one phrase for all of them, not five
        missing.append(f"{'the' if host_missing == len(_MEANING) else host_missing} host-memory (pinned_host) "
                       "figures")
    terms = footprint_terms(m)
    if terms is None:
        missing.append("footprint")
    else:
        shown = [("arguments", terms["argument_bytes"]), ("outputs less donated", terms["output_bytes"]),
                 ("temporaries", terms["temp_bytes"]), ("constants", terms["constant_bytes"])]
        if terms["code_bytes"]:
            shown.append(("code", terms["code_bytes"]))
        rows.append({"what": "footprint", "bytes": fmt_bytes(sum(terms.values())),
                     "meaning": "what one run occupies on the device, the larger number and what budgets use: "
                                + " + ".join(f"{w} {fmt_bytes(b)}" for w, b in shown)
                                + f" = {sum(terms.values()):,} B"})  # exact: rounded terms need not add up
    no_temps = any(n.startswith("peak:") for n in m.notes)
    add("peak (XLA)", m.peak_bytes, "XLA's peak_memory_in_bytes" + (
        ": on XLA:CPU without temporaries, so below the footprint" if no_temps else
        ": XLA's own figure; memory.peak() gives the run's peak with each buffer named"))
    return rows, missing


def compiled_html(m: Any) -> str:
    """The HTML table of ``m``: the rows of :func:`compiled_rows`, then one line naming what XLA did not report,
    then the source and the notes."""
    rows, missing = compiled_rows(m)
    if missing:
        rows.append({"what": "not reported", "bytes": "",
                     "meaning": ", ".join(missing) + " (XLA gives no real figure for these here; the notes say why)"})
    rows.append({"what": "source", "bytes": "", "meaning": str(m.source)})
    rows += [{"what": "note", "bytes": "", "meaning": n} for n in m.notes]
    columns = [Column("what", "", nowrap=True), Column("bytes", "bytes", nowrap=True),
               Column("meaning", "what it is (XLA's field)", nowrap=False)]
    return Table(columns, rows, caption=f"Compiled memory: {m.name or '?'} ({m.platform or '?'})",
                 css_class="xlakit-record")._repr_html_()
