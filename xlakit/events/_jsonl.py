"""Events as JSON lines: one :meth:`Event.to_dict` object per line, UTF-8, ``\\n``-terminated.

A writer that crashes mid-line leaves a truncated last line; :func:`read` skips it with a warning, so a
log persisted by a killed process still loads. Any other unreadable line is an error (the file is not an
event log, or it was damaged), reported with its line number.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

from xlakit import _atomic
from xlakit._text.untrusted import terminal_text
from xlakit.events._model import _FIELD_NAMES, Event

__all__ = ["write", "read"]


def _line(event: Event) -> str:
    return json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False) + "\n"


def write(path: str | os.PathLike, events: Iterable[Event], *, append: bool = False) -> int:
    """Write ``events`` to ``path``; returns how many were written.

    Without ``append`` the file is replaced atomically (temp file in the same folder, fsync, rename), so a
    reader never sees half a file. With ``append`` the lines are added to the end (created if missing).

    Raises:
      OSError: the folder is missing or not writable.
    """
    path = Path(os.path.expanduser(path))  # "~/x" is the home folder, never a folder named "~"
    lines = [_line(e) for e in events]
    if append:
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(lines)
        return len(lines)
    _atomic.write_atomic(path, "".join(lines))
    return len(lines)


def read(path: str | os.PathLike) -> list[Event]:
    """The events in ``path``, in file order.

    A last line that is not a complete event (a crashed writer) is skipped with a :class:`RuntimeWarning`.
    Fields this version does not know are dropped with one :class:`RuntimeWarning` naming them (a file
    from a newer xlakit still loads).

    Raises:
      OSError: the file cannot be read.
      ValueError: a line other than the last is not a JSON event, or no line is (a file of one line that is
        not an event); the message names ``path:line``.
    """
    path = Path(os.path.expanduser(path))  # "~/x" is the home folder, never a folder named "~"
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    events: list[Event] = []
    dropped: set[str] = set()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            extra = set(data) - _FIELD_NAMES
            if extra:
                dropped |= extra
                data = {k: v for k, v in data.items() if k in _FIELD_NAMES}
            events.append(Event.from_dict(data))
        except (ValueError, TypeError, RecursionError) as exc:
            if number == len(lines) and events:  # a file whose only line is not an event is no events file
                warnings.warn(f"{path}:{number}: skipped an incomplete last line (a writer stopped mid-line?): "
                              f"{exc}", RuntimeWarning, stacklevel=3)
                break
            raise ValueError(f"{path}:{number}: not an xlakit event: {exc}") from exc
    if dropped:
        names = terminal_text(", ".join(sorted(dropped)))  # the names come from the file
        warnings.warn(f"{path}: ignored event field(s) this xlakit does not know: {names}",
                      RuntimeWarning, stacklevel=3)
    return events
