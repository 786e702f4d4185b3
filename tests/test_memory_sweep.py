"""What would fit: a compile-only sweep over batch sizes through the cache (a rerun compiles nothing), a
max_batch search that agrees with the sweep and names the term that crosses the budget, and a probe column
that says whether the estimate can be trusted."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xlakit
from xlakit.memory import max_batch, sweep


def _step(w, x):
    h = jnp.tanh(x @ w)
    return jax.grad(lambda w: (jnp.tanh(x @ w) ** 2).mean())(w), h.sum()


def _args(n):
    return jax.ShapeDtypeStruct((64, 256), jnp.float32), jax.ShapeDtypeStruct((n, 64), jnp.float32)


SIZES = (16, 64, 256)


def test_a_rerun_through_the_cache_compiles_nothing_and_max_batch_agrees_with_the_sweep(cache):
    fn = jax.jit(_step)
    first = sweep(fn, _args, SIZES, cache=cache)
    assert list(first.frame["batch"]) == list(SIZES)
    assert set(first.frame["cache"]) <= {"store", "skip"}
    xlakit.events.log().clear()
    again = sweep(fn, _args, SIZES, cache=cache)
    kinds = [e.kind for e in xlakit.events.log().events() if e.kind in ("hit", "miss", "store", "compile")]
    assert list(again.frame["cache"]) == ["hit"] * len(SIZES)
    assert kinds and set(kinds) == {"hit"}, kinds
    cols = ["argument_bytes", "output_bytes", "temp_bytes", "total_bytes", "peak_bytes"]
    assert again.frame[cols].equals(first.frame[cols])
    f = first.frame
    # argument = w (64 KiB) + x (n x 64 float32); the footprint grows with the batch
    assert list(f["argument_bytes"]) == [64 * 256 * 4 + n * 64 * 4 for n in SIZES]
    assert f["total_bytes"].is_monotonic_increasing
    assert (f["total_bytes"] == f["argument_bytes"] + f["output_bytes"] - f["alias_bytes"] + f["temp_bytes"]).all()

    table = f.set_index("batch")["total_bytes"]
    budget = int((table[64] + table[256]) // 2)
    found = max_batch(fn, _args, budget, lo=64, hi=256, cache=cache)
    assert 64 <= found.batch < 256 and found.bytes <= budget < table[256]
    tried = found.frame.set_index("batch")
    assert tried.loc[found.batch, "fits"] and not tried.loc[found.batch + 1, "fits"]
    assert tried.loc[64, "total_bytes"] == table[64] and tried.loc[64, "cache"] == "hit"  # the sweep's program
    # x (n x 64) and the tanh temporaries (n x 256) grow with n; the weights do not: temporaries cross first
    assert found.limiting_term == "temp_bytes"
    assert "what grows past the budget first: temporaries" in repr(found)  # the user's word, not the column's
    with pytest.raises(ValueError, match="positive int"):
        max_batch(fn, _args, 0)


def test_the_probe_at_the_max_batch_boundary_agrees_within_its_tolerance():
    # elementwise and a scan: XLA's buffer assignment accounts for all of it, so the probe can confirm it
    fn = jax.jit(lambda a: jnp.cumsum(jnp.sin(a) * 2.0, axis=0))

    def make(n):
        return (jax.ShapeDtypeStruct((n, 1024), jnp.float32),)

    found = max_batch(fn, make, 3 * 2**20, lo=240, hi=256)  # 3 x n x 4 KiB: 256 rows are just over
    assert 240 <= found.batch < 256 and found.bytes <= 3 * 2**20
    row = sweep(fn, make, [found.batch], probe=True).frame.iloc[0]
    assert row["total_bytes"] == found.bytes
    assert row["agrees"] is True or row["agrees"] == True  # noqa: E712 - numpy bool
    xla = row["temp_bytes"] + row["output_bytes"] - row["alias_bytes"]
    assert abs(int(row["probe_bytes"]) - int(xla)) <= max(2 * 2**20, xla // 100), row.to_dict()
    assert ": agrees with XLA's own figure" in row["probe_reason"]
    assert max_batch(fn, make, 10, lo=16, hi=32).batch is None


def test_a_search_compiles_only_the_users_program_and_allocates_no_batch():
    """Fault: each size max_batch tried showed three compile events in the timeline: the user's program, JAX's
    ``broadcast_in_dim`` helper that ``jnp.ones`` in make_args compiled for that size (and the arrays it
    allocated, up to the largest size tried), plus a recompile. Arguments are now made as shapes per size — and
    for real once per call, at the first size (lo): a builder that keeps what it made must keep arrays, not the
    trace's tracers, and a creation op's device= shows only when run — and the search's own retraces are no
    recompiles of the user's function."""
    def fresh_step(w, x):  # a function of its own: no earlier test's compiles are in JAX's in-memory caches
        return _step(w, x)

    fn = jax.jit(fresh_step)

    def concrete_args(n):
        return jnp.ones((64, 256), jnp.float32), jnp.ones((n, 64), jnp.float32)

    with xlakit.events.record() as log:
        found = max_batch(fn, concrete_args, 400_000, lo=16, hi=1024)
    compiled = [e.name for e in log if e.kind == "compile"]
    mine = [n for n in compiled if n == "jit_fresh_step"]
    assert found.batch is not None and len(mine) == len(found.frame) >= 4
    # the one real build at lo: jnp.ones of its two shapes (none where JAX compiled them before in this process),
    # nothing built per size
    helpers = [n for n in compiled if n != "jit_fresh_step"]
    assert set(helpers) <= {"jit_broadcast_in_dim"} and len(helpers) <= 2, compiled
    assert not [e for e in log if e.kind == "recompile"]  # the search's retraces are not the user's recompiles


def test_the_cache_enable_cache_returns_is_a_cache_for_sweep_and_max_batch(tmp_path):
    """Fault: the README's tour passes ``cache = xlakit.enable_cache()`` to ``max_batch(..., cache=cache)``, which
    raised AttributeError: 'TransparentCache' object has no attribute 'compile'. It compiles through the hooks."""
    def own_step(w, x):  # a function of its own, so JAX's in-process cache holds none of its programs
        return _step(w, x)

    cache = xlakit.enable_cache(tmp_path / "cache")
    try:
        first = sweep(jax.jit(own_step), _args, (16, 64), cache=cache)
        found = max_batch(jax.jit(own_step), _args, int(first.frame["total_bytes"].max()), lo=16, hi=64, cache=cache)
    finally:
        xlakit.disable_cache()
    assert list(first.frame["cache"]) == ["store", "store"]
    assert found.batch == 64 and set(found.frame["cache"]) <= {"hit", "store"}
    assert len(list((tmp_path / "cache").rglob("*.xlk"))) >= 2  # what the sweep compiled is in the cache


def test_max_batch_with_closed_over_weights_answers_a_batch_that_fits_and_the_next_does_not():
    """Fault: closed-over weights (an HLO constant) were in no term, so max_batch answered a batch whose peak
    held 40 MiB for a 24 MiB budget. Checked here against XLA's own figures by compiling the answer and the
    answer + 1 apart from the search."""
    from xlakit.memory import compiled_memory, peak

    weights = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)  # 1 MiB

    def forward(x):
        return jnp.tanh(x @ weights)

    def make(n):
        return (jax.ShapeDtypeStruct((n, 512), jnp.float32),)

    budget = 2 * 2**20  # 1 MiB of constant + 4 KiB per row (input and output rows): 256 rows fit exactly
    found = max_batch(jax.jit(forward), make, budget)
    at, after = (compiled_memory(jax.jit(forward), *make(n)) for n in (found.batch, found.batch + 1))
    assert found.batch == 256 and at.constant_bytes == after.constant_bytes == 2**20
    assert found.bytes == at.footprint_bytes == at.peak_bytes <= budget < after.footprint_bytes  # CPU: XLA's peak
    assert peak(jax.jit(forward), *make(found.batch)).total_bytes <= budget
    tried = found.frame.set_index("batch")
    assert tried.loc[256, "constant_bytes"] == 2**20 and not tried.loc[257, "fits"]
    assert (found.frame["peak_bytes"] <= found.frame["total_bytes"]).all()


def test_static_arguments_and_python_scalars_stay_values_in_sweep_and_max_batch():
    """Fault: a jitted step with a static ``train`` flag crashed inside the user's ``if train:``: every leaf of
    make_args was made a ShapeDtypeStruct, Python scalars and static arguments too."""
    from xlakit.memory import compiled_memory
    from xlakit.memory.sweep import _abstract_args

    @functools.partial(jax.jit, static_argnames="train")
    def step(x, scale, train):
        h = jnp.tanh(x @ jnp.ones((64, 64))) * scale
        if train:
            h = h * jax.random.bernoulli(jax.random.key(0), 0.9, h.shape)
        return h.sum()

    def make(n, train=False):
        return jnp.ones((n, 64)), 0.5, train

    x, scale, train = _abstract_args(step, make, 32)
    assert isinstance(x, jax.ShapeDtypeStruct) and x.shape == (32, 64)
    assert scale == 0.5 and isinstance(scale, float) and train is False
    frame = sweep(step, make, [32, 64]).frame.set_index("batch")
    for n in (32, 64):
        assert frame.loc[n, "total_bytes"] == compiled_memory(step, *make(n)).footprint_bytes
    trained = sweep(step, functools.partial(make, train=True), [64]).frame.set_index("batch")
    assert trained.loc[64, "total_bytes"] == compiled_memory(step, *make(64, True)).footprint_bytes
    assert trained.loc[64, "total_bytes"] != frame.loc[64, "total_bytes"]  # the train=True program
    found = max_batch(step, make, int(frame["total_bytes"].max()), lo=32, hi=64)
    assert found.batch == 64 and list(found.frame["batch"]) == [32, 64]


def test_sizes_past_int64_are_refused_by_name_before_anything_compiles():
    """Fault: a 400-digit budget raised "OverflowError: int too large to convert to float" after compiling, and a
    400-digit batch size an MLIR type error ("get(): incompatible function arguments")."""
    def never(b):
        raise AssertionError("nothing may be compiled")

    fn = jax.jit(lambda x: x * 2)
    for kwargs, name in (({"budget_bytes": 10**400}, "budget_bytes"), ({"budget_bytes": 1000, "lo": 10**400}, "lo"),
                         ({"budget_bytes": 1000, "hi": 10**400}, "hi")):
        with pytest.raises(ValueError, match=f"^{name} must be an int .* from 1 to 9223372036854775807"):
            max_batch(fn, never, **kwargs)
    with pytest.raises(ValueError, match=r"batch sizes must be positive ints \(at most 2\*\*63-1\)"):
        sweep(fn, never, [1, 10**400])
