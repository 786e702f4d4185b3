"""JSON for bytes that came from a shared folder: bounded nesting, finite and bounded numbers.

Envelope headers are authenticated before they are parsed, but the secret that signs them may be shared
by a fleet, and any holder can sign junk; so every header, listing and partition description goes
through :func:`loads` (defence in depth). The standard ``json`` module recurses once per nesting level
(a 100,000-deep ``[[[...]]]`` raises ``RecursionError``), turns ``10**400`` into an int that ``float()``
cannot convert (``OverflowError``) and accepts ``NaN``/``Infinity``, which later become invalid JSON output.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_FLOAT", "MAX_INT", "UnsafeJson", "check_depth", "load_file", "loads"]

MAX_DEPTH = 64  # nesting levels of [ and {; real headers use 4
MAX_INT = 2**63 - 1  # largest integer magnitude accepted (byte counts fit in int64)
MAX_FLOAT = 1e18  # largest float magnitude accepted (timestamps are ~1.7e9 s, sizes ~1e12 bytes)
_MAX_INT_DIGITS = 19

# One token per match, found left to right and never retried: a whole string (the unrolled form
# "[^"\\]*(?:\\.[^"\\]*)*" has one way to match, so no backtracking; the optional closing quote lets an
# unterminated string match to the end instead of failing and being retried at every later quote), or a
# bracket outside strings. The older form (?:[^"\\]|\\.)* retried from each of n quotes: 128 kB took 35 s.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*("?)|[\[\]{}]', re.DOTALL)


class UnsafeJson(ValueError):
    """The text is not JSON this module accepts; the message says why (depth, number, syntax)."""


def check_depth(raw: bytes, max_depth: int = MAX_DEPTH) -> None:
    """Raise UnsafeJson if ``raw`` nests ``[``/``{`` deeper than ``max_depth`` levels (strings skipped).

    Linear in ``len(raw)``: one left-to-right pass of ``re`` tokens (strings with their escapes, brackets),
    no backtracking and no Python recursion. Also raises UnsafeJson for an unterminated string.
    """
    depth = 0
    for m in _TOKEN.finditer(raw):
        tok = m.group()
        if tok[:1] == b'"':
            if not m.group(1) or len(tok) < 2:
                raise UnsafeJson("unterminated string")
        elif tok in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise UnsafeJson(f"nested deeper than {max_depth} levels")
        else:
            depth -= 1


# A string, to its closing quote or, unterminated, to the end: the string half of _TOKEN, so the strings it
# removes are exactly the ones check_depth skips (every match starts at a quote outside a string; linear).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside strings: strings removed and non-brackets dropped in C, then
    one pass over the brackets alone (what :func:`check_depth` measures, without a Python step per token).
    Without a backslash every quote opens or closes a string, so the pieces between quotes alternate outside,
    inside: ``split`` (measured ~4x faster than the regex, which tries a match at every byte, on a 22 kB memo)."""
    if b"\\" in raw:
        outside = _STRING.sub(b"", raw)
    else:
        outside = b"".join(raw.split(b'"')[::2])
    depth = deepest = 0
    for byte in outside.translate(None, _NOT_BRACKETS):
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def _int(text: str) -> int:
    if len(text) <= _MAX_INT_DIGITS - 1:  # at most 18 characters: |n| < 10**18 < 2**63, parsed once (the common case)
        return int(text)
    value = int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else None  # never int() of a huge literal
    if value is None or abs(value) > MAX_INT:
        raise UnsafeJson(f"integer {text[:24]}{'…' if len(text) > 24 else ''} is out of range (|n| <= 2**63-1)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_FLOAT:
        raise UnsafeJson(f"number {text[:24]} is out of range (finite, |x| <= {MAX_FLOAT:g})")
    return value


def _constant(name: str) -> Any:
    raise UnsafeJson(f"{name} is not a finite number")


def loads(raw: bytes | bytearray | memoryview | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse UTF-8 JSON ``raw`` with nesting at most ``max_depth`` and numbers finite and bounded.

    Raises UnsafeJson (a ValueError) for bad UTF-8, bad syntax, too deep nesting, NaN/Infinity, integers
    beyond int64 or floats beyond ``MAX_FLOAT``. Never raises RecursionError or OverflowError.
    """
    try:
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
    except (UnicodeEncodeError, TypeError) as e:
        raise UnsafeJson(f"not JSON bytes: {e}") from None
    # Nesting is at most the number of opening brackets (brackets inside strings only raise the count), so
    # when that count is within the bound nothing can be refused: two C-speed counts. Otherwise the depth is
    # measured outside strings (:func:`_depth`); only a refusal runs the token scan, for its message. Both
    # replace a Python loop over every token (~100 us for a 3 kB entry header, ~400 us for a 30 kB one).
    if data.count(b"[") + data.count(b"{") > max_depth and _depth(data) > max_depth:
        check_depth(data, max_depth)
        raise UnsafeJson(f"nested deeper than {max_depth} levels")
    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except UnsafeJson:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        check_depth(data, max_depth)  # its precise reason (an unterminated string) when it has one
        raise UnsafeJson(f"not valid UTF-8 JSON: {e}") from None


def load_file(path: str | os.PathLike, max_bytes: int, *, at: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """Read the regular file ``path`` (relative to folder descriptor ``at`` if given) and parse it with
    :func:`loads`. The file is opened without following a link and without blocking, and refused unread if
    larger than ``max_bytes`` (see :func:`xlakit.store._fs.read_bounded`).

    Raises OSError (FileNotFoundError; ObjectRefused for a link, FIFO, device, folder or oversized file) or
    UnsafeJson. This is the one way xlakit reads a JSON file that sits in a shared folder (the fingerprint
    memo, partition.json, a bundle's records).
    """
    from ._fs import read_bounded

    raw, _ = read_bounded(path, max_bytes, at=at)
    return loads(raw, max_depth)
