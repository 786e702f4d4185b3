"""A tqdm progress bar that fits where it is shown: a widget in a notebook, text in a terminal or log.

``tqdm.auto`` picks the notebook bar inside any IPython kernel but then fails (or warns) when ipywidgets is
missing; here the widget bar is used only when both a kernel and ipywidgets are present, else the text bar
(on stderr). ``enabled=False`` gives a bar that draws nothing, so callers never branch.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - any failure means "not a notebook"
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class _SafeBar:
    """A tqdm bar whose label and postfix are shown as text: they carry names from a bundle's manifest, and
    tqdm writes them raw into an HTML widget (notebook) or the terminal (escape sequences)."""

    def __init__(self, bar: Any, clean: Any) -> None:
        self._bar, self._clean = bar, clean

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._bar.set_postfix_str(self._clean(s), refresh=refresh)

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "program") -> Any:
    """A bar with ``update(n)``, ``set_postfix_str(s)`` and ``close()``; silent when ``enabled`` is False.
    ``desc`` and postfixes may be untrusted (a manifest's name): they are shown as text, never as markup or
    terminal control sequences."""
    from xlakit.view.untrusted import html_text, terminal_text

    if not enabled or total <= 0:
        return _Silent()
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401 - tqdm.notebook needs it
            from tqdm.notebook import tqdm as bar

            clean = lambda text: html_text(terminal_text(text))
            return _SafeBar(bar(total=total, desc=clean(desc), unit=unit, leave=True), clean)
        except Exception:  # noqa: BLE001 - fall back to text
            pass
    from tqdm.std import tqdm as bar

    return _SafeBar(bar(total=total, desc=terminal_text(desc), unit=unit, leave=True, file=sys.stderr,
                        dynamic_ncols=True), terminal_text)
