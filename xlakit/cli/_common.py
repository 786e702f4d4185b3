"""What every ``xlakit`` command shares: the usage error, size parsing, JSON output and the text table.

Tables and byte/second figures come from the one formatter (:mod:`xlakit._text.format`,
:class:`xlakit._text.table.Table`), so the CLI reads like the widgets and the report. No JAX.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from xlakit._text.format import fmt_bytes, fmt_seconds
from xlakit._text.table import Column, Table
from xlakit._text.untrusted import terminal_text
from xlakit._units import parse_int, parse_size  # parse_size re-exported: the CLI and the API read sizes alike

__all__ = ["PROG", "CliError", "Parser", "parse_size", "size_option", "int_option", "nonempty", "human", "local_time",
           "seconds", "emit_json", "print_table", "print_bounded", "Column", "SHOW_ALL", "EXAMPLES", "SHOW_ROWS",
           "largest_first"]

PROG = "xlakit"


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store``, refusing an option given twice: argparse kept the last value silently, so
    ``prune --max-bytes 100MB --max-bytes 0`` evicted every entry (and ``--path A --path B`` acted on B). No option
    of xlakit's takes several values; a repeat is a mistake (a pasted line, a script's default then the user's)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = vars(namespace).setdefault(_GIVEN, {})
        if self.option_strings and self.dest in given:
            # storage options may hold credentials: never echoed
            both = "" if "options" in self.dest else f" ({given[self.dest]!r}, then {values!r})"
            parser.error(f"argument {'/'.join(self.option_strings)}: given more than once{both}; give it once; "
                         "nothing was done")
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


_GIVEN = "_options_given"  # where _StoreOnce remembers, per parse, the options already given (removed after)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line on stderr (exit 2), and which refuses an option that takes a
    value given twice (:class:`_StoreOnce`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse's, but arguments no parser took are written with ``repr`` (an empty argument, ``--json ''``,
        printed as nothing at all) and the message points at the help of the (sub)command that was given
        (``xlakit cache verify --help``): the namespace's ``_help``, which every subcommand's parser sets to
        itself, else this parser."""
        parsed, extras = self.parse_known_args(args, namespace)
        vars(parsed).pop(_GIVEN, None)
        if extras:
            where = getattr(parsed, "_help", None)
            (where if isinstance(where, Parser) else self).error(
                "unrecognized arguments: " + " ".join(repr(a) for a in extras))
        return parsed


def nonempty(what: str = "value", optional: bool = True) -> Any:
    """An argparse ``type`` refusing an empty string, for every string option and argument: an empty value
    (``--remote ''``, an unset variable in a script) read as "not given" and acted on the default (the local
    folder, no size limit). ``what``: the metavar (URL, DIR, N), named in the message; ``optional``: an option,
    which may be left out."""

    def check(text: str) -> str:
        if text == "":
            raise argparse.ArgumentTypeError(f"an empty {what}; give one"
                                             + (", or leave the option out for its default" if optional else ""))
        return text

    check.__name__ = what  # what argparse names in its own messages
    return check


def int_option(what: str) -> Any:
    """An argparse ``type`` for a whole number in ASCII digits (:func:`xlakit._units.parse_int`): ``type=int`` also
    took ``--workers ３``. ``what``: the metavar, named in argparse's message."""

    def check(text: str) -> int:
        try:
            return parse_int(text, "value")
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in ASCII digits") from None

    check.__name__ = what
    return check


def size_option(text: str, option: str = "--max-bytes") -> int:
    """Bytes from a size option (:func:`xlakit._units.parse_size`, the API's parser: ``500MB``, ``2GiB``, ``7EiB``;
    a fraction of a byte, ``0.4``, is refused, never rounded down to a limit of 0); a CliError naming ``option``."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise CliError(f"{option}: {e}") from None


_BIG_UNITS = (("EiB", 2**60), ("PiB", 2**50))


def human(n: int | float | None) -> str:
    """Bytes in binary units (:func:`xlakit._text.format.fmt_bytes`, up to TiB; PiB and EiB past 1024 TiB, so a
    limit of ``7EiB`` reads "7.0 EiB", not "7340032.0 TiB"); "-" when not known."""
    for unit, size in _BIG_UNITS:
        if isinstance(n, (int, float)) and math.isfinite(n) and abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return fmt_bytes(n, missing="-")


def local_time(t: float | None) -> str:
    """A unix time as local date and time; "-" for None and for values no calendar can show."""
    try:
        return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, ValueError, OSError):
        return "-"


def seconds(s: float | None) -> str:
    """Seconds as :func:`xlakit._text.format.fmt_seconds` writes them; "-" for None, NaN and infinities (a
    corrupt header may record any number)."""
    return "-" if s is None or not math.isfinite(s) else fmt_seconds(s)


def _finite(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, Infinity) replaced by None, so the output is valid JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON that any parser accepts (no NaN/Infinity: they become null)."""
    print(json.dumps(_finite(data), indent=2, default=str, allow_nan=False))


def print_table(caption: str | None, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> None:
    """Print rows under columns as aligned text (:meth:`xlakit._text.table.Table.to_text`): numbers right,
    text left, the caption first. Cells are plain text (a name with brackets is printed as it is)."""
    print(Table(columns, rows, caption=caption).to_text())


#: Diagnostics (one per object or name) are printed one per line up to this many; past it, a count per kind and
#: the first :data:`EXAMPLES` of each: a bucket or folder holding 20,000 junk names prints a few lines, not 20,000.
SHOW_ALL = 10
EXAMPLES = 3
_MAX_KINDS = 8  # kinds come from closed sets; a ninth and later are counted together


#: Rows of a summary (one per partition) printed at most; a folder or bucket holding 20,000 junk partitions printed
#: 20,000 lines. ``--json`` lists them all.
SHOW_ROWS = 20


def largest_first(rows: Sequence[Any], size: Any, limit: int = SHOW_ROWS) -> tuple[list[Any], int]:
    """``(rows to print, how many are left out)``: all of ``rows`` in their order when there are at most ``limit``,
    else the ``limit`` largest by ``size(row)`` (a team's real partitions before an attacker's one-byte ones)."""
    if len(rows) <= limit:
        return list(rows), 0
    return sorted(rows, key=size, reverse=True)[:limit], len(rows) - limit


def print_bounded(items: Sequence[tuple[str, str]], what: str, where: str, *, prefix: str = "",
                  file: Any = None) -> None:
    """Print diagnostics, bounded: ``items`` are ``(kind, line)`` (``kind``: what groups them, xlakit's own word or
    a module name; both may hold untrusted names, escaped here with :func:`~xlakit._text.untrusted.terminal_text`;
    past :data:`_MAX_KINDS` kinds the rest are counted as "other").
    Up to :data:`SHOW_ALL` items: each line, after ``prefix``. More: one line ``<prefix><n> <what>: <count>
    <kind>, ...; <where>`` (``where``: where every one is listed, e.g. "--json lists them all"), then the first
    :data:`EXAMPLES` lines of each kind, indented, and how many more there are."""
    if len(items) <= SHOW_ALL:
        for _, line in items:
            print(f"{prefix}{terminal_text(line)}", file=file)
        return
    groups: dict[str, list[str]] = {}
    for kind, line in items:
        key = kind if kind in groups or len(groups) < _MAX_KINDS else "other"
        groups.setdefault(key, []).append(line)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    print(f"{prefix}{len(items)} {what}: " + ", ".join(f"{len(lines)} {terminal_text(kind)}" for kind, lines in ranked)
          + f"; {where}", file=file)
    for kind, lines in ranked:
        for line in lines[:EXAMPLES]:
            print(f"{prefix}  {terminal_text(line)}", file=file)
        if len(lines) > EXAMPLES:
            print(f"{prefix}  ... and {len(lines) - EXAMPLES} more {terminal_text(kind)}", file=file)
