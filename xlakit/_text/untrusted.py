"""Untrusted text is data: one sanitiser for the terminal and one escape for HTML, used by every printer.

Names and reasons reach xlakit's output from places anyone with write access controls: a bucket's object
names, a bundle's ``manifest.json``, an event log file, a cache folder's path, an exception message. On a
terminal a raw ESC starts a control sequence (retitle the window, clear the screen, fake a line); in HTML a
raw ``<`` starts markup. So:

- :func:`terminal_text` makes a value safe to print: every C0/C1 control character, DEL, and the Unicode
  bidirectional overrides (which reorder what a reader sees, CVE-2021-42574) become visible escapes
  (``\\x1b``, ``\\u202e``). ``one_line=True`` (the default, for a field inside a line) escapes newlines,
  carriage returns and tabs too; ``one_line=False`` (a whole message) keeps ``\\n`` and ``\\t``.
- :class:`TerminalStream` wraps ``sys.stdout``/``sys.stderr`` for the CLI, so that nothing it prints can
  carry a control sequence, whichever print statement the text went through. It keeps ``\\n``, ``\\t`` and
  ``\\r`` (progress bars redraw a line with it).
- :func:`html_text` is ``html.escape(str(value), quote=True)``: safe inside an element and inside a quoted
  attribute. :func:`html_wrappable` is the same text with line-break opportunities (``<wbr>``) after the
  separators of long tokens (paths, pytree paths, ``Class.__call__``), so a narrow column wraps them there
  and never inside a name.

A leaf: imports nothing from xlakit, so every layer's printers and renderers may use it.
"""

from __future__ import annotations

import html
import re
from typing import Any, TextIO

__all__ = ["terminal_text", "html_text", "html_wrappable", "TerminalStream"]

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_FIELD = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_MESSAGE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_STREAM = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(value: Any, *, one_line: bool = True) -> str:
    """``str(value)`` with control characters shown as escapes (see the module docstring)."""
    return (_FIELD if one_line else _MESSAGE).sub(_escape, str(value))


def html_text(value: Any) -> str:
    """``str(value)`` escaped for HTML text and quoted attribute values (``&``, ``<``, ``>``, ``"``, ``'``)."""
    return html.escape(str(value), quote=True)


#: Where a long token may break: after a path, argument or pytree separator (``/ , : ; = ) ] ›``) and before an
#: opening ``(`` or ``[``; never inside a name, a dotted name (``jax.nn.softmax``) or a file name.
_BREAK_AFTER = re.compile(r"(?<=[/\\,:;=)\]›·])(?=[^\s,:;)\]])"  # after a separator
                          r"|(?<=[\w'\"\])])(?=[(\[])")  # before a call's or an index's bracket
_LONG_TOKEN = re.compile(r"\S{24,}")
_MARK = "\ue000"  # a private-use character stands for <wbr> until the text is escaped


def html_wrappable(value: Any) -> str:
    """:func:`html_text` of ``value`` with ``<wbr>`` at the separators of tokens of 24+ characters (see
    :data:`_BREAK_AFTER`: ``opt_state[0]['mu']['blocks'][2]`` breaks before each ``[``, never inside
    ``opt_state``). Within ``white-space: normal`` text a narrow column then wraps at spaces first, then at
    those points."""
    text = str(value).replace(_MARK, "")
    text = _LONG_TOKEN.sub(lambda m: _BREAK_AFTER.sub(_MARK, m.group()), text)
    return html_text(text).replace(_MARK, "<wbr>")


def plotly_text(value: Any) -> str:
    """``str(value)`` escaped for plotly's text and hover strings (``&``, ``<``, ``>``): plotly reads a few tags
    (``<b>``, ``<br>``, ``<a href>``) and only the entities ``&amp;``, ``&lt;``, ``&gt;`` (and a few symbols), so
    an escaped quote (``&quot;``) would show as those six characters."""
    return html.escape(str(value), quote=False)


class TerminalStream:
    """A text stream that writes through to ``stream`` with control characters escaped (``\\n``, ``\\t``,
    ``\\r`` kept). Every other attribute (``fileno``, ``isatty``, ``encoding``, ``buffer``) is the wrapped
    stream's, so a ``--json`` writer or a progress bar behaves as before."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(_STREAM.sub(_escape, text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
