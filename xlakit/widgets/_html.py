"""HTML frames of the widgets: :func:`static_output` (a snapshot as an output of its own); ``page`` and
``snapshot`` live in :mod:`xlakit.view.html` and are re-exported for existing imports."""

from __future__ import annotations

from xlakit._text.theme import STYLE
from xlakit.view import plotly_html
from xlakit.view.html import page, snapshot

__all__ = ["snapshot", "page", "static_output"]

# Hides a snapshot output where the live widget is drawn: JupyterLab (.jp-LabShell), Notebook 7
# (.jp-NotebookShell) and Voila (body[data-voila]); a saved notebook rendered elsewhere keeps it.
_HIDE_IN_LIVE = ("<style>.jp-LabShell .xlakit-static, .jp-NotebookShell .xlakit-static, body[data-voila] "
                 ".xlakit-static {display: none !important;} .jp-LabShell .jp-OutputArea-child:has(.xlakit-static), "
                 ".jp-NotebookShell .jp-OutputArea-child:has(.xlakit-static), body[data-voila] "
                 ".jp-OutputArea-child:has(.xlakit-static) {display: none !important;}</style>")


def static_output(snapshot_html: str) -> str:
    """A snapshot as the ``text/html`` of its own output: themed, and hidden where the live view is drawn."""
    return f"{_HIDE_IN_LIVE}<div class='{plotly_html.STATIC_CLASS}'>{STYLE}{snapshot_html}</div>"
