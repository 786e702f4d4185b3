"""Recompiles explained, whose program it is, and the latest decision per function — with real jax.jit calls.

Faults these tests catch: a retrace of a function is not an event, or does not say which argument changed
and how (shape, dtype, weak type, static value, pytree structure, a re-created function, a global setting);
the warning about a function that keeps recompiling is missing, repeated, or does not name the argument and
the fix; JAX's own helpers (``jit_broadcast_in_dim`` ...) are not told apart from the user's programs, or the
summary loses their counts when folding them; ``last(fn)`` does not resolve the jitted object, the function
or the name, or reports a stale decision for a warm call.
"""

from __future__ import annotations

import functools
import time
import warnings

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit import events  # noqa: E402

HERE = "test_events_recompiles.py:"


def changes(rec: events.EventLog, name: str) -> list[tuple[str, str, str, str]]:
    return [(c["what"], c["path"], c["before"], c["after"]) for e in rec.events("recompile") if e.name == name
            for c in e.changes or ()]


def test_a_recompile_names_the_argument_and_what_changed():
    @functools.partial(jax.jit, static_argnums=(1,))
    def scale(x, n):
        return x * n

    with events.record() as rec:
        scale(jnp.ones(2), 2)  # first trace: not a recompile
        scale(jnp.ones(3), 2)
        scale(jnp.ones(3, jnp.int32), 2)
        scale(jnp.ones(3, jnp.int32), 3)
        scale(jnp.ones(3, jnp.int32), 3)  # answered by JAX's in-process cache: nothing
    assert changes(rec, "jit_scale") == [("shape", "x", "float32[2]", "float32[3]"),
                                         ("dtype", "x", "float32[3]", "int32[3]"), ("static", "n", "2", "3")]
    recompile = rec.events("recompile")[0]
    assert recompile.source == "jit" and recompile.reason == "x: shape float32[2] -> float32[3]"
    assert recompile.origin == "user" and HERE in recompile.site

    frame = rec.recompiles()
    row = frame.set_index("function").loc["jit_scale"]
    assert row.recompiles == 3 and row.origin == "user"
    compiles = [e.duration_s for e in rec.events("compile") if e.name == "jit_scale"]
    assert len(compiles) == 4 and row.compile_s == pytest.approx(sum(compiles[1:]))  # the first is no recompile
    assert (row.argument, row.what, row.values_seen) == ("x", "shape", "float32[2], float32[3]")


def test_a_recompile_is_blamed_on_what_forced_it_not_on_a_value_already_compiled():
    """n=3 and n=7 are both compiled with a weak float; then n=3 with a float32: the previous call had n=7, but
    3 is already compiled, so the cause is x's weak type, against the closest compiled signature. A value
    compiled before in another combination says so."""
    @functools.partial(jax.jit, static_argnames="n")
    def scale(x, n):
        return x * n

    with events.record() as rec:
        scale(1.0, n=3)
        scale(1.0, n=7)
        scale(jnp.float32(1.0), n=3)
        scale(jnp.float32(1.0), n=7)
    first, second, third = rec.events("recompile")
    assert first.changes == [{"what": "static", "path": "n", "before": "3", "after": "7"}]
    assert second.changes == [{"what": "weak_type", "path": "x", "before": "weak float32[]", "after": "float32[]"}]
    assert second.reason == ("x: weak_type weak float32[] -> float32[] [against the closest signature compiled "
                             "before, not the previous call's]")
    # (float32, 7): one change from (weak, 7) and from (float32, 3); the latest wins, and 7 was compiled before
    assert third.changes == [{"what": "static", "path": "n", "before": "3", "after": "7", "seen": "yes"}]
    assert "(7 was compiled before, with other arguments)" in third.reason


def test_weak_type_structure_function_and_config_changes():
    @jax.jit
    def inc(v):
        return v + 1

    @jax.jit
    def total(tree):
        return sum(jax.tree_util.tree_leaves(tree))

    @jax.jit
    def rank(a, b):
        return a + b

    x = jnp.ones(2)
    with events.record() as rec:
        inc(1.0)
        inc(jnp.float32(1.0))
        total({"a": x})
        total({"a": x, "b": x})
        for _ in range(2):
            jax.jit(lambda v: v * 3)(x)  # re-created every time round the loop
        rank(x, x)
        with jax.numpy_rank_promotion("warn"):
            rank(x, x)
    assert changes(rec, "jit_inc") == [("weak_type", "v", "weak float32[]", "float32[]")]
    assert changes(rec, "jit_total") == [("structure", "tree['b']", "({'a': *},)", "({'a': *, 'b': *},)")]
    assert [c[0] for c in changes(rec, "jit__lambda")] == ["function"]
    assert changes(rec, "jit_rank") == [("config", "jax_numpy_rank_promotion", "allow", "warn")]


def test_a_function_that_keeps_recompiling_warns_once_naming_the_argument_and_fix():
    @jax.jit
    def grow(x):
        return x.sum()

    with warnings.catch_warnings(record=True) as caught, events.record() as rec:
        warnings.simplefilter("always")
        for n in range(1, 9):  # 7 recompiles, over the default threshold of 5
            grow(jnp.ones(n))
    mine = [w for w in caught if issubclass(w.category, events.RecompileWarning)]
    assert len(rec.events("recompile")) == 7
    assert len(mine) == 1, [str(w.message) for w in mine]
    text = str(mine[0].message)
    assert "jit_grow recompiled 6 times" in text and "x changed its shape" in text and "pad" in text
    assert mine[0].filename.endswith("test_events_recompiles.py")  # points at the user's call, not xlakit


def test_user_programs_and_library_helpers_are_told_apart_and_folded():
    @jax.jit
    def user_step(x):
        return x * 2

    with events.record() as rec:
        x = jnp.zeros((13, 17), jnp.float16) + jnp.arange(17, dtype=jnp.float16)  # eager jnp: JAX's helpers
        x = jax.nn.relu(x)  # called by the user, but one of JAX's own jitted functions
        user_step(x)
    programs = [e for e in rec.events() if e.kind in ("trace", "lower", "compile")]
    mine = [e for e in programs if e.name == "jit_user_step"]
    helpers = [e for e in programs if e.name != "jit_user_step"]
    assert mine and all(e.origin == "user" and HERE in e.site for e in mine)
    assert helpers and all(e.origin == "library" and HERE in e.site for e in helpers), helpers
    assert {"jit_broadcast_in_dim", "jit_relu"} <= {e.name for e in helpers}

    folded = rec.summary()
    names = {r.name for r in folded.rows}
    assert "jit_user_step" in names and events.LIBRARY_ROW in names and not names & {e.name for e in helpers}
    row = folded.row(events.LIBRARY_ROW, "jax")
    assert row.programs == len({e.name for e in helpers}) and row.origin == "library"
    assert row.counts["compile"] == sum(e.kind == "compile" for e in helpers)
    assert row.compile_s == pytest.approx(sum(e.duration_s for e in helpers if e.kind == "compile"))
    full = rec.summary(fold_library=False)
    assert {e.name for e in helpers} <= {r.name for r in full.rows}
    frame = rec.to_frame()
    assert set(frame.loc[frame.name == "jit_user_step", "origin"]) == {"user"}


def test_a_librarys_own_jit_inside_its_api_is_a_library_program_even_behind_jaxs_traceback_wrapper():
    """Fault: flax's ``model.init`` runs ``jax.eval_shape(lambda ...)`` of its own (``_is_valid_rng``); flax's API
    is wrapped by JAX's traceback filter, so the user's line seemed to call jit itself and that lambda was "your"
    program, recompiling on every init and listed above the user's own step in ``recompiles()``."""
    flax_linen = pytest.importorskip("flax.linen")

    @jax.jit
    def user_step(x):
        return x + 1

    with events.record() as rec:
        model = flax_linen.Dense(4)
        for seed in range(3):
            model.init(jax.random.PRNGKey(seed), jnp.ones((1, 3)))
        user_step(jnp.ones(3))
        user_step(jnp.ones(4))
    flax_own = [e for e in rec.events() if e.name == "jit__lambda"]
    assert flax_own and {e.origin for e in flax_own} == {"library"}, {(e.kind, e.origin) for e in flax_own}
    table = rec.recompiles()
    assert table["function"].iloc[0] == "jit_user_step" and table["origin"].iloc[0] == "user"


def test_last_resolves_the_function_and_reports_nothing_for_a_warm_call():
    @jax.jit
    def double(x):
        return x * 2

    with events.record() as rec:
        double(jnp.ones(4))
        first = rec.last(double)
        double(jnp.ones(5))
        second = events.last("double", log=rec)
        t = time.monotonic()
        double(jnp.ones(5))
        warm = rec.last(double.__wrapped__, since=t)
    assert first is not None and first.kind == "compiled" and first.compiled and first.compile_s > 0
    assert second is not None and second.kind == "recompiled" and second.name == "jit_double"
    assert second.changes[0]["path"] == "x" and second.reason == "x: shape float32[4] -> float32[5]"
    assert warm is None  # JAX's in-process cache answered: no compile on the warm path
    with pytest.raises(TypeError, match="jitted function"):
        rec.last(3)


def test_last_on_a_cache_hit_and_a_miss():
    log = events.EventLog()
    log.emit("trace", name="jit_f", source="jax", duration_s=0.01)
    log.emit("miss", name="jit_f", source="xlakit", reason="no entry with this key")
    log.emit("compile", name="jit_f", source="xlakit", duration_s=0.5)
    log.emit("store", name="jit_f", source="xlakit")
    assert (log.last("f").kind, log.last("f").reason, log.last("jit_f").compile_s) == \
        ("compiled", "no entry with this key", 0.5)
    log.emit("trace", name="jit_f", source="jax", duration_s=0.01)
    log.emit("hit", name="jit_f", source="xlakit", duration_s=0.02)
    hit = log.last("jit_f")
    assert hit.kind == "hit" and not hit.compiled and [e.kind for e in hit.events] == ["trace", "hit"]
    log.emit("miss", name="jit_g", source="xlakit", reason="other environment")
    assert (log.last("g").kind, log.last("g").reason) == ("miss", "other environment")
    assert log.last("h") is None


def test_transparent_mode_reports_recompiles_without_the_listeners(tmp_path):
    import xlakit
    from xlakit._jax import listeners

    assert listeners.installed() is None  # no record() block open: only transparent mode can report

    @jax.jit
    def halve(x):
        return x / 2

    seen: list[events.Event] = []
    unsubscribe = events.log().subscribe(seen.append)
    try:
        xlakit.enable_cache(tmp_path / "cache")
        try:
            halve(jnp.ones(2))
            halve(jnp.ones(6))
        finally:
            xlakit.disable_cache()
        halve(jnp.ones(7))  # after disable_cache: no longer watched
    finally:
        unsubscribe()
    mine = [e for e in seen if e.name == "jit_halve"]
    assert [(e.kind, e.source) for e in mine if e.kind == "recompile"] == [("recompile", "jit")]
    assert next(e for e in mine if e.kind == "recompile").changes[0]["after"] == "float32[6]"
    assert not any(e.kind == "trace" for e in seen)  # JAX's own signals stay off without the listeners


def test_the_recompile_warning_threshold_can_be_changed_or_turned_off():
    @jax.jit
    def grow2(x):
        return x.max()

    @jax.jit
    def grow3(x):
        return x.min()

    try:
        with warnings.catch_warnings(record=True) as caught, events.record():
            warnings.simplefilter("always")
            events.warn_recompiles(after=2)
            for n in range(1, 5):  # 3 recompiles: over 2
                grow2(jnp.ones(n))
            events.warn_recompiles(after=None)
            for n in range(1, 5):
                grow3(jnp.ones(n))
        texts = [str(w.message) for w in caught if issubclass(w.category, events.RecompileWarning)]
        assert len(texts) == 1 and texts[0].startswith("jit_grow2 recompiled 3 times"), texts
        with pytest.raises(ValueError, match="at least 1"):
            events.warn_recompiles(after=0)
    finally:
        events.warn_recompiles()


def test_last_names_each_recompile_with_the_cache_on_and_the_listeners_off(tmp_path):
    import xlakit

    @jax.jit
    def widen(x):
        return x * 2

    decisions = []
    xlakit.enable_cache(tmp_path / "cache")
    try:
        for n in range(1, 5):
            widen(jnp.ones(n))
            decisions.append(events.last(widen))
    finally:
        xlakit.disable_cache()
    assert decisions[0] is not None and decisions[0].kind == "compiled"
    for n, d in enumerate(decisions[1:], start=2):
        assert d is not None and d.kind == "recompiled", d
        assert d.reason == f"x: shape float32[{n - 1}] -> float32[{n}]"
        assert [e.kind for e in d.events] == ["recompile", "miss", "compile", "store"]
    assert not any(e.kind == "trace" for d in decisions for e in d.events)  # JAX's listeners were off


def test_last_after_a_record_block_is_only_the_newest_call(tmp_path):
    import xlakit

    @jax.jit
    def stretch(x):
        return x * 3

    xlakit.enable_cache(tmp_path / "cache")
    try:
        with events.record():
            for n in range(1, 4):
                stretch(jnp.ones(n))
        stretch(jnp.ones(5))  # outside record(): only xlakit's lookup and the retrace watcher report
    finally:
        xlakit.disable_cache()
    d = events.last(stretch)
    assert d is not None and d.kind == "recompiled"
    assert d.reason == "x: shape float32[3] -> float32[5]" and d.changes[0]["after"] == "float32[5]"
    assert [e.kind for e in d.events] == ["recompile", "miss", "compile", "store"]
    assert d.compile_s == pytest.approx(next(e.duration_s for e in d.events if e.kind == "compile"))


def test_last_cuts_the_log_into_calls():
    log = events.EventLog()
    log.emit("trace", name="jit_f", source="jax")
    log.emit("miss", name="jit_f", source="xlakit", reason="no entry")
    log.emit("compile", name="jit_f", source="xlakit", duration_s=0.5)
    log.emit("recompile", name="jit_f", source="jit", reason="x: shape float32[1] -> float32[2]")
    log.emit("trace", name="jit_f", source="jax")
    log.emit("miss", name="jit_f", source="xlakit", reason="no entry")
    log.emit("compile", name="jit_f", source="xlakit", duration_s=0.25)
    log.emit("recompile", name="jit_f", source="jit", reason="x: shape float32[2] -> float32[3]")
    log.emit("hit", name="jit_f", source="xlakit")  # no trace: the listeners were off for this call
    d = log.last("f")
    assert (d.kind, [e.kind for e in d.events]) == ("hit", ["recompile", "hit"])
    log.emit("recompile", name="jit_f", source="jit", reason="x: shape float32[3] -> float32[4]")
    log.emit("miss", name="jit_f", source="xlakit", reason="no entry")
    log.emit("compile", name="jit_f", source="xlakit", duration_s=0.125)
    d = log.last("f")
    assert (d.kind, d.reason, d.compile_s) == ("recompiled", "x: shape float32[3] -> float32[4]", 0.125)
    assert len(d.events) == 3


def test_library_helpers_recompiling_warn_nobody_and_list_after_your_functions():
    """Fault: ``jax.random.normal`` with a new shape each step made JAX's own ``jit__normal`` recompile, and
    xlakit warned the user to "pass it as an array instead of in static_argnums" (advice about JAX's code), and
    listed that helper above the user's function in ``recompiles()``."""
    import warnings

    import jax

    from xlakit import events

    @jax.jit
    def mine(v):
        return v * 2

    key = jax.random.key(0)
    with warnings.catch_warnings(record=True) as seen, events.record() as log:
        warnings.simplefilter("always")
        events.warn_recompiles(after=2, window_s=60)
        try:
            for n in range(3, 8):
                mine(jax.random.normal(key, (n,)))
        finally:
            events.warn_recompiles(after=5, window_s=60)
    told = [str(w.message) for w in seen if isinstance(w.message, events.RecompileWarning)]
    assert told and all("jit_mine" in m for m in told), told
    frame = log.recompiles()
    assert frame["function"].iloc[0] == "jit_mine"
    assert (frame["origin"] == "library").any()


def test_a_changed_structure_is_shown_where_it_differs_not_its_first_120_characters():
    """Fault: an nnx.jit step called with a module whose static attribute changed (remat False -> True) was
    explained as the first 120 characters of two GraphDef dumps, identical up to the cut."""
    import jax
    from flax import nnx

    from xlakit._jax.retrace_changes import _where_differs

    class Model(nnx.Module):
        def __init__(self, remat: bool):
            self.remat = remat
            self.dense = nnx.Linear(3, 4, rngs=nnx.Rngs(0))

    def structure(model):
        return str(jax.tree_util.tree_structure(nnx.split(model)))

    b, a = structure(Model(False)), structure(Model(True))
    assert b[:120] == a[:120] and len(b) > 120  # what the explanation used to show
    shown_b, shown_a = _where_differs(b, a)
    assert "False" in shown_b and "True" in shown_a and len(shown_b) <= 122 and shown_b != shown_a


def test_a_recompile_warning_from_a_notebook_cell_names_the_cell_not_ipykernels_file(tmp_path, monkeypatch):
    """Fault: the warning pointed at /tmp/ipykernel_15765/3386441099.py:5 where every other view says cell [12]."""
    from conftest import notebook_cell

    namespace, _ = notebook_cell(tmp_path, monkeypatch, "import jax\n\n@jax.jit\ndef grow_in_cell(x):\n"
                                 "    return x.sum()\n\ndef run(jnp):\n    for n in range(1, 9):\n"
                                 "        grow_in_cell(jnp.ones(n))\n", 12)
    with warnings.catch_warnings(record=True) as caught, events.record():
        warnings.simplefilter("always")
        namespace["run"](jnp)
    (told,) = [w for w in caught if issubclass(w.category, events.RecompileWarning)]
    assert (told.filename, told.lineno) == ("cell [12]", 9), (told.filename, told.lineno)
