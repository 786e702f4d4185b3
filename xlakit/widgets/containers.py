"""Static snapshots of ipywidgets containers that hold xlakit widgets (``HBox``, ``VBox``, ``GridBox``, ``Tab``,
``Accordion``, ``Output``), so a saved notebook or ``nbconvert --to html`` shows their numbers offline.

A container's own display is only a widget view, which a notebook converter cannot draw without the widget
state and the network (jupyter-widgets/ipywidgets#2279, jupyter/nbconvert#923), so the xlakit widgets inside
left nothing readable. Importing :mod:`xlakit.widgets` inside IPython registers a display formatter for
``ipywidgets.Box`` and ``ipywidgets.Output`` (:func:`install`): a container that holds an xlakit widget
anywhere in its tree is displayed as its live view plus one more output with :func:`snapshot` of the tree,
which live JupyterLab, Notebook 7 and Voilà hide (as for every xlakit widget). Containers without xlakit
widgets display exactly as before.

What an ``Output`` holds lives in the front-end; the kernel knows only what passed through it: the xlakit
widgets displayed while it captured (``with out: display(panel)``, ``@out.capture()``; forgotten by
``out.clear_output()``, at most the newest 20) and its ``outputs`` trait (``out.append_display_data``,
``out.outputs = ...``). Limits: text printed into an ``Output``, ``IPython.display.clear_output()`` called
inside ``with out:``, and widgets of other libraries leave no snapshot.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from xlakit._text.untrusted import html_text
from xlakit.widgets._base import View
from xlakit.widgets._captured import captured
from xlakit.widgets._chart import Chart

__all__ = ["snapshot", "install", "holds_xlakit_widget"]

# A chart drawn at its layout width must not spill over its neighbour in an HBox: the cell scrolls instead.
_CONTAINER_STYLE = ("<style>.xlakit-container > div {overflow-x:auto} .xlakit-container .js-plotly-plot, "
                    ".xlakit-container .plot-container {max-width:100%}</style>")
_MAX_DEPTH = 12


def _is_view(w: Any) -> bool:
    return isinstance(w, (View, Chart))


def _own_snapshot(w: Any, include_plotlyjs: bool | str) -> str:
    from xlakit.view.plotly_html import figure_html

    if isinstance(w, Chart):
        return figure_html(w.figure, include_plotlyjs)
    return w._snapshot_html(include_plotlyjs)


def _model_widget(data: dict[str, Any]) -> Any | None:
    view = data.get("application/vnd.jupyter.widget-view+json")
    if not isinstance(view, dict):
        return None
    from ipywidgets.widgets.widget import _instances  # model id -> widget (ipywidgets 8)

    return _instances.get(str(view.get("model_id")))


def _children(w: Any) -> list[Any]:
    """The widgets a container shows: a box's children; an Output's recorded xlakit widgets and the widgets
    in its ``outputs`` trait."""
    if isinstance(w, widgets.Output):
        found = captured(w)
        for out in w.outputs or ():
            child = _model_widget(out.get("data") or {}) if isinstance(out, dict) else None
            if child is not None:
                found.append(child)
        return found
    if isinstance(w, widgets.Box):
        return list(w.children)
    return []


def holds_xlakit_widget(w: Any, _depth: int = 0) -> bool:
    """True when ``w`` is an xlakit widget or a container with one anywhere inside."""
    if _is_view(w):
        return True
    if _depth >= _MAX_DEPTH:
        return False
    return any(holds_xlakit_widget(c, _depth + 1) for c in _children(w))


def _titles(w: Any, n: int) -> list[str]:
    titles = list(getattr(w, "titles", ()) or ())
    return [str(titles[i]) if i < len(titles) and titles[i] else f"tab {i + 1}" for i in range(n)]


def _outputs_html(w: widgets.Output) -> str:
    parts = []
    for out in w.outputs or ():
        data = out.get("data") or {} if isinstance(out, dict) else {}
        if _model_widget(data) is not None:
            continue  # drawn from the widget itself
        if isinstance(out, dict) and out.get("output_type") == "stream":
            parts.append(f"<pre>{html_text(str(out.get('text', '')))}</pre>")
        elif "text/html" in data:
            parts.append(str(data["text/html"]))
        elif "text/plain" in data:
            parts.append(f"<pre>{html_text(str(data['text/plain']))}</pre>")
    return "".join(parts)


def _html(w: Any, include_plotlyjs: bool | str, depth: int, seen: set[int]) -> str:
    if id(w) in seen or depth > _MAX_DEPTH:
        return ""
    seen.add(id(w))
    if _is_view(w):
        return _own_snapshot(w, include_plotlyjs)
    kids = _children(w)
    inner = [_html(c, include_plotlyjs, depth + 1, seen) for c in kids]
    if isinstance(w, widgets.Output):
        return f"<div class='xlakit-output'>{''.join(inner)}{_outputs_html(w)}</div>"
    if isinstance(w, (widgets.Tab, widgets.Accordion, widgets.Stack)):
        return "".join(f"<h5>{html_text(t)}</h5>{h}" for t, h in zip(_titles(w, len(inner)), inner, strict=True))
    if isinstance(w, widgets.Box):
        row = isinstance(w, widgets.HBox)
        style = "display:flex;flex-direction:row;flex-wrap:wrap;gap:12px" if row else "display:flex;" \
            "flex-direction:column;gap:8px"
        cells = "".join(f"<div style='min-width:0;flex:1 1 0'>{h}</div>" if row else f"<div>{h}</div>" for h in inner)
        return f"<div class='xlakit-container' style='{style}'>{cells}</div>"
    if isinstance(w, widgets.HTML):
        return str(w.value)
    if isinstance(w, widgets.Label):
        return f"<span>{html_text(str(w.value))}</span>"
    value = getattr(w, "value", None)
    if isinstance(value, (str, int, float, bool)):
        desc = getattr(w, "description", "") or ""
        return f"<span>{html_text(f'{desc}: {value}' if desc else str(value))}</span>"
    return ""


def snapshot(container: Any, include_plotlyjs: bool | str = "once") -> str:
    """Static HTML of what a widget tree shows: each xlakit widget's own snapshot (``to_html()``), laid out as
    the boxes lay them out (``HBox`` side by side, ``VBox`` stacked, ``Tab``/``Accordion`` under their
    titles), with the values of plain ``HTML``/``Label``/value widgets and what an ``Output`` is known to
    hold (see the module docstring for its limits).

    Args:
      container: any ipywidgets widget (an xlakit widget gives its own snapshot).
      include_plotlyjs: as for ``to_html()`` of every xlakit widget ("once", True, False or "cdn").

    Raises:
      TypeError: ``container`` is not an ipywidgets widget.
    """
    if not isinstance(container, widgets.Widget):
        raise TypeError(f"snapshot() takes an ipywidgets widget, got {type(container).__name__}")
    body = _html(container, include_plotlyjs, 0, set())
    return _CONTAINER_STYLE + body if "xlakit-container" in body else body


def _display_container(w: Any) -> None:
    """IPython's display of a Box or Output: its live view and, when it holds an xlakit widget, a snapshot."""
    from IPython.display import display

    own = getattr(type(w), "_ipython_display_", None)
    if own is not None:  # an xlakit widget (or another class) that displays itself
        own(w)
        return
    bundle = getattr(w, "_repr_mimebundle_", None)  # None once the widget is closed
    display(dict(bundle() or {}) if callable(bundle) else {"text/plain": repr(w)}, raw=True)
    if holds_xlakit_widget(w):
        from xlakit.widgets._html import static_output

        display({"text/html": static_output(snapshot(w)), "text/plain": f"snapshot of {type(w).__name__}"},
                raw=True)


def install(shell: Any = None) -> bool:
    """Register the container display (``ipython_display_formatter.for_type``) in ``shell`` (default: the
    running IPython); returns False when there is none. Idempotent."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - ipywidgets needs IPython
            return False
        shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.ipython_display_formatter
    for cls in (widgets.Box, widgets.Output):
        formatter.for_type(cls, _display_container)
    return True
