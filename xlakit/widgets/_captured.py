"""What each ``ipywidgets.Output`` captured of xlakit widgets: the kernel's only record of an Output's content
(the front-end holds the rest), read by :mod:`xlakit.widgets.containers` for the Output's snapshot."""

from __future__ import annotations

import weakref
from typing import Any

import ipywidgets as widgets

__all__ = ["note_displayed", "captured"]

_MAX_RECORDED = 20
#: Output widget -> the xlakit widgets displayed while it captured (newest last).
_captured: weakref.WeakKeyDictionary[widgets.Output, list[Any]] = weakref.WeakKeyDictionary()


def captured(out: widgets.Output) -> list[Any]:
    """The xlakit widgets displayed into ``out`` since it was created or last cleared (newest last, <= 20)."""
    return list(_captured.get(out, ()))


def _capturing_outputs() -> list[widgets.Output]:
    """The Output widgets capturing the current cell's output now (``with out:`` sets ``msg_id``)."""
    from ipywidgets.widgets.widget import _instances  # model id -> widget (ipywidgets 8)

    return [w for w in list(_instances.values()) if isinstance(w, widgets.Output) and w.msg_id]


def note_displayed(view: Any) -> None:
    """Called when an xlakit widget is displayed: remember it for each Output capturing the display."""
    for out in _capturing_outputs():
        if out is view:
            continue
        shown = _captured.get(out)
        if shown is None:
            shown = _captured[out] = []
            _forget_on_clear(out)
        if view not in shown:
            shown.append(view)
            del shown[:-_MAX_RECORDED]


def _forget_on_clear(out: widgets.Output) -> None:
    original = out.clear_output  # the bound method; this instance only
    ref = weakref.ref(out)

    def clear_output(*args: Any, **kwargs: Any) -> Any:
        target = ref()
        if target is not None:
            _captured.pop(target, None)
        return original(*args, **kwargs)

    out.clear_output = clear_output  # type: ignore[method-assign]


