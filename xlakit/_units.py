"""Checks and conversions for the numbers users pass to xlakit's public API: sizes in bytes, seconds, paths.

No JAX and no other xlakit import: the API (``xlakit.enable_cache``, ``ExecutableCache``) and the CLI both use
it, so a bad ``max_bytes`` gets the same answer everywhere.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["MAX_BYTES", "MAX_SECONDS", "parse_age", "parse_int", "parse_size",
           "check_path", "check_max_bytes", "check_seconds", "finite_seconds",
           "check_int", "is_int", "check_number", "check_choice", "check_options", "wait_timeout"]

#: The largest byte count xlakit accepts anywhere (a size, a cap): 2**63 - 1 bytes (8 EiB), what an int64 holds
#: and what headers and listings may say (:data:`xlakit.store.safejson.MAX_INT`). Larger is a ValueError naming
#: the setting, never an OverflowError from deep inside.
MAX_BYTES = 2**63 - 1
_MAX_INT_DIGITS = len(str(MAX_BYTES))
#: The longest span of seconds xlakit accepts for a setting (a deadline, a wait, a threshold, an age): 10**9 s, about
#: 31.7 years. Larger finite numbers are a ValueError naming the setting: a deadline of 1e10 s passed every check, then
#: each remote read failed inside ``threading.Event.wait`` ("OverflowError: timestamp out of range for platform
#: time_t", past ~9.2e9 s) and three of them switched the remote off.
MAX_SECONDS = 10**9

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "p": 10**15, "pb": 10**15, "e": 10**18, "eb": 10**18,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60,
}
# ASCII only: Python's int(), float() and Fraction() (and re's \d) also read "١٠" and full-width "１０" as 10
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$", re.ASCII)
_SIZE_FORMS = ("use a whole number of bytes, optionally with a unit (k, MB, GB, TB, PB, EB = powers of 1000; "
               "KiB, MiB, GiB, TiB, PiB, EiB = powers of 1024), in ASCII digits, e.g. 500MB or 2GiB")


def parse_size(text: str, *, minimum: int = 0) -> int:
    """Bytes (an int) from ``"1048576"``, ``"500MB"``, ``"2GiB"``, ``"10k"``, ``"1.5G"``, ``"7EiB"``.

    k/KB/M/MB/G/GB/T/TB/P/PB/E/EB are powers of 1000; KiB/MiB/GiB/TiB/PiB/EiB powers of 1024 (case-insensitive).
    The number is read exactly (no float rounding) and must come to a whole number of bytes: ``"1.5k"`` is 1500,
    but ``"1.5"`` (1.5 bytes) and ``"0.0001k"`` (0.1 bytes) are refused, never rounded down (``--max-bytes 0.4``
    once read as a limit of 0 bytes and evicted every entry). Digits must be ASCII.

    Args:
      text: the size.
      minimum: the smallest byte count accepted (default 0; 1 for a cap, where 0 makes no sense).

    Raises:
      ValueError: anything else: not a size, negative, a fraction of a byte, below ``minimum``, or over
        :data:`MAX_BYTES` (2**63-1 bytes, just under 8 EiB); the message says what to pass.
    """
    from fractions import Fraction

    m = _SIZE_RE.match(text) if isinstance(text, str) and text.isascii() else None
    unit = m.group(2).lower() if m else None
    if not m or unit is None or unit not in _UNITS:
        raise ValueError(f"invalid size {_shown(text)}: {_SIZE_FORMS}")
    number = m.group(1)
    whole = number.partition(".")[0].lstrip("0")
    # exact arithmetic (a float turned 400 digits into inf, and int(inf) raised OverflowError); digits counted
    # first, so a huge number is refused before Python converts it
    if len(whole) > _MAX_INT_DIGITS or (size := Fraction(number) * _UNITS[unit]) > MAX_BYTES:
        raise ValueError(f"size {_shown(text)} is more than the largest xlakit accepts, {MAX_BYTES} bytes (2**63-1, "
                         "just under 8 EiB): give a smaller size, e.g. 7EiB or 9223PB")
    if size.denominator != 1:
        raise ValueError(f"size {_shown(text)} is {float(size):g} bytes, not a whole number of bytes: {_SIZE_FORMS}")
    if size < minimum:
        raise ValueError(f"size {_shown(text)} is {int(size)} bytes; give at least {minimum} byte"
                         f"{'s' if minimum != 1 else ''}")
    return int(size)


_AGE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([smhdw]?)\s*$", re.ASCII | re.IGNORECASE)
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE_FORMS = "use a number in ASCII digits with s, m, h, d or w, e.g. 30d or 12h"


def parse_age(text: str) -> float:
    """Seconds (a float) from an age: ``"30d"``, ``"12h"``, ``"90m"``, ``"2w"``, ``"3600"`` (a plain number:
    seconds). Digits must be ASCII, as :func:`parse_size`'s: Python's ``float()`` and ``re``'s ``\\d`` also read
    full-width ``"３"`` and Arabic-Indic ``"٣"`` as 3, so ``prune --older-than ３s`` deleted what was 3 s old.

    Raises:
      ValueError: not an age, or over :data:`MAX_SECONDS`; the message says what to pass.
    """
    m = _AGE_RE.match(text) if isinstance(text, str) and text.isascii() else None
    if not m:
        raise ValueError(f"invalid age {_shown(text)}: {_AGE_FORMS}")
    seconds = float(m.group(1)) * _AGE_UNITS[m.group(2).lower()]  # 400 digits: inf, refused below
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"age {_shown(text)} is too large (at most {MAX_SECONDS:.0e} s, about 31 years): {_AGE_FORMS}")
    return seconds


_INT_RE = re.compile(r"^\s*[+-]?[0-9]{1,18}\s*$", re.ASCII)


def parse_int(text: str, name: str) -> int:
    """A whole number written in ASCII digits (a command line's ``--workers 4``), at most 18 of them: ``int()`` also
    reads full-width ``"３"`` and Arabic-Indic ``"٣"`` as 3. Raises ValueError naming ``name``."""
    if not (isinstance(text, str) and text.isascii() and _INT_RE.match(text)):
        if isinstance(text, str) and text.isascii() and re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
            raise ValueError(f"{name}: {_shown(text)} is too large (at most 18 digits)")
        raise ValueError(f"{name}: {_shown(text)} is not a whole number in ASCII digits")
    return int(text)


def _shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was (a 400-digit number stays readable)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str() (4300 by default)
        return f"an int of {value.bit_length()} bits"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_path(path: Any, name: str = "path") -> str | os.PathLike | None:
    """``path`` unchanged if it is a str, an ``os.PathLike`` or None.

    Raises:
      TypeError: anything else (e.g. an int); the message names the argument, what was given and what to pass.
      ValueError: a path holding a NUL character (no file system takes one).
    """
    if path is None or isinstance(path, (str, os.PathLike)):
        text = os.fspath(path) if path is not None else ""
        if ("\0" if isinstance(text, str) else b"\0") in text:
            raise ValueError(f"{name} {text!r} holds a NUL character, which no file system takes in a path")
        return path
    raise TypeError(f"{name} must be a folder path (a str or pathlib.Path) or None for the default folder, "
                    f"got {type(path).__name__} {path!r}")


def check_out_file(path: Any, where: str, example: str) -> Any:
    """A file to write, as a ``pathlib.Path`` (``~`` expanded): refused when empty or blank (ValueError) or a folder
    (IsADirectoryError; an atomic write's failure named its temp, ``/proc/self/fd/3/...``, not the folder given).
    ``where`` names the call (``save``), ``example`` a file name for the message."""
    import errno
    from pathlib import Path

    if not str(os.fspath(path)).strip():
        raise ValueError(f"{where}(path): the path is empty; give a file such as {example!r}")
    target = Path(os.path.expanduser(os.fspath(path)))
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"{target} is a folder; give a file in it, e.g. {target / example}")
    return target


def _numpy_bool(value: Any) -> bool:
    """True for a ``numpy.bool_`` (whose type is named ``bool`` since NumPy 2, ``bool_`` before), without NumPy."""
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")


def is_int(value: Any) -> bool:
    """True for an integer a count or byte number may be: a Python int or a NumPy integer (``np.int64(8)``, what
    ``np.array([1, 2])`` holds; any :class:`numbers.Integral`), never a bool (``True`` is no count) nor a
    ``numpy.bool_``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and not _numpy_bool(value)


def check_max_bytes(value: Any, name: str = "max_bytes") -> int | None:
    """A byte cap as an int: None (no cap), a positive int (a NumPy integer too), or a size string parsed by
    :func:`parse_size` (``"2GB"`` = 2*10**9 bytes, ``"2GiB"`` = 2*2**30 bytes; a fraction of a byte is refused).

    Raises:
      TypeError: a bool, a float or any other type (pass an int number of bytes or a string such as "2GB").
      ValueError: a number <= 0 or over :data:`MAX_BYTES`, or a string :func:`parse_size` does not read; the
        message starts with ``name``.
    """
    given = value
    if isinstance(value, str):
        try:
            value = parse_size(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    elif not (value is None or is_int(value)):
        raise TypeError(f"{name} must be an int number of bytes, a size string such as '2GB' or '500MiB', or "
                        f"None for no cap; got {type(given).__name__} {given!r}")
    value = None if value is None else int(value)
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be a positive number of bytes or None for no cap, got {_shown(given)}")
    if value is not None and value > MAX_BYTES:
        raise ValueError(f"{name}: {_shown(given)} is more than the largest cap xlakit accepts, {MAX_BYTES} bytes "
                         "(just under 8 EiB); pass None for no cap")
    return value


def check_int(value: Any, name: str, *, minimum: int = 0, what: str = "number of bytes",
              maximum: int = MAX_BYTES) -> int:
    """``int(value)`` if it is an integer (:func:`is_int`: an int or a NumPy integer, not a bool) from ``minimum``
    to ``maximum`` (default :data:`MAX_BYTES`, what an int64 holds: byte counts, batch sizes, bounds of a
    ``collections.deque``). A 400-digit budget raised "OverflowError: int too large to convert to float" from deep
    in the arithmetic; a 400-digit batch size an MLIR type error; ``EventLog(maxlen=2**64)`` "Python int too large
    to convert to C ssize_t".

    Raises:
      TypeError: not an integer (a float, a numeric string or a bool included), naming ``name``.
      ValueError: below ``minimum`` or over ``maximum``, naming ``name``.
    """
    top = "(2**63-1)" if maximum == MAX_BYTES else ""
    if not is_int(value):
        raise TypeError(f"{name} must be an int {what} from {minimum} to {maximum}{' ' + top if top else ''}, got "
                        f"{type(value).__name__} {_shown(value)}")
    if not minimum <= int(value) <= maximum:
        raise ValueError(f"{name} must be an int {what} from {minimum} to {maximum}{' ' + top if top else ''}, got "
                         f"{_shown(value)}")
    return int(value)


def check_number(value: Any, name: str, low: float, high: float, *, low_open: bool = False,
                 high_open: bool = False) -> float:
    """``value`` as a float if it is a real number (int, float or a numpy scalar; not a bool, not a string) in the
    interval from ``low`` to ``high`` (``low_open`` / ``high_open``: that end excluded). NaN is refused (it fails
    every comparison, so ``not 0 < nan <= 1`` let it through some checks), and so is an int too large for a float.

    Raises:
      TypeError: not a real number, naming ``name`` and the interval.
      ValueError: NaN or outside the interval, naming ``name`` and the interval.
    """
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in {interval}, got {type(value).__name__} {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int of hundreds of digits: out of any interval a float can bound
        number = -math.inf if value < 0 else math.inf
    inside = (low < number if low_open else low <= number) and (number < high if high_open else number <= high)
    if not inside:  # NaN included
        raise ValueError(f"{name} must be a number in {interval}, got {_shown(value)}")
    return number


def check_choice(value: Any, name: str, choices: Collection[str], *, optional: bool = True) -> str | None:
    """``value`` if it is one of the strings ``choices`` (or None, when ``optional``). A list passed where a name
    belongs raised "unhashable type" from a dict lookup; a misspelt name matched nothing and filtered silently.

    Raises:
      TypeError: not a string (nor None when ``optional``), naming ``name`` and the choices.
      ValueError: a string not among ``choices``, naming ``name`` and the choices.
    """
    if (value is None and optional) or (isinstance(value, str) and value in choices):
        return value
    allowed = ", ".join(repr(c) for c in choices) + (" or None" if optional else "")
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {allowed}, got {type(value).__name__} {_shown(value)}")
    raise ValueError(f"{name} must be one of {allowed}, got {_shown(value)}")


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is a bool (``numpy.bool_`` too): a string such as ``"false"`` is truthy and an array has no
    single truth value, so neither is read as a yes or no.

    Raises:
      TypeError: anything else, naming ``name``.
    """
    if isinstance(value, bool) or _numpy_bool(value):  # NumPy 2 names the type "bool": not its name alone
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {_shown(value)}")


def check_options(value: Any, name: str) -> dict[str, Any]:
    """``value`` (None -> ``{}``) as a dict, if it is a mapping with string keys: options that end up as keyword
    arguments (fsspec storage options). ``remote_options=0`` raised "'int' object is not iterable" and an int key
    "keywords must be strings", naming neither the setting nor what to pass.

    Raises:
      TypeError: not a mapping, or a key that is not a string, naming ``name``.
    """
    if value is None:
        return {}
    example = '{"endpoint_url": "http://host:9000"}'
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of fsspec storage options such as {example}, or None; got "
                        f"{type(value).__name__} {_shown(value)}")
    bad = next((k for k in value if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"{name}: every option name must be a string (they are passed as keyword arguments), got "
                        f"{type(bad).__name__} {_shown(bad)}")
    return dict(value)


def check_seconds(value: Any, name: str = "min_compile_time_s", *, positive: bool = False) -> float:
    """``value`` as a float number of seconds: a finite int or float (or NumPy number) >= 0 (> 0 when ``positive``),
    at most :data:`MAX_SECONDS` (bool and strings refused: ``" 5 "`` is not a number of seconds in an API).

    Raises:
      TypeError: not an int or float (a string such as "1s" included); pass a number of seconds, e.g. 0.5.
      ValueError: negative (or 0 when ``positive``), NaN, infinite, or over :data:`MAX_SECONDS`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy numbers too; numpy.bool_ is no Real
        raise TypeError(f"{name} must be a number of seconds (int or float, e.g. 0.5), "
                        f"got {type(value).__name__} {_shown(value)}")
    return finite_seconds(value, name, positive=positive)


def finite_seconds(value: Any, name: str, *, positive: bool = True) -> float:
    """``value`` (a number or a numeric string, e.g. from an environment variable) as a float number of seconds:
    finite, at most :data:`MAX_SECONDS`, and > 0 (``positive``) or >= 0.

    Raises:
      ValueError: naming ``name``: not a number, NaN, infinite, over :data:`MAX_SECONDS`, below the bound, or an
        int too large for a float (which ``float()`` reports as an ``OverflowError``).
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = float("nan")
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0) or seconds > MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number of seconds {'> 0' if positive else '>= 0'} and at most "
                         f"{MAX_SECONDS:.0e} (about 31 years), e.g. 30; got {_shown(value)}")
    return seconds


def wait_timeout(value: Any, name: str = "timeout") -> float | None:
    """A ``timeout`` of a public wait as Python's waits take it: None or ``inf`` -> None (wait for ever), else
    :func:`finite_seconds` (>= 0). ``threading`` raised "OverflowError: timestamp out of range for platform
    time_t" for inf, 1e10 or 400 digits, and NaN read as "still loading after nan s".

    Raises:
      ValueError: naming ``name``: NaN, negative, over :data:`MAX_SECONDS` (finite), or not a number.
    """
    if value is None or (isinstance(value, float) and value == math.inf):
        return None
    return finite_seconds(value, name, positive=False)
