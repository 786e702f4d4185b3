"""A comparison never states a change between two numbers printed alike, and says a figure once (found in user
trials, 2026-12-06: "one run occupies 5.3 MiB → 5.3 MiB" twice in one sentence; "parameter 8.6 MiB → 8.6 MiB"
in the HTML), and ``CompiledMemory``'s text names every term of its footprint (the constants were left out)."""

import jax
import jax.numpy as jnp
import numpy as np

import xlakit.memory as xm


def _roll_and_add(a, b):
    return jnp.roll(a, 1, axis=0) * 2, b + 1


def test_a_donation_comparison_tells_equal_looking_footprints_apart_and_says_them_once():
    args = (jnp.ones((700, 1000)), jnp.ones((1024,)))
    c = xm.compare(xm.peak(jax.jit(_roll_and_add), *args),
                   xm.peak(jax.jit(_roll_and_add, donate_argnums=(0, 1)), *args))
    fa, fb = c.footprint_a, c.footprint_b
    assert fa - fb == 4096  # b written in place; a's roll keeps a copy
    text = repr(c)
    assert text.count("one run occupies") == 1 and f"({fa:,} B) → " in text and f"({fb:,} B)" in text
    assert f"{fa:,} B" in c._repr_html_()


def test_compiled_memory_text_names_the_constants_its_footprint_counts():
    w = np.random.RandomState(0).randn(512, 512).astype(np.float32)  # not foldable into a broadcast
    m = xm.compiled_memory(jax.jit(lambda x: jnp.tanh(x @ w)), jnp.ones((8, 512)))
    assert m.constant_bytes == w.nbytes and "constant=1.0 MiB" in repr(m)


def test_a_comparison_names_its_two_programs_in_its_title():
    """JupyterLab trial: "Memory at the peak: a → b" over two programs both called jit_step told neither apart."""
    import jax
    import jax.numpy as jnp

    from xlakit.memory import compare, peak

    def step(p, x):
        return p * 2.0, (p * x).sum()

    args = (jnp.ones((32, 32)), jnp.ones((32, 32)))
    plain, donated = peak(jax.jit(step), *args), peak(jax.jit(step, donate_argnums=0), *args)
    # one name twice, one of them donating (JupyterLab trial: "first (jit_step) → second (jit_step)" said nothing)
    assert "Memory at the peak: jit_step → jit_step, donated<" in compare(plain, donated)._repr_html_()
    assert "Memory at the peak: first (jit_step) → second (jit_step)<" in compare(plain, plain)._repr_html_()
    labelled = compare(plain, donated, labels=("no donation", "donated"))
    assert "Memory at the peak: no donation → donated<" in labelled._repr_html_()
    other = peak(jax.jit(lambda p, x: (p @ x).sum()), *args)
    assert "Memory at the peak: jit_step → jit__lambda<" in compare(plain, other)._repr_html_()


def test_a_roles_change_is_credited_to_a_source_that_moved_the_same_way():
    """JupyterLab trial: "temporaries +1.1 MiB (cell [1], line 10 (mlp))" named the line whose temporaries *fell*
    by 5 MiB (the largest change of either sign), while two copies of 4 and 2 MiB made the rise. Two peaks' buffers
    of that shape (the trial's bytes), through the comparison's own summary."""
    import types

    import pandas as pd

    from xlakit.memory.compare import Comparison

    a = pd.DataFrame({"role": ["temporary"], "source": ["cell [1], line 10 (mlp)"], "bytes": [5_226_528]})
    b = pd.DataFrame({"role": ["temporary"] * 2, "source": ["XLA's copy of donated p['w1']",
                                                             "XLA's copy of donated p['w0']"],
                      "bytes": [4_224_328, 2_112_224]})
    frame = pd.DataFrame({"by": ["role"], "group": ["temporary"], "bytes_a": [5_226_528],
                          "bytes_b": [6_336_552], "delta": [1_110_024]})
    c = Comparison(frame=frame, a=types.SimpleNamespace(buffers=a), b=types.SimpleNamespace(buffers=b))
    # the other copy that rose is counted (a trial read the +1.1 MiB as one copy's)
    assert c._roles_summary() == "temporaries +1.1 MiB (XLA's copy of donated p['w1'], and 1 more)"
