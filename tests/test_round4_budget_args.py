"""What sweep / max_batch measure is the program the user runs (placement of every argument kept, bytes per
device), and the functions that take a program followed by its example arguments pass every keyword to the
user's function as ``jax.jit`` does, refusing only a clash with one of their own few options."""

from __future__ import annotations

import inspect
import json

import jax
import jax.numpy as jnp
import pytest
from conftest import run_python

import xlakit
from xlakit import memory as xm

FOUR = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

SHARDED_BUDGET = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from xlakit import memory as xm

mesh = Mesh(np.array(jax.devices()), ("d",))
sh = NamedSharding(mesh, P("d"))
def make_args(n):
    return jax.device_put(jnp.ones((4 * n, 1024), jnp.float32), sh)
step = jax.jit(lambda x: jnp.tanh(x) * 2)
budget = 2 * 2**20

def xla(n):  # XLA's own figures for the program the user runs, on the real sharded array
    ma = step.lower(make_args(n)).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes + ma.temp_size_in_bytes
            + ma.generated_code_size_in_bytes)

r = xm.max_batch(step, make_args, budget_bytes=budget)
swept = xm.sweep(step, make_args, [8, 64]).frame.set_index("batch")
print(json.dumps({"batch": r.batch, "bytes": r.bytes, "at": xla(r.batch), "after": xla(r.batch + 1),
                  "fits": [bool(v) for v in r.frame.set_index("batch").loc[[r.batch, r.batch + 1], "fits"]],
                  "swept": {str(n): int(swept.loc[n, "total_bytes"]) for n in (8, 64)},
                  "xla": {str(n): xla(n) for n in (8, 64)}}))
"""


def test_max_batch_and_sweep_budget_the_sharded_program_per_device():
    """Fault: max_batch answered 64 rows (2,097,152 B: the one-device program) for an array sharded over 4
    devices, whose program XLA puts at 524,288 B per device at 64 rows; the answer is 256."""
    out = json.loads(run_python(SHARDED_BUDGET, env=FOUR))
    budget = 2 * 2**20
    assert out["batch"] == 256
    assert out["bytes"] == out["at"] == 2 * 2**20 <= budget < out["after"] == 2 * 2**20 + 8192
    assert out["fits"] == [True, False]
    # per device: 4n rows of 1024 float32 split 4 ways, in and out
    assert out["swept"] == out["xla"] == {"8": 2 * 8 * 1024 * 4, "64": 2 * 64 * 1024 * 4}


PLACEMENTS = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from xlakit import memory as xm
from xlakit.memory._abstract_args import abstract_args

mesh = Mesh(np.array(jax.devices()), ("d",))
rows = NamedSharding(mesh, P("d"))
weights = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P()))  # made before: committed, replicated

def make_args(n):
    x = jax.device_put(jnp.ones((4 * n, 64)), rows)
    return (x, weights, jnp.asarray(0.5), jnp.ones(3),
            jax.device_put(jnp.ones((4 * n,)), rows.with_memory_kind("pinned_host")),
            jax.device_put(jnp.ones((2, n)), jax.devices()[2]),
            x.T,                                   # an operation the trace does not place: compiled alone
            jax.nn.relu(x),                        # a custom derivative on a placed value: compiled alone
            jax.device_put(jnp.ones(n), jax.memory.Space.Host),  # a memory space alone
            x * 2,                                 # elementwise: keeps x's placement
            jax.jit(lambda: jnp.zeros((n, 4)), out_shardings=rows)(),  # a builder's declared placement
            # a creation op's device= and zeros_like of a placed array trace to a broadcast with no placement:
            # checked against the arguments built once for real
            jnp.zeros((4 * n, 8), device=rows), jnp.zeros_like(x))

def describe(leaf):
    s = getattr(leaf, "sharding", None)
    committed = getattr(leaf, "committed", True)
    return [list(leaf.shape), str(leaf.dtype), bool(leaf.weak_type),
            None if s is None or not committed else repr(s)]

real = [describe(a) for a in make_args(8)]
traced = [describe(a) for a in abstract_args(jax.jit(lambda *a: 0), make_args, 8)]
print(json.dumps({"real": real, "traced": traced,
                  "same_program": xm.sweep(jax.jit(lambda x, w, s: (x @ w) * s),
                                           lambda n: make_args(n)[:3], [8]).frame["total_bytes"].tolist(),
                  "xla": xm.compiled_memory(jax.jit(lambda x, w, s: (x @ w) * s), *make_args(8)[:3]).footprint_bytes}))
"""


def test_traced_arguments_keep_sharding_memory_kind_and_weak_type_like_the_real_ones():
    """Each leaf of make_args comes back as the program's signature: the sharding and memory kind its
    device_put (or the array made before) gave, its weak type, and no sharding where JAX places it itself."""
    out = json.loads(run_python(PLACEMENTS, env=FOUR))
    assert out["traced"] == out["real"]
    shardings = [leaf[3] for leaf in out["real"]]
    assert "spec=P('d',), memory_kind=device" in shardings[0]
    assert "spec=P(), memory_kind=device" in shardings[1]  # the weights made before keep their placement
    assert out["real"][2][2] is True and shardings[2] is None and shardings[3] is None  # weak, uncommitted
    assert "memory_kind=pinned_host" in shardings[4] and "CpuDevice(id=2)" in shardings[5]
    assert "P(None, 'd')" in shardings[6] and "P('d',)" in shardings[7] and "pinned_host" in shardings[8]
    assert "P('d',)" in shardings[9] and "P('d',)" in shardings[10]
    assert "P('d',)" in shardings[11] and "P('d',)" in shardings[12]
    assert out["same_program"] == [out["xla"]]


def test_uncommitted_and_static_arguments_stay_as_before():
    """Single device: no sharding is added to leaves JAX places itself, and static values stay values."""
    from xlakit.memory._abstract_args import abstract_args

    step = jax.jit(lambda x, s, train: x * s if train else x, static_argnums=2)
    x, s, train = abstract_args(step, lambda n: (jnp.ones((n, 8)), jnp.asarray(2.0), True), 16)
    assert isinstance(x, jax.ShapeDtypeStruct) and x.shape == (16, 8) and x.sharding is None
    assert s.weak_type and s.shape == () and train is True
    frame = xm.sweep(step, lambda n: (jnp.ones((n, 8)), jnp.asarray(2.0), True), [16]).frame
    assert int(frame["total_bytes"].iat[0]) == xm.compiled_memory(step, jnp.ones((16, 8)), jnp.asarray(2.0),
                                                                  True).footprint_bytes


# -- keywords: the user's go through, xlakit's few are refused when they clash ----------------------------------

def _mv(w, x):
    return jnp.tanh(w @ x) * 2


W, X = jnp.ones((64, 64)), jnp.ones((64, 32))


@pytest.mark.parametrize("name", ["peak", "attribute", "compiled_memory", "buffer_assignment"])
def test_a_keyword_named_like_the_program_parameter_reaches_the_function(name):
    """Fault: peak(f, w, x=x) raised "got multiple values for argument 'x'": their own first parameter was x."""
    f = jax.jit(_mv)
    fn = getattr(xm, name)
    by_keyword, by_position = fn(f, W, x=X), fn(f, W, X)
    if name == "peak":
        assert by_keyword.total_bytes == by_position.total_bytes > 0
    elif name == "attribute":
        assert by_keyword.buffers["bytes"].sum() == by_position.buffers["bytes"].sum() > 0
    elif name == "compiled_memory":
        assert by_keyword.footprint_bytes == by_position.footprint_bytes == (64 * 64 + 64 * 32 * 2) * 4
    else:
        assert sum(a.size for a in by_keyword.allocations) == sum(a.size for a in by_position.allocations) > 0


def test_every_program_parameter_name_is_free_for_the_users_keywords(cache):
    """The program's own parameter (compiled, fn_or_compiled, program, lowered_or_jitted, fn_or_lowered, self)
    is positional only everywhere, so a function taking an argument of that name gets it."""
    def g(w, compiled, fn_or_compiled, program, lowered_or_jitted, fn_or_lowered, self):
        return w * compiled + fn_or_compiled + program + lowered_or_jitted + fn_or_lowered + self

    names = ("compiled", "fn_or_compiled", "program", "lowered_or_jitted", "fn_or_lowered", "self")
    kw = {n: jnp.full((8,), float(i)) for i, n in enumerate(names)}
    f = jax.jit(g)
    expected = xm.compiled_memory(f, W[:8, :8], *kw.values()).footprint_bytes
    assert expected == (64 + 6 * 8 + 64) * 4  # the arguments and the (8, 8) result
    assert xm.buffer_assignment(f, W[:8, :8], **kw).compare() is not None
    # probe runs the program through JAX's Compiled, whose __call__ cannot take a keyword named self (jax.jit can)
    runnable = {n: v for n, v in kw.items() if n != "self"}
    p = jax.jit(lambda w, compiled, fn_or_compiled, program, lowered_or_jitted, fn_or_lowered:
                g(w, compiled, fn_or_compiled, program, lowered_or_jitted, fn_or_lowered, 0.0))
    m = xm.compiled_memory(p, W[:8, :8], *runnable.values())
    by_keyword, by_position = xm.probe(p, W[:8, :8], **runnable), xm.probe(p, W[:8, :8], *runnable.values())
    assert by_keyword.xla_bytes == by_position.xla_bytes == m.output_bytes + m.temp_bytes == 64 * 4
    with xm.track(reset=False) as t:
        assert t.add(f, W[:8, :8], **kw).footprint_bytes == expected
    compiled, decision = cache.compile(f, W[:8, :8], **kw)
    assert xm.compiled_memory(compiled).footprint_bytes == expected and decision.kind in ("store", "skip")
    assert cache.explain(f, W[:8, :8], **kw) is not None
    assert xm.peak(f, W[:8, :8], cache=cache, **kw).total_bytes == xm.peak(f, W[:8, :8], *kw.values()).total_bytes


def test_batch_and_variant_are_the_functions_keywords_with_a_function():
    def h(w, batch, variant):
        return w * batch + variant

    f = jax.jit(h)
    one = jnp.ones((16,))
    assert xm.peak(f, one, batch=one, variant=one).total_bytes == xm.peak(f, one, one, one).total_bytes > 0


def _decode(w, tokens, cache=None):
    return (w @ tokens) if cache is None else (w @ tokens) + cache


def test_cache_keyword_that_the_function_also_takes_is_refused_by_name(cache):
    """Fault: peak(decode, w, t, cache=kv) gave the user's KV cache to xlakit ("AttributeError: ... compile")."""
    f = jax.jit(_decode)
    kv = jnp.ones((64, 32))
    for fn in (xm.peak, xm.attribute):
        with pytest.raises(TypeError, match=r"cache= is xlakit's own option.*_decode also takes an argument named"):
            fn(f, W, X, cache=kv)
        with pytest.raises(TypeError, match="_decode also takes"):  # an xlakit cache is just as ambiguous here
            fn(f, W, X, cache=cache)
    # positionally, the function's; beside it, xlakit's
    assert xm.peak(f, W, X, kv, cache=cache).total_bytes == xm.peak(f, W, X, kv).total_bytes
    assert xm.peak(f, W, X, kv).total_bytes > xm.peak(f, W, X).total_bytes
    # a function that takes keywords only through **kwargs: cache= is xlakit's, and must be a cache
    g = jax.jit(lambda w, t, **kw: _decode(w, t, **kw))
    with pytest.raises(TypeError, match="cache= is xlakit's own option, an ExecutableCache.*got ArrayImpl"):
        xm.peak(g, W, X, cache=kv)
    assert xm.peak(g, W, X, cache=cache).total_bytes == xm.peak(g, W, X).total_bytes


def test_probe_and_cache_compile_options_clash_by_name_too(cache):
    def step(w, x, warmup=1.0, devices=None):
        return _mv(w, x) * warmup

    f = jax.jit(step)

    def flagged(w, x, isolate=False, *, timeout_s=1.0):
        return _mv(w, x) * timeout_s

    for option in ({"isolate": True}, {"timeout_s": 5.0}):
        with pytest.raises(TypeError, match=rf"probe\(\): {next(iter(option))}= is xlakit's own option.*flagged"):
            xm.probe(jax.jit(flagged, static_argnames="isolate"), W, X, **option)
    with pytest.raises(TypeError, match=r"probe\(\): warmup= is xlakit's own option.*step also takes"):
        xm.probe(f, W, X, warmup=2.0)
    assert xm.probe(f, W, X, 2.0, warmup=False).xla_bytes == xm.probe(f, W, X).xla_bytes == 64 * 32 * 4
    with pytest.raises(TypeError, match=r"compile\(\): devices= is xlakit's own option.*step also takes"):
        cache.compile(f, W, X, devices=jax.devices())
    compiled, _ = cache.compile(f, W, X, 1.0, None, devices=jax.devices())
    assert xm.compiled_memory(compiled).footprint_bytes == (64 * 64 + 64 * 32 * 2) * 4 + 4  # and the scalar


def test_sweep_and_max_batch_refuse_a_cache_that_is_no_cache_before_compiling():
    calls = []

    def make(n):
        calls.append(n)
        return jnp.ones((n, 4))

    for call in (lambda: xm.sweep(jax.jit(jnp.sin), make, [2], cache={}),
                 lambda: xm.max_batch(jax.jit(jnp.sin), make, 2**20, cache="folder")):
        with pytest.raises(TypeError, match="cache= is xlakit's own option"):
            call()
    assert calls == []


def test_peak_of_an_attribution_takes_nothing_else():
    a = xm.attribute(jax.jit(_mv), W, X)
    assert xm.peak(a).total_bytes > 0
    with pytest.raises(TypeError, match="Attribution takes nothing else"):
        xm.peak(a, X)


def _takes_program_and_arguments(fn) -> bool:
    kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
    return inspect.Parameter.VAR_POSITIONAL in kinds and inspect.Parameter.VAR_KEYWORD in kinds


def test_every_public_program_plus_arguments_function_takes_its_program_positionally_only():
    """The kind of fault, not one instance: whatever public function takes ``*args, **kwargs`` after its own
    parameters passes them to a program, so none of its own may be a keyword a user's function could take."""
    from xlakit.cache.transparent import TransparentCache
    from xlakit.memory.track import Tracker
    from xlakit.widgets.cache_browser import CacheBrowser

    candidates = [getattr(xm, n) for n in xm.__all__ if callable(getattr(xm, n))]
    candidates += [xlakit.ExecutableCache.compile, xlakit.ExecutableCache.explain, TransparentCache.compile,
                   TransparentCache.explain, Tracker.add, CacheBrowser.explain]
    checked = []
    for fn in candidates:
        if inspect.isclass(fn) or not _takes_program_and_arguments(fn):
            continue
        params = list(inspect.signature(fn).parameters.values())
        before = params[:[p.kind for p in params].index(inspect.Parameter.VAR_POSITIONAL)]
        assert all(p.kind == p.POSITIONAL_ONLY for p in before), fn.__qualname__
        checked.append(fn.__name__)
    assert {"peak", "attribute", "compiled_memory", "buffer_assignment", "probe", "compile", "explain",
            "add"} <= set(checked)


def test_probe_runs_a_step_whose_flag_is_static_by_position_by_name_or_by_keyword():
    """probe() called the compiled program with the static flag too (JAX bakes it in; the Compiled takes only the
    rest) and failed placing the arguments ("different lengths of list"): static arguments are the kind issue 34
    item 5 names for sweep/max_batch. XLA's figure is the same whichever way the flag is given, and is the
    program's own temporaries + outputs."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    def step(w, x, flag):
        return jnp.tanh(x @ w) * (2.0 if flag else 1.0)

    w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
    by_name = jax.jit(step, static_argnames="flag")
    by_number = jax.jit(step, static_argnums=2)
    results = [memory.probe(by_name, w, x, True), memory.probe(by_name, w, x, flag=True),
               memory.probe(by_number, w, x, True)]
    ma = by_number.lower(w, x, True).compile().memory_analysis()
    expected = ma.temp_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
    assert [r.xla_bytes for r in results] == [expected] * 3 and expected >= 32 * 64 * 4


def test_a_users_kv_cache_with_a_load_method_is_not_taken_for_xlakits_cache():
    """cache= was recognised by shape (a callable compile or load), so peak(decode, x, cache=KVCache()) for a
    function taking **kwargs failed deep inside ("no attribute 'compile'"); now by class, the documented error."""
    import jax.numpy as jnp

    from xlakit import memory

    class KVCache:
        def load(self, path):
            return path

    def decode(x, **kwargs):
        return x * 2

    with pytest.raises(TypeError, match="cache= is xlakit's own option.*got KVCache"):
        memory.peak(decode, jnp.ones(4), cache=KVCache())


UNSPLIT = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from xlakit import memory as xm

mesh = Mesh(np.array(jax.devices()), ("d",))
placement = {"now": NamedSharding(mesh, P())}
def rows(n):  # n rows sharded 4 ways: only multiples of 4 can be made, as in the user's own run
    return jnp.zeros((n, 1024), jnp.float32, device=NamedSharding(mesh, P("d")))
def placed(n):  # reads a sharding the notebook changes between two sweeps
    return jax.device_put(jnp.ones((8 * n, 256)), placement["now"])
f = jax.jit(lambda x: jnp.tanh(x) * 2)
r = xm.max_batch(f, rows, budget_bytes=2 * 2**20)
first = int(xm.sweep(f, placed, [64]).frame["argument_bytes"].iat[0])
placement["now"] = NamedSharding(mesh, P("d"))
second = int(xm.sweep(f, placed, [64]).frame["argument_bytes"].iat[0])
print(json.dumps({"batch": r.batch, "bytes": r.bytes, "notes": list(r.notes), "first": first, "second": second}))
"""


def test_sizes_a_sharding_cannot_split_are_passed_over_and_each_call_reads_the_placement_anew():
    """With rows sharded over 4 devices, batch 1 cannot be made (the user's own make_args(1) raises): max_batch
    took its failed real build as 'nothing placed' and answered for the one-device program (256 where 1024 fits,
    2 MiB per device: in and out, 1024 x 1024 float32 / 4 each); and a second sweep reused the first one's
    placements after the notebook changed the sharding make_args reads."""
    out = json.loads(run_python(UNSPLIT, env=FOUR))
    assert out["batch"] == 1024 and out["bytes"] == 2 * 2**20
    assert any("could not be made" in n for n in out["notes"])
    assert out["first"] == 8 * 64 * 256 * 4 and out["second"] == 8 * 64 * 256 * 4 // 4


def test_a_builder_that_keeps_what_it_made_keeps_arrays_not_tracers():
    """make_args that builds its parameters once into a dict (or an lru_cache'd initialiser) kept the trace's
    tracer after sweep, and the user's next real run raised UnexpectedTracerError: it is built for real first."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    made: dict = {}

    def make_args(n):
        if "w" not in made:
            made["w"] = jnp.ones((16, 16))
        return made["w"], jnp.ones((n, 16))

    f = jax.jit(lambda w, x: jnp.tanh(x @ w))
    rows = memory.sweep(f, make_args, [1, 8]).frame
    assert rows["argument_bytes"].tolist() == [(256 + 16) * 4, (256 + 128) * 4]
    assert isinstance(made["w"], jax.Array) and float(f(*make_args(4)).sum()) == float(jnp.tanh(16.0) * 64)


def test_with_a_cache_every_keyword_still_goes_to_the_function_devices_too(cache):
    """peak(g, a, devices=d, cache=cache) handed the keywords to ExecutableCache.compile, whose own option
    devices= took the value: g never saw it and a program built without it was measured (524,288 B where g with
    devices makes 1,048,576 B); a function taking devices was refused naming compile(), an option peak lacks."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    def g(a, **kw):
        return jnp.concatenate([a] * (3 if "devices" in kw else 1)) * 2

    a = jnp.ones((256, 256))
    step = jax.jit(g, static_argnames=("devices",))
    devs = tuple(jax.devices())
    plain = memory.peak(step, a, devices=devs)
    cached = memory.peak(step, a, devices=devs, cache=cache)
    assert cached.total_bytes == plain.total_bytes == 256 * 256 * 4 * (1 + 3)

    def f(a, devices):
        return a * len(devices)

    assert memory.attribute(jax.jit(f, static_argnames="devices"), a, devices=devs, cache=cache).buffers[
        "bytes"].sum() > 0
