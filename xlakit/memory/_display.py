"""Display helpers of the memory objects: the one byte formatter and table model of :mod:`xlakit.view`.

``fmt_bytes`` is :func:`xlakit._text.format.fmt_bytes` (binary units); ``html_table`` renders a two-column
:class:`xlakit._text.table.Table`. :mod:`xlakit._text.format` and :mod:`xlakit._text.table` import nothing from
xlakit, so the memory feature can use them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xlakit._text.format import fmt_bytes, fmt_seconds
from xlakit._text.table import Column, Table

__all__ = ["fmt_bytes", "fmt_seconds", "html_table", "record_repr", "TERM_WORDS", "term_words"]

#: A footprint term's column (``Sweep.frame``, ``MaxBatch.limiting_term``) in words, for what is shown.
TERM_WORDS = {"argument_bytes": "arguments", "output_bytes": "outputs", "alias_bytes": "aliased outputs",
              "temp_bytes": "temporaries", "code_bytes": "generated code"}


def term_words(term: str | None) -> str:
    """``"temp_bytes"`` -> ``"temporaries"``; a term not in :data:`TERM_WORDS` as it is."""
    return TERM_WORDS.get(str(term), str(term))


def html_table(rows: Iterable[tuple[str, Any]], title: str | None = None) -> str:
    """A two-column HTML table (name, value); values pass through ``str`` and are escaped."""
    records = [{"name": str(k), "value": str(v)} for k, v in rows]
    return Table([Column("name", "", nowrap=False), Column("value", "", nowrap=False)], records, caption=title,
                 css_class="xlakit-record")._repr_html_()


def record_repr(name: str, parts: Iterable[str]) -> str:
    return f"{name}({', '.join(parts)})"
