"""xlakit._jax.warmup: one run on zeros of a program's own avals; never raises."""

import jax
import jax.numpy as jnp
import numpy as np

from xlakit._jax.warmup import warm_up, zero_arguments


def test_zero_arguments_match_the_programs_avals_and_placement():
    compiled = jax.jit(lambda w, x: (w["a"] * x).sum(0)).lower(
        {"a": jnp.ones((3, 2), jnp.float32)}, jnp.ones((3, 2), jnp.float32)).compile()
    args, kwargs = zero_arguments(compiled)
    assert kwargs == {}
    assert set(args[0]) == {"a"}
    for a in (args[0]["a"], args[1]):
        assert a.shape == (3, 2) and a.dtype == jnp.float32
        assert not np.asarray(a).any()
        assert a.devices() == {jax.devices()[0]}


def test_warm_up_runs_a_donating_program_and_leaves_it_usable():
    # Donated inputs: warm_up must build its own buffers, so the caller's array is still alive afterwards.
    compiled = jax.jit(lambda x, y: (x + y, y * 2), donate_argnums=0).lower(
        jnp.zeros((4,), jnp.int32), jnp.zeros((4,), jnp.int32)).compile()
    first, second = zero_arguments(compiled)[0][0], zero_arguments(compiled)[0][0]
    assert first is not second  # fresh buffers per call: a donated zero is never reused
    mine = jnp.arange(4, dtype=jnp.int32)
    result = warm_up(compiled)
    assert result.ok, result.reason
    assert result.seconds > 0
    assert not mine.is_deleted()
    out = compiled(jnp.arange(4, dtype=jnp.int32), mine)
    np.testing.assert_array_equal(np.asarray(out[0]), [0, 2, 4, 6])
    np.testing.assert_array_equal(np.asarray(out[1]), [0, 2, 4, 6])


def test_warm_up_reports_instead_of_raising():
    # A typed PRNG key warms up on all-zero key data (it used to be skipped: "no zero host array").
    compiled = jax.jit(lambda k: jax.random.normal(k, (2,))).lower(jax.random.key(0)).compile()
    result = warm_up(compiled)
    assert result.ok, result.reason
    np.testing.assert_array_equal(np.asarray(compiled(jax.random.key(0))),
                                  np.asarray(jax.random.normal(jax.random.key(0), (2,))))
    # Not a Compiled at all: the failure is returned, not raised.
    bad = warm_up(object())
    assert not bad.ok and "AttributeError" in bad.reason
