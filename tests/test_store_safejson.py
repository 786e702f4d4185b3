"""Bounded JSON for bytes from a shared folder: linear time on any input, same values as json on good input."""

from __future__ import annotations

import json
import math
import signal
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlakit.store import safejson
from xlakit.store.safejson import UnsafeJson

MIB = 1024 * 1024


@pytest.mark.parametrize("raw", [
    b'"' + b'\\"' * (MIB // 2),  # a quote then many escaped quotes, unterminated: 128 kB took 35 s
    b'["' + b'\\"' * (MIB // 2) + b'"]',  # the same, terminated: one valid string
    b'"' * MIB,  # a million empty-string starts
    b'["' + b'\\\\' * (MIB // 2) + b'"]',  # escaped backslashes
    b'"' + b'\\' * MIB,  # a dangling escape run
    b"[" + b'"a",' * (MIB // 4) + b'"b"]',
], ids=["escaped-quotes", "escaped-quotes-closed", "quotes", "backslashes", "dangling", "many-strings"])
def test_adversarial_strings_parse_in_linear_time(raw):
    """1 MiB of adversarial string text takes milliseconds (the old regex was quadratic: 1 MiB ~ 40 min).
    The bound is generous (5 s on a loaded 2-core machine) and still 500x below the quadratic time; an alarm
    turns a quadratic parser into a failure after 10 s instead of a hung suite (``re`` checks signals)."""
    def fire(*_):
        raise TimeoutError("safejson.loads is not linear: 1 MiB did not parse within 10 s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(10)
    try:
        start = time.perf_counter()
        try:
            value = safejson.loads(raw)
        except UnsafeJson:
            value = None
        took = time.perf_counter() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert took < 5.0
    if raw.endswith(b'"]'):
        assert isinstance(value, list)


def test_unterminated_string_is_refused_with_its_reason():
    with pytest.raises(UnsafeJson, match="unterminated string"):
        safejson.loads(b'{"a": "b')


def test_brackets_inside_strings_do_not_count_as_nesting():
    deep_text = "[" * 1000 + "{" * 1000
    assert safejson.loads(json.dumps({"s": deep_text, "e": 'x\\"[['}).encode()) == {"s": deep_text, "e": 'x\\"[['}
    with pytest.raises(UnsafeJson, match="nested deeper than 64"):
        safejson.loads(b"[" * 65 + b"]" * 65)
    assert safejson.loads(b"[" * 64 + b"]" * 64) is not None


def test_integers_are_bounded_by_int64_at_every_length():
    for n in (0, -1, 10**17, -(10**17), 10**18 - 1, -(10**18) + 1, 10**18, 2**63 - 1, -(2**63) + 1):
        assert safejson.loads(str(n).encode()) == n
    for n in (2**63, -(2**63), 10**19, -(10**19), 10**4000):
        with pytest.raises(UnsafeJson, match="out of range"):
            safejson.loads(str(n).encode())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63) + 1, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e18, max_value=1e18) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, ensure_ascii=st.booleans())
def test_random_json_parses_exactly_as_json_does(value, ensure_ascii):
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8")
    assert safejson.loads(raw) == json.loads(raw)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200) | st.text(alphabet='[]{}"\\,:0123456789.eE-ntrufalse ', max_size=200).map(
    lambda t: t.encode()))
def test_random_bytes_give_a_value_or_unsafejson_only(raw):
    try:
        value = safejson.loads(raw)
    except UnsafeJson:
        return
    expected = json.loads(raw)  # accepted text is JSON, and means the same
    assert value == expected or (isinstance(expected, float) and math.isnan(expected))


def test_load_file_refuses_fifo_and_oversized_unread(tmp_path):
    import os

    from xlakit.store import ObjectRefused

    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ObjectRefused):
        safejson.load_file(tmp_path / "fifo.json", 1024)
    (tmp_path / "big.json").write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(ObjectRefused, match="over the 100-byte bound"):
        safejson.load_file(tmp_path / "big.json", 100)
    assert safejson.load_file(tmp_path / "big.json", 10_000) == [1] * 1001
