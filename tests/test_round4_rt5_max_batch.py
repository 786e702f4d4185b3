"""max_batch when XLA's footprint is not monotone in the batch size, and NumPy integers as counts.

Faults these tests catch (red team, CPU, jax 0.10.2): with ``lo`` on one of XLA's bad sizes (f32 (n, 1024)
cumsum: 65.7 MB at 4001 rows, 50.5 MB at 4016, 51.4 MB at 4096) ``max_batch(..., lo=4001, hi=4096)`` said
"nothing fits" after compiling 4001 alone, with no note; with ``lo=4000, hi=4100`` it answered 4000, with no note,
though 4096 fits. ``sweep(f, mk, np.array([1, 2, 4]))`` and ``max_batch(f, mk, np.int64(10000))`` were refused.
Then (a user test) the round-size check restarted the search at every round size that fit: ``lo=1000`` and a
60 MB budget compiled 69 programs (15 without the check) for 4768, and its notes named hi where none was given,
named 4032 and 4096 in two notes and said "no size doubled from lo=4001 fits" after compiling 4001 alone.

The search logic is tested on a synthetic footprint (``_row`` replaced: exact, instant); one test compiles a
real (n, 8) program, a few KiB, to show the same on XLA's own numbers.
"""

from __future__ import annotations

import importlib
import math
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit.memory import max_batch, sweep, weight_budget  # noqa: E402

sweep_module = importlib.import_module("xlakit.memory.sweep")  # xlakit.memory.sweep is also the function
batch_search = importlib.import_module("xlakit.memory._batch_search")


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
    assert any(n.startswith("4000 fits and 4001 does not; sizes above 4000") and "4016 (fits)" in n
               and "4008 (does not fit)" in n for n in found.notes), found.notes
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
    assert len(compiled) == len(set(compiled)) == 20  # doubling 11 + halving 9; round sizes 1008, 1024 tried then
    assert found.limiting_term == "temp_bytes"
    assert not any("not monotonic" in n for n in found.notes)


def test_a_round_size_that_fits_is_searched_on_from_not_taken_as_the_answer(footprint):
    footprint(lambda n: 100 * n if n % 16 == 0 else 130 * n)
    found = max_batch(lambda x: x, _never, 100 * 5000, lo=3000)
    # 3000..3846 fit as bad sizes; multiples of 16 fit up to 4992 and 5000 is one too far from a tile
    assert found.batch == 4992 and not _fits(found, 4993)


def _cumsum_like(n: int) -> int:
    """XLA:CPU's f32 (n, 1024) ``cumsum(sin(a))`` in shape: multiples of 16 cheap (4768 rows fit 60 MB, 4784 do
    not; XLA: 59,977,728 B at 4768), other sizes 30 % dearer (4000 fits, 4001 does not): every round size above
    4000 but 4008 fits, and so does every multiple of 16 up to 4768."""
    return 12_580 * n if n % 16 == 0 else 16_410 * n


def _every_256th(n: int) -> int:
    return 100 * n if n % 256 == 0 else 200 * n


@pytest.mark.parametrize(("cost", "budget", "lo", "batch", "compiles"), [
    (_cumsum_like, 60_000_000, 1000, 4768, 30),  # before: 69 (each round size that fit restarted the search)
    (_tiled, 100 * 5000, 3000, 4992, 30),  # before: 78
    (_every_256th, 100 * 100_000, 1000, 99_840, 45),  # before: 236
    (lambda n: 100 * n, 100 * 1000, 1, 1000, 20),  # before: 20
])
def test_the_round_sizes_cost_a_bounded_number_of_compiles_and_keep_the_answers_guarantee(
        footprint, cost, budget, lo, batch, compiles):
    compiled = footprint(cost)
    found = max_batch(lambda x: x, _never, budget, lo=lo)
    assert found.batch == batch and _fits(found, batch) and not _fits(found, batch + 1)
    assert len(compiled) == len(set(compiled)) == compiles


def test_on_a_cumsum_shaped_table_one_pass_of_round_sizes_then_a_halving_search_of_one_gap(footprint, monkeypatch):
    """69 programs before for lo=1000 (15 without the round sizes): now the search from lo, one pass of round
    sizes above its answer, and halving from the largest that fits to the next size known not to fit."""
    compiled = footprint(_cumsum_like)
    rounds = batch_search.round_sizes
    monkeypatch.setattr(batch_search, "round_sizes", lambda n, limit: [])
    assert max_batch(lambda x: x, _never, 60_000_000, lo=1000).batch == 4000  # the search from lo alone
    search = list(compiled)
    assert search[:4] == [1000, 2000, 4000, 8000] and 6000 in search and len(search) == 15
    monkeypatch.setattr(batch_search, "round_sizes", rounds)
    compiled.clear()
    found = max_batch(lambda x: x, _never, 60_000_000, lo=1000)
    assert compiled[:15] == search and compiled[15:19] == [4008, 4016, 4032, 4096]  # 7 at most; 4 here
    halving = compiled[19:]  # 4096 fits and 6000 (a multiple of 16, like 4016) does not: multiples of 16 first
    assert halving == [5040, 4560, 4800, 4672, 4736, 4768, 4784, 4776, 4772, 4770, 4769]
    assert len(halving) <= math.ceil(math.log2(6000 - 4096))
    assert not {4864, 8192} & set(compiled)  # no second pass of round sizes (above 4768: 4864, 8192)
    assert found.batch == 4768 and _fits(found, 4768) and not _fits(found, 4769)


def test_halving_a_gap_costs_at_most_log2_of_it_on_any_table_and_any_step():
    """The bound the README gives: on multiples of ``step`` first, then every size, ``ceil(log2 gap)`` at most."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        gap, step = int(rng.integers(2, 3000)), int(2 ** rng.integers(0, 9))
        table = {s: bool(rng.integers(2)) for s in range(1000, 1001 + gap)}
        table[1000], table[1000 + gap] = True, False  # the ends: one that fits, one that does not
        compiled: list[int] = []

        def row(fn, make_args, batch, cache, probe, table=table, compiled=compiled):
            compiled.append(batch)
            total = 0 if table[batch] else 2
            return {"total_bytes": total, "peak_bytes": total}

        found = batch_search.Search(row, None, None, 1, None, 1 << 20)
        found.check([1000, 1000 + gap])
        compiled.clear()
        answer = found.bisect(1000, 1000 + gap, step)
        assert len(compiled) <= math.ceil(math.log2(gap)), (gap, step, compiled)
        assert table[answer] and found.misses(answer + 1)


def _named(notes) -> list[tuple[int, bool]]:
    return [(int(s), w == "fits") for s, w in re.findall(r"(\d+) \((fits|does not fit)\)", " ".join(notes))]


def test_notes_name_each_size_compiled_past_the_search_once_and_nothing_that_was_not(footprint):
    compiled = footprint(_cumsum_like)
    found = max_batch(lambda x: x, _never, 60_000_000, lo=1000)
    named, text = _named(found.notes), " ".join(found.notes)
    more = sum(int(m) for m in re.findall(r"and (\d+) more", text))
    assert len(named) == len({s for s, _ in named}) and len(named) + more == len(compiled) - 15, found.notes
    assert all(fits == _fits(found, s) for s, fits in named)
    assert all(len(_named([n])) <= 8 for n in found.notes)
    assert found.notes[0].startswith("4000 fits and 4001 does not; sizes above 4000 that XLA may lay out in less")
    assert found.notes[1].startswith("4096 is the largest of those that fits, so sizes above it were tried too, "
                                     "multiples of 16 first: ") and found.notes[1].endswith(
                                         "and 3 more; the answer: 4768 fits and 4769 does not")
    assert "bisect" not in text and "hi" not in re.findall(r"[a-z]+", text)


def test_notes_when_lo_does_not_fit_say_what_was_tried_and_name_hi_only_when_given(footprint):
    compiled = footprint(lambda n: 8192 * n)
    found = max_batch(lambda x: x, _never, 1000, lo=1)
    # before: "no size doubled from lo=1 fits, so the round sizes above lo ... and hi were compiled too: 2 (no)"
    assert compiled == [1, 2] and found.notes == (
        "lo=1 does not fit; sizes above 1 that XLA may lay out in less memory were checked too (the next multiples "
        "of 8 to 256 and the next power of two, up to twice 1): 2 (does not fit)",)
    compiled.clear()
    footprint(_tiled)
    found = max_batch(lambda x: x, _never, 1000, lo=4001, hi=5000)
    # before: "no size doubled from lo=4001 fits" after compiling 4001 alone; 4032 and 4096 named in two notes
    assert found.notes[0] == (
        "lo=4001 does not fit; sizes above 4001 that XLA may lay out in less memory were checked too (the next "
        "multiples of 8 to 256 and the next power of two, up to twice 4001, and hi=5000): 4008 (does not fit), "
        "4016 (does not fit), 4032 (does not fit), 4096 (does not fit), 5000 (does not fit)")
    assert len(_named(found.notes)) == len(compiled) - 1 == 5 and "doubled" not in " ".join(found.notes)


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
