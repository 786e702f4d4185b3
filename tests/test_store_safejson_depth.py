"""The bounded JSON parser measures nesting outside strings without a Python step per token: the fast depth
(:func:`xlakit.store.safejson._depth`) must agree with the token scan (``check_depth``) on every input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlakit.store import safejson
from xlakit.store.safejson import UnsafeJson


def _token_depth(raw: bytes) -> int:
    """The deepest nesting as check_depth's own tokens see it (strings skipped, unterminated ones too)."""
    depth = deepest = 0
    for m in safejson._TOKEN.finditer(raw):
        tok = m.group()
        if tok[:1] == b'"':
            continue
        depth += 1 if tok in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=40).map(lambda b: bytes(b'[]{}"\\a,'[x % 8] for x in b)))
def test_fast_depth_equals_the_token_scan_on_bracket_quote_and_escape_soup(raw):
    assert safejson._depth(raw) == _token_depth(raw)


def test_many_shallow_containers_parse_and_one_too_deep_is_refused():
    # 200 sibling lists: over 64 brackets in all (the count shortcut cannot decide), depth 2: accepted.
    wide = json.dumps({"shapes": [[i, i + 1] for i in range(200)], "s": "[[[[" * 50}).encode()
    assert safejson.loads(wide)["shapes"][199] == [199, 200]
    deep = b'{"pad": [' + b"[]," * 100 + b"[" * 64 + b"]" * 64 + b"]}"  # 66 levels deep, after 100 siblings
    with pytest.raises(UnsafeJson, match="nested deeper than 64"):
        safejson.loads(deep)


def test_brackets_inside_an_escaped_string_do_not_count():
    raw = json.dumps({"s": '\\"' + "[" * 100, "t": ["x"] * 70}).encode()
    assert safejson._depth(raw) == 2
    assert safejson.loads(raw)["s"].endswith("[" * 100)
