"""max_batch when XLA's footprint is not monotone in the batch size, and NumPy integers as counts.

Faults these tests catch (red team, CPU, jax 0.10.2): with ``lo`` on one of XLA's bad sizes (f32 (n, 1024)
cumsum: 65.7 MB at 4001 rows, 50.5 MB at 4016, 51.4 MB at 4096) ``max_batch(..., lo=4001, hi=4096)`` said
"nothing fits" after compiling 4001 alone, with no note; with ``lo=4000, hi=4100`` it answered 4000, with no note,
though 4096 fits. ``sweep(f, mk, np.array([1, 2, 4]))`` and ``max_batch(f, mk, np.int64(10000))`` were refused.

The search logic is tested on a synthetic footprint (``_row`` replaced: exact, instant); one test compiles a
real (n, 8) program, a few KiB, to show the same on XLA's own numbers.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit.memory import max_batch, sweep, weight_budget  # noqa: E402

sweep_module = importlib.import_module("xlakit.memory.sweep")  # xlakit.memory.sweep is also the function


def _tiled(n: int) -> int:
    """An XLA-like footprint: 100 bytes a row at multiples of 16, 30% more at other sizes."""
    return 100 * n if n % 16 == 0 else 130 * n


@pytest.fixture
def footprint(monkeypatch):
    """Replace compiling by ``cost(batch)`` bytes of temporaries; returns the list of sizes 'compiled'."""
    compiled: list[int] = []

    def install(cost):
        def row(fn, make_args, batch, cache, probe):
            compiled.append(batch)
            total = cost(batch)
            terms = dict.fromkeys(sweep_module.TERMS, 0) | {"temp_bytes": total}
            return {"batch": batch, "argument_bytes": 0, "output_bytes": 0, "alias_bytes": 0, "temp_bytes": total,
                    "constant_bytes": 0, "code_bytes": 0, "total_bytes": total, "peak_bytes": total,
                    "top_term": "temp_bytes", "cache": None, sweep_module._TERMS: terms}

        monkeypatch.setattr(sweep_module, "_row", row)
        return compiled

    return install


def _never(n):
    raise AssertionError("the synthetic footprint builds nothing")


def _fits(found, size: int) -> bool:
    return bool(found.frame.set_index("batch").loc[size, "fits"])


def test_lo_on_a_bad_size_is_not_nothing_fits_the_round_sizes_and_hi_are_checked(footprint):
    compiled = footprint(_tiled)
    found = max_batch(lambda x: x, _never, 100 * 4096, lo=4001, hi=4096)
    # before: MaxBatch(nothing fits ...) after compiling 4001 alone, notes=()
    assert found.batch == 4096 and found.bytes == 409_600
    assert compiled[0] == 4001 and {4016, 4096} <= set(compiled)
    assert any("4016 (fits)" in n and "lo=4001" in n for n in found.notes), found.notes
    assert any("not monotonic" in n for n in found.notes), found.notes


def test_round_sizes_above_the_bisections_answer_are_checked_and_the_answer_still_has_a_next_that_misses(footprint):
    footprint(_tiled)
    found = max_batch(lambda x: x, _never, 100 * 4096, lo=4000, hi=4100)
    # before: 4000, no note (4001 is a bad size; 4016, 4032 and 4096 fit)
    assert found.batch == 4096
    assert _fits(found, 4096) and not _fits(found, 4097)  # the guarantee: the answer fits, the next size does not
    assert any("round sizes" in n and "4016 (fits)" in n and "4008 (no)" in n for n in found.notes), found.notes
    assert set(found.frame["batch"]) <= set(range(4000, 4101))


def test_when_nothing_fits_every_size_tried_is_counted_not_one(footprint):
    footprint(_tiled)
    found = max_batch(lambda x: x, _never, 1000, lo=4001, hi=4096)
    assert found.batch is None and found.bytes is None
    tried = sorted(int(b) for b in found.frame["batch"])
    assert tried == [4001, 4008, 4016, 4032, 4096]
    text = repr(found)
    assert text.startswith(f"MaxBatch(none of the {len(tried)} sizes tried (4001, 4008, 4016, 4032, 4096) fits"), text
    assert "the least any needs is 392.2 KiB (batch 4016)" in text, text
    assert "nothing fits" not in text


def test_a_monotone_footprint_costs_a_few_round_sizes_more_and_keeps_its_answer(footprint):
    compiled = footprint(lambda n: 100 * n)
    found = max_batch(lambda x: x, _never, 100 * 1000, lo=1)
    assert found.batch == 1000 and _fits(found, 1000) and not _fits(found, 1001)
    assert len(compiled) == len(set(compiled)) <= 25  # doubling 11 + bisecting 9 + round sizes 1008 (1024 tried)
    assert found.limiting_term == "temp_bytes"
    assert not any("not monotonic" in n for n in found.notes)


def test_a_round_size_that_fits_is_searched_on_from_not_taken_as_the_answer(footprint):
    footprint(lambda n: 100 * n if n % 16 == 0 else 130 * n)
    found = max_batch(lambda x: x, _never, 100 * 5000, lo=3000)
    # 3000..3846 fit as bad sizes; multiples of 16 fit up to 4992 and 5000 is one too far from a tile
    assert found.batch == 4992 and not _fits(found, 4993)


def test_xla_on_cpu_a_bad_lo_still_finds_the_round_size_that_fits():
    """The same on XLA's own numbers: f32 (n, 8) cumsum, a few KiB; 31 rows need more than 32."""
    def f(a):
        return jnp.cumsum(jnp.sin(a), 0)

    def make(n):
        return (jnp.ones((n, 8), jnp.float32),)

    totals = dict(zip(*(sweep(f, make, [31, 32]).frame[c] for c in ("batch", "total_bytes")), strict=True))
    assert totals[31] > totals[32], totals  # XLA lays 32 rows out in less than 31 (checked on jax 0.10.2)
    found = max_batch(f, make, int(totals[32]), lo=31, hi=40)
    assert found.batch == 32, (found, found.notes)  # before: MaxBatch(nothing fits ...)
    assert _fits(found, 32) and not _fits(found, 33)


def test_numpy_integers_are_batch_sizes_budgets_and_bounds_and_bools_are_not(footprint):
    compiled = footprint(lambda n: 100 * n)
    frame = sweep(lambda x: x, _never, np.array([4, 1, 2])).frame
    assert list(frame["batch"]) == [1, 2, 4] and all(type(b) is int for b in compiled)
    found = max_batch(lambda x: x, _never, np.int64(10_000), lo=np.int32(1), hi=np.uint16(200))
    assert found.batch == 100 and type(found.budget_bytes) is int
    for bad in ([True, 2], [np.bool_(True)], [1.0]):
        with pytest.raises(ValueError, match="batch sizes must be positive ints"):
            sweep(lambda x: x, _never, bad)
    with pytest.raises(ValueError, match="budget_bytes must be a positive int"):
        max_batch(lambda x: x, _never, np.bool_(True))
    budget = weight_budget(np.int64(10**9), np.array([10**6, 3 * 10**6]), pinned_bytes=np.int32(5))
    assert (budget.arena_bytes, budget.scratch_bytes, budget.pinned_bytes) == (10**9, 3 * 10**6, 5)
    assert type(budget.scratch_bytes) is int and budget.fits(np.int64(1))
