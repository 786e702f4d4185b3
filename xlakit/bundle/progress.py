"""A tqdm progress bar that fits where it is shown: a widget in a notebook, text in a terminal or log.

``tqdm.auto`` picks the notebook bar inside any IPython kernel but then fails (or warns) when ipywidgets is
missing; here the widget bar is used only when both a kernel and ipywidgets are present, else the text bar
(on stderr; where stderr is not a terminal, one line when the bar closes instead of tqdm's redraws joined
by carriage returns). ``enabled=False`` gives a bar that draws nothing, so callers never branch. ``discard()``
ends a bar whose work was abandoned (a load that raises): nothing more is drawn and no closing line is written.
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

    def discard(self) -> None:
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

    def discard(self) -> None:
        self._bar.leave = False  # tqdm clears a bar it does not leave, and draws nothing once closed
        self._bar.close()


class _LogLine:
    """The bar for a stderr that is not a terminal (a CI log, ``2> file``, a pipe): tqdm would write every
    redraw there, joined by carriage returns; this writes one line when the bar closes,
    e.g. ``cnn: 4/4 programs (4 hit, 0 compiled, 0 failed) in 0.21 s``."""

    def __init__(self, total: int, desc: str, unit: str, clean: Any) -> None:
        import time

        self._total, self._desc, self._unit, self._clean = total, desc, unit, clean
        self._n, self._postfix, self._closed, self._start = 0, "", False, time.perf_counter()

    def update(self, n: int = 1) -> None:
        self._n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._postfix = self._clean(s)

    def close(self) -> None:
        import time

        if self._closed:
            return
        self._closed = True
        units = self._unit if self._total == 1 else f"{self._unit}s"
        postfix = f" ({self._postfix})" if self._postfix else ""
        try:
            print(f"{self._desc}: {self._n}/{self._total} {units}{postfix} in "
                  f"{time.perf_counter() - self._start:.2f} s", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # a closed or broken stderr: the line is only a courtesy
            pass

    def discard(self) -> None:
        self._closed = True


def _columns(stream: Any) -> int:
    """The width the terminal behind ``stream`` reports (0 when it reports none or is not one)."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "program") -> Any:
    """A bar with ``update(n)``, ``set_postfix_str(s)`` and ``close()``; silent when ``enabled`` is False.
    ``desc`` and postfixes may be untrusted (a manifest's name): they are shown as text, never as markup or
    terminal control sequences."""
    from xlakit._text.untrusted import html_text, terminal_text

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
    # A log file or a pipe: one line at the end, not a redrawn bar. So too a terminal that reports 0 columns
    # (`script` without a size, some CI consoles): tqdm's bar drew nothing at all there, not even the count.
    if not _is_terminal(sys.stderr) or _columns(sys.stderr) <= 0:
        return _LogLine(total, terminal_text(desc), unit, terminal_text)
    from tqdm.std import tqdm as bar

    return _SafeBar(bar(total=total, desc=terminal_text(desc), unit=unit, leave=True, file=sys.stderr,
                        dynamic_ncols=True), terminal_text)
