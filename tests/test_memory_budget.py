"""weight_budget: the seed system's formula, pinned bytes, over-commit, and a ceiling that only rises."""

from __future__ import annotations

import math

import pytest

from xlakit.memory import Budget, weight_budget

GiB = 2**30


def test_the_formula_picks_the_smaller_term():
    b = weight_budget(80 * GiB, 10 * GiB, fraction=0.9, wiggle=0.05)
    assert b.pool_bytes == min(math.floor(0.9 * 80 * GiB), math.floor(0.95 * 80 * GiB) - 10 * GiB) == 66 * GiB
    assert b.limited_by == "scratch" and b.available_bytes == 66 * GiB and not b.overcommitted
    small = weight_budget(80 * GiB, 1 * GiB, fraction=0.5, wiggle=0.05)
    assert small.pool_bytes == 40 * GiB and small.limited_by == "fraction"


def test_pinned_bytes_come_off_and_overcommit_is_flagged():
    b = weight_budget(100, 20, fraction=1.0, wiggle=0.0, pinned_bytes=50)
    assert (b.pool_bytes, b.available_bytes, b.overcommitted) == (80, 30, False)
    assert b.fits(30) and not b.fits(31)
    over = b.with_pinned(81)
    assert over.available_bytes == -1 and over.overcommitted
    none_left = weight_budget(100, 95, fraction=1.0, wiggle=0.05)
    assert none_left.pool_bytes == 0 and none_left.overcommitted and not none_left.fits(0)


def test_update_only_raises_the_scratch_ceiling():
    b = weight_budget(1000, [100, 300, 200], fraction=1.0, wiggle=0.0)
    assert b.scratch_bytes == 300 and b.pool_bytes == 700
    lower = b.update(50)
    assert lower == b and lower is not b  # a new Budget, same numbers
    higher = b.update([400, 10])
    assert (higher.scratch_bytes, higher.pool_bytes) == (400, 600)
    assert b.scratch_bytes == 300  # frozen: the original is unchanged
    with pytest.raises(AttributeError):
        b.pool_bytes = 1  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, match", [
    ({"arena_bytes": 0}, "arena_bytes must be > 0"),
    ({"fraction": 0.0}, "fraction"),
    ({"fraction": 1.5}, "fraction"),
    ({"wiggle": 1.0}, "wiggle"),
    ({"pinned_bytes": -1}, "pinned_bytes"),
    ({"scratch_bytes": -5}, "scratch bytes must be >= 0"),
    # 400 digits raised "OverflowError: int too large to convert to float", naming nothing
    ({"arena_bytes": 10**400}, r"arena_bytes must be an int number of bytes from 1 to 9223372036854775807"),
    ({"pinned_bytes": 10**400}, r"pinned_bytes must be an int number of bytes from 0 to"),
    ({"scratch_bytes": [10, 10**400]}, r"scratch_bytes must be an int number of bytes from 0 to"),
])
def test_bad_values_raise_saying_which(kwargs, match):
    args = {"arena_bytes": 1000, "scratch_bytes": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        weight_budget(**args)
    with pytest.raises(TypeError, match="int"):
        weight_budget(1000.0, 10)  # type: ignore[arg-type]


def test_display_forms():
    b = weight_budget(2 * GiB, GiB // 2)
    assert isinstance(b, Budget) and "available" in repr(b) and "Weight budget" in b._repr_html_()
    assert b.to_frame().loc[0, "pool_bytes"] == b.pool_bytes
    assert "OVERCOMMITTED" in repr(weight_budget(100, 100))


def test_budget_html_says_what_each_number_is():
    """JupyterLab trial: "wiggle 0.05" and "limited by fraction" were shown without a word of what they are."""
    import re
    from html import unescape

    from xlakit.memory import weight_budget

    b = weight_budget(16 * 2**30, 2 * 2**30, fraction=0.5, wiggle=0.05)
    rows = dict(re.findall(r"<tr><td[^>]*>(.*?)</td><td[^>]*>(.*?)</td></tr>", unescape(b._repr_html_())))
    assert rows["wiggle"] == "0.05: a share of the arena kept free for fragmentation"
    assert rows["limited by"].startswith(b.limited_by + ": ")
    assert rows["pool"].startswith("8.0 GiB = min(") and b.pool_bytes == 8 * 2**30  # 0.5 × 16 GiB < 0.95 × 16 − 2
    assert rows["overcommitted"] == "no"
