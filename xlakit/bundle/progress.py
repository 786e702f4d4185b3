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


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "program") -> Any:
    """A bar with ``update(n)``, ``set_postfix_str(s)`` and ``close()``; silent when ``enabled`` is False."""
    if not enabled or total <= 0:
        return _Silent()
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401 - tqdm.notebook needs it
            from tqdm.notebook import tqdm as bar

            return bar(total=total, desc=desc, unit=unit, leave=True)
        except Exception:  # noqa: BLE001 - fall back to text
            pass
    from tqdm.std import tqdm as bar

    return bar(total=total, desc=desc, unit=unit, leave=True, file=sys.stderr, dynamic_ncols=True)
