"""The Cache tab's signature column tells one function's entries apart: the signature was cut to a width, so
two entries of ``f(params, batch)`` differing only in ``batch``'s shape (past the cut) read the same. Now the
leaves the entries share are abbreviated, those that differ always shown, and the whole signature is the
cell's hover text."""

from __future__ import annotations

import re

import jax.numpy as jnp

import xlakit
from xlakit.events import EventLog
from xlakit.view.signatures import LIMIT, distinguishing_texts, signature_text
from xlakit.widgets import CacheBrowser

PARAMS = [f"f32[{64 + i},64]" for i in range(14)]  # 14 parameter leaves: ~160 characters, past the limit


def test_the_leaves_that_differ_are_kept_and_the_shared_ones_abbreviated():
    a, b = [*PARAMS, "f32[8,4]"], [*PARAMS, "f32[16,4]"]
    assert len(", ".join(a)) > LIMIT
    shown_a, shown_b = distinguishing_texts([a, b])
    assert shown_a != shown_b and shown_a.endswith(", f32[8,4]") and shown_b.endswith(", f32[16,4]")
    # The shared leaves from the first on, as many as fit, then the rest of them counted; the same positions
    # in both, so they line up.
    assert shown_a.startswith("f32[64,64], f32[65,64], ") and len(shown_a) <= LIMIT
    (run,) = re.findall(r"…\((\d+) same\)", shown_a)
    assert shown_a.count("f32[") + int(run) == 15 == shown_b.count("f32[") + int(run)
    assert shown_a.replace("f32[8,4]", "") == shown_b.replace("f32[16,4]", "")
    # A difference in the middle: shared leaves on both sides of it are abbreviated, the leaf itself shown.
    mid_a, mid_b = distinguishing_texts([[*PARAMS, "i32[]", *PARAMS], [*PARAMS, "i32[] donated", *PARAMS]])
    assert "i32[]" in mid_a and "i32[] donated" in mid_b and mid_a.endswith(" same)")
    # One entry with a leaf more: the extra leaf is a difference.
    short, longer = distinguishing_texts([PARAMS, [*PARAMS, "f32[2]"]])
    assert longer.endswith("f32[2]") and "f32[2]" not in short


def test_a_donated_variant_is_told_by_its_shapes_and_a_count_of_donated_leaves():
    """A train step compiled with and without donation differs in every parameter leaf ("donated"): those
    differences crowded out the batch's shape (every label read "…(154 more differ)" and the dashboard fell
    back to key hashes). The shapes that differ stay shown; the donated leaves are counted after them."""
    plain = [*PARAMS, "i32[8,128]"]
    texts = distinguishing_texts([plain, [*PARAMS, "i32[16,128]"], [*(p + " donated" for p in PARAMS), "i32[8,128]"]])
    assert texts[0].endswith(", i32[8,128]") and texts[1].endswith(", i32[16,128]")
    assert texts[2].endswith(", i32[8,128]; 14 donated") and len(set(texts)) == 3
    from xlakit.view.breakdown import unique_labels

    sigs = [[{"dtype": "f32", "shape": "64x64", "donation": d}] * 14 + [{"dtype": "i32", "shape": f"{n}x128"}]
            for n, d in ((8, None), (16, None), (8, True))]
    labels = unique_labels(["jit_step"] * 3, ["a-1", "b-2", "c-3"], sigs)
    assert labels == ["jit_step(…, i32[8,128])", "jit_step(…, i32[16,128])", "jit_step(…, i32[8,128]; 14 donated)"]


def test_alike_or_unrecorded_signatures_are_cut_as_before_and_many_differences_are_counted():
    cut = ", ".join(PARAMS)[:LIMIT - 1] + "…"
    assert distinguishing_texts([PARAMS]) == [cut]
    assert signature_text([{"dtype": "f32", "shape": "8x4"}] * 20, LIMIT).endswith("…")
    same = distinguishing_texts([PARAMS, PARAMS, None])
    assert same[0] == same[1] == cut and same[2] is None
    # Every one of 40 leaves differs: the first that fit are shown, the rest counted.
    a = [f"f32[{i},1]" for i in range(40)]
    b = [f"f16[{i},1]" for i in range(40)]
    text_a, text_b = distinguishing_texts([a, b])
    assert text_a.startswith("f32[0,1], f32[1,1]") and text_b.startswith("f16[0,1]")
    shown = text_a.count("f32[")
    assert f"…({40 - shown} more differ)" in text_a and len(text_a) <= LIMIT + 20


def test_cache_browser_tells_apart_two_entries_differing_only_in_the_second_arguments_shape(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    try:
        f = cache.jit(lambda params, batch: sum(jnp.sum(p) for p in params) + jnp.sum(batch))
        params = [jnp.ones((64 + i, 64)) for i in range(14)]
        f(params, jnp.ones((8, 4)))
        f(params, jnp.ones((16, 4)))
        b = CacheBrowser(cache)
        labels = sorted(label for label, _ in b._selector.options)
        assert len(labels) == 2 and len(set(labels)) == 2, labels
        assert any("f32[8,4])" in label for label in labels) and any("f32[16,4])" in label for label in labels)
        # The table: the shortened cell for each, its hover text the whole signature (all 15 leaves).
        cells = re.findall(r"<td class='xlakit-text xlakit-wrap' title='([^']*)'>([^<]*)</td>", b.table_html.value)
        assert len(cells) == 2, b.table_html.value[:2000]
        for full, shown in cells:
            assert full.count("f32[") == 15 and full.startswith("f32[64,64], f32[65,64]")
            assert "same)" in shown and shown.endswith(("f32[8,4]", "f32[16,4]")) and shown != full
        assert {shown for _, shown in cells} == {b.frame["signature"].iloc[0], b.frame["signature"].iloc[1]}
        b.close()
    finally:
        cache.close()
