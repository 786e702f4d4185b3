"""Memory in the user's terms: the peak of a flax.nnx train step is attributed to the line and layer that
make its big activation, parameters carry their pytree paths, optimizer state and donation are told apart,
a remat/no-remat pair shows the residuals it drops, and a notebook cell reads as ``cell [N], line L``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_models as mm  # noqa: E402
from conftest import notebook_cell  # noqa: E402

from xlakit.memory import attribute, compare, peak  # noqa: E402
from xlakit.memory._hlo_frames import parse_op_name  # noqa: E402
from xlakit.memory.remat import checkpoint_each  # noqa: E402

MIB = 2**20


@pytest.fixture(scope="module")
def mlp():
    step, params, opt_state = mm.train_step()
    return attribute(step, params, opt_state, *mm.batch(256))


def test_the_peak_names_the_line_and_layer_of_the_big_activation(mlp):
    p = peak(mlp)
    top = p.by("source").iloc[0]
    assert top["group"] == f"memory_models.py:{mm.BIG_LINE} (MLP.__call__)" or top["group"].endswith(
        f"memory_models.py:{mm.BIG_LINE} (MLP.__call__)"), p.by("source").head()
    # batch 256 x 2048 float32 = 2 MiB per value; at least two such values from that line are live at the peak
    assert top["bytes"] >= 2 * 256 * mm.WIDE * 4
    layers = set(p.buffers.loc[p.buffers["source"] == top["group"], "layer"])
    assert "MLP.__call__ › self.wide(x)" in layers, layers
    # the charged bytes at the peak add up to the live bytes there, which are the liveness maximum
    assert p.by("role")["bytes"].sum() == p.total_bytes == mlp.liveness["live_bytes"].max()
    assert 0 <= p.step < p.steps == mlp.steps
    assert repr(p).startswith(f"peak {p.total_bytes / MIB:.1f} MiB at step {p.step} of {p.steps} (")
    assert f"memory_models.py:{mm.BIG_LINE}" in repr(p)
    assert "Peak of jit_step" in p._repr_html_() and "memory_models.py" in p._repr_html_()
    # each line's row says which role holds its bytes, as the repr does (it gave only "6.0 MiB in 3 buffer(s)")
    assert re.search(r"MiB in \d+ buffer\(s\): [\d.]+ MiB of it temporaries<", p._repr_html_())
    assert "optimizer state, " in p._repr_html_()  # the arguments row splits by role
    by_role = mlp.by("role").set_index("group")
    assert by_role.loc["residual", "bytes"] >= 256 * mm.WIDE * 4 and "residual" in repr(mlp)


def test_parameters_carry_pytree_paths_and_optimizer_state_is_its_own_role(mlp):
    b = mlp.buffers.set_index("parameter")
    kernel = b.loc["params['wide']['kernel']"]
    assert kernel["role"] == "parameter" and kernel["bytes"] == 16 * mm.WIDE * 4 and kernel["shape"] == (16, mm.WIDE)
    assert kernel["start"] == 0 and kernel["end"] == mlp.steps - 1
    mu = b.loc["opt_state[0].mu['wide']['kernel']"]
    assert mu["role"] == "optimizer state" and mu["bytes"] == 16 * mm.WIDE * 4
    assert b.loc["opt_state[0].count", "role"] == "optimizer state"
    assert b.loc["x", "role"] == "parameter"
    # every entry argument is named: 4 params + adam's count and 2 x 4 moments + x + y
    assert mlp.buffers["parameter"].notna().sum() == 15
    assert not mlp.buffers["donated"].any()


def test_a_donated_train_step_writes_its_results_into_the_arguments():
    step, params, opt_state = mm.train_step(donate=True)
    a = attribute(step, params, opt_state, *mm.batch(8))
    args = a.buffers[a.buffers["role"].isin(["parameter", "optimizer state"])]
    assert args.set_index("parameter").loc["params['wide']['kernel']", "donated"]
    aliased = a.buffers[a.buffers["role"] == "aliased"]
    # the 4 new parameters and 9 optimizer-state leaves land in donated buffers
    assert len(aliased) >= 13 and aliased["bytes"].sum() >= args[args["donated"]]["bytes"].sum()
    # each names the donated argument it overwrites: the new kernel takes the old kernel's buffer
    assert "params['wide']['kernel']" in set(aliased["parameter"])
    assert set(aliased["parameter"].dropna()) <= set(args["parameter"])


def test_remat_drops_the_residuals_of_a_scanned_stack_and_compare_says_so():
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32)
    plain_step, params = mm.scan_train_step(remat=False)
    remat_step, _ = mm.scan_train_step(remat=True)
    plain, remat = peak(plain_step, params, x), peak(remat_step, params, x)
    stack = 8 * 256 * 128 * 4  # one scan-stacked activation: layers x batch x width float32 = 1 MiB
    r_plain = plain.by("role").set_index("group").loc["residual", "bytes"]
    r_remat = remat.by("role").set_index("group").loc["residual", "bytes"]
    assert r_plain >= 3 * stack and r_remat <= 1.2 * stack, (r_plain, r_remat)
    c = compare(plain, remat)
    residual = c.by("role").set_index("group").loc["residual"]
    assert residual["delta"] == r_remat - r_plain <= -2 * stack
    assert c.peak_delta == remat.total_bytes - plain.total_bytes < 0
    text = repr(c)
    assert f"residuals −{(r_plain - r_remat) / MIB:.1f} MiB (" in text and "memory_models.py:" in text, text
    # the source groups say where the residuals came from: the scan on the loss line
    sources = c.by("source")
    assert sources.iloc[0]["group"].startswith("memory_models.py:") or "memory_models.py:" in sources.iloc[0]["group"]


def test_a_notebook_cell_reads_as_cell_and_line(tmp_path, monkeypatch):
    """ipykernel compiles each cell into ``ipykernel_<pid>/<hash>.py``; IPython's compile cache maps that file
    back to the execution count, which is what the user sees."""
    namespace, cell = notebook_cell(tmp_path, monkeypatch, "import jax.numpy as jnp\n\ndef f(x):\n"
                                    "    y = jnp.sin(x) * 2\n    return y.sum()\n", 7)
    a = attribute(jax.jit(namespace["f"]), jax.ShapeDtypeStruct((1000,), jnp.float32))
    sources = set(a.buffers["source"])
    assert "cell [7], line 4 (f)" in sources, sources
    assert "f › jnp.sin(x) * 2" in set(a.buffers["layer"]) or "f › jnp.sin(x)" in set(a.buffers["layer"])
    assert not any(str(cell) in s for s in sources)  # never the temporary file's path
    row = a.buffers[a.buffers["source"] == "cell [7], line 4 (f)"].iloc[0]
    assert row["stack"].splitlines()[0] == "cell [7]:4 (f)"


@pytest.mark.parametrize(("op_name", "phase", "scope", "primitive"), [
    ("jit(step)/transpose(jvp(MLP))/Dense_0/dot_general", "backward", "backward › MLP/Dense_0", "dot_general"),
    ("jit(loss)/jvp()/jit(relu)/max", "forward", "forward › relu", "max"),
    ("jit(f)/outer/inner/add", "", "outer/inner", "add"),
    ("", "", "unknown", ""),
    # an op outside every named scope, module and transform: said in words (a trial read "(top level)" as jargon)
    ("jit(step)/mul", "", "(no named scope)", "mul"),
    # what jax.checkpoint recomputes for the backward pass
    ("jit(step)/transpose(jvp(jvp()))/checkpoint/rematted_computation/dot_general", "backward",
     "recomputed in the backward pass (remat) › checkpoint", "dot_general"),
    # JAX's own parts inside lax.scan in words (issue 35: "while/body/dynamic_update_index_in_dim"), the user's
    # scopes within the body as they are
    ("jit(loss)/jvp()/while/body/dynamic_update_index_in_dim/dynamic_update_slice", "forward",
     "forward › loop body › stacked per iteration", "dynamic_update_slice"),
    ("jit(f)/while/body/closed_call/MLP/Dense_0/mul", "", "loop body › MLP/Dense_0", "mul"),
    # XLA joins the op names of instructions it merged with ';': the first is the instruction's own
    ("jit(step)/transpose(jvp())/mul;jit(step)/transpose(jvp())/broadcast_in_dim", "backward", "backward", "mul"),
])
def test_jax_name_stacks_read_as_phase_and_scope(op_name, phase, scope, primitive):
    ns = parse_op_name(op_name)
    assert (ns.phase, ns.scope, ns.primitive) == (phase, scope, primitive)


def test_missing_metadata_is_unknown_or_the_one_line_that_reads_it_and_bad_input_is_refused(mlp):
    # buffers whose instruction (and every position sharing the buffer) carries no metadata: a constant XLA
    # broadcast for the ops of one line is charged to that line (2 MiB of a transformer's peak was "unknown");
    # any other stays unknown, nothing guessed
    mod = mlp.assignment._module
    bare = {b.id for b in mlp.assignment.logical_buffers
            if all(not (mod.instructions[i].op_name or mod.instructions[i].frame_id)
                   and mod.instructions[i].opcode not in ("copy", "bitcast", "get-tuple-element", "tuple")
                   for i in [b.instruction_id, *(i for i, _ in mlp.assignment._aliases.get(b.id, ()))]
                   if i is not None)}
    rows = mlp.buffers[mlp.buffers["buffer_id"].isin(bare)]
    made = rows[rows["scope"].str.startswith("made by XLA for › ")]
    unknown = rows.drop(made.index)
    assert len(made) and set(unknown["source"]) <= {"unknown"} and set(unknown["scope"]) <= {"unknown"}
    assert set(unknown["layer"]) <= {"unknown"} and unknown["line"].isna().all()
    by_name = {i.name: iid for iid, i in mod.instructions.items()}
    source_of = dict(zip(mlp.buffers["instruction"], mlp.buffers["source"], strict=True))
    for name, source in zip(made["instruction"], made["source"], strict=True):
        readers = {mod.instructions[u].name for u, ins in mod.instructions.items() if by_name[name] in ins.operands}
        assert source != "unknown" and {source_of[r] for r in readers if r in source_of} == {source}, name
    a = attribute(jax.jit(lambda v: v * 2), jax.ShapeDtypeStruct((4,), jnp.float32))
    assert set(a.buffers["role"]) >= {"parameter", "output"}
    with pytest.raises(TypeError, match="without example arguments"):
        peak(jax.jit(lambda v: v))
    with pytest.raises(TypeError, match="cache="):
        peak("0123abcd")
    with pytest.raises(ValueError, match="cannot group by"):
        peak(a).by("colour")


def test_a_cache_entry_and_a_bundle_program_are_attributed_too(cache, tmp_path):
    from xlakit.bundle import export_bundle, load_bundle

    fn = jax.jit(lambda w, x: jnp.tanh(x @ w["k"]))
    w = {"k": jnp.ones((8, 16), jnp.float32)}
    x = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    _compiled, decision = cache.compile(fn, w, x)
    by_key = attribute(decision.key, cache=cache)
    row = cache.entries().iloc[0]
    by_row = attribute(row, cache=cache)
    for a in (by_key, by_row):
        assert a.buffers.set_index("parameter").loc["w['k']", "bytes"] == 8 * 16 * 4
        assert "test_memory_attribution.py:" in " ".join(a.buffers["source"])  # the loaded module keeps its frames
    export_bundle(lambda p, v: jnp.tanh(v @ p["k"]), w, jnp.ones((2, 8), jnp.float32), tmp_path / "b",
                  batch_sizes=(2,))
    loaded = load_bundle(tmp_path / "b", progress=False).wait()
    p = peak(loaded, batch=2)
    assert p.total_bytes >= 8 * 16 * 4 + 2 * 8 * 4 + 2 * 16 * 4
    with pytest.raises(ValueError, match="batch="):
        peak(loaded, batch=3)


def test_metadata_and_stack_frame_field_numbers_match_the_installed_jaxlib():
    from test_memory_proto import _embedded_descriptor, _message_fields

    from xlakit.memory import _hlo_frames as hf
    from xlakit.memory.buffer_assignment import _F

    msgs: dict[str, dict[str, int]] = {}
    for name in (b"xla/service/hlo.proto", b"xla/xla_data.proto"):
        for number, value in _embedded_descriptor(name) or ():
            if number == 4:
                _message_fields(value, "", msgs)
    if "StackFrameIndexProto" not in msgs or "OpMetadata" not in msgs:
        pytest.skip("this jaxlib does not embed the descriptors where expected")
    assert msgs["HloInstructionProto"]["metadata"] == _F.INS_METADATA
    assert msgs["HloInstructionProto"]["parameter_number"] == _F.INS_PARAMETER_NUMBER
    assert msgs["HloModuleProto"]["stack_frame_index"] == _F.MOD_STACK_FRAME_INDEX
    assert (msgs["OpMetadata"]["op_name"], msgs["OpMetadata"]["stack_frame_id"]) == (_F.MD_OP_NAME,
                                                                                     _F.MD_STACK_FRAME_ID)
    index = msgs["StackFrameIndexProto"]
    assert (index["file_names"], index["function_names"], index["file_locations"], index["stack_frames"]) == (
        hf._FILES, hf._FUNCTIONS, hf._LOCATIONS, hf._FRAMES)
    loc = msgs["StackFrameIndexProto.FileLocation"]
    assert (loc["file_name_id"], loc["function_name_id"], loc["line"], loc["column"], loc["end_line"],
            loc["end_column"]) == (hf._LOC_FILE, hf._LOC_FUNCTION, hf._LOC_LINE, hf._LOC_COLUMN, hf._LOC_END_LINE,
                                   hf._LOC_END_COLUMN)
    frame = msgs["StackFrameIndexProto.StackFrame"]
    assert (frame["file_location_id"], frame["parent_frame_id"]) == (hf._FR_LOCATION, hf._FR_PARENT)


def test_a_shipped_heap_simulator_trace_sets_the_peak_step(mlp):
    """GPU/TPU builds ship XLA's heap trace (jaxlib 0.10.2 CPU does not): its highest event names the step."""
    import dataclasses

    from xlakit.memory._assignment_types import HeapEvent
    from xlakit.memory.peak import peak_of

    steps = mlp.liveness
    chosen = steps.iloc[len(steps) // 3]  # not the reconstructed peak's step
    assert chosen["step"] != peak(mlp).step
    big = mlp.buffers.sort_values("bytes").iloc[-1]
    events = (HeapEvent("alloc", int(big["buffer_id"]), "main", str(chosen["instruction"]), None),
              HeapEvent("free", int(big["buffer_id"]), "main", str(chosen["instruction"]), None))
    traced = dataclasses.replace(mlp, assignment=dataclasses.replace(mlp.assignment,
                                                                     heap_traces=((int(big["allocation"]), events),)))
    p = peak_of(traced)
    assert p.step == chosen["step"] and p.method == "step of XLA's heap simulator trace peak"
    assert p.total_bytes == steps.loc[steps["step"] == p.step, "live_bytes"].iat[0]


def test_bytes_shared_in_place_are_charged_once_at_the_peak():
    import pandas as pd

    from xlakit.memory.peak import _charge

    live = pd.DataFrame({"bytes": [100, 90, 85, 10], "allocation": pd.array([0, 0, 0, None], dtype="Int64"),
                         "offset": pd.array([0, 50, 60, None], dtype="Int64")})
    # [0,100) whole; [50,140) adds 40; [60,145) adds only [140,145); an unplaced buffer counts in full
    assert _charge(live) == [100, 40, 5, 10]


@pytest.fixture(scope="module")
def remat8():
    """The 2-layer train step with the model call under ``jax.checkpoint(nothing_saveable)``, batch 8."""
    step, params, opt_state = mm.train_step(remat=True)
    return attribute(step, params, opt_state, *mm.batch(8))


def _own_op_name(a, instruction: str) -> str:
    return next(i.op_name for i in a.assignment._module.instructions.values() if i.name == instruction)


def test_values_remat_recomputes_in_the_backward_pass_are_their_own_role_with_their_line(remat8, mlp):
    from xlakit.memory._hlo_frames import RECOMPUTED_SCOPE

    b = remat8.buffers
    again = b[b["role"] == "recomputed"]
    # JAX traces the recomputation under .../rematted_computation/...: every such value says so (but a result,
    # or a reducer's per-thread scalar)
    marked = b[[("rematted_computation" in _own_op_name(remat8, i)) for i in b["instruction"]]]
    other = marked["role"].isin(["output", "aliased", "thread-local"])
    assert set(again["buffer_id"]) == set(marked.loc[~other, "buffer_id"])
    assert len(again) >= 2 and (again["phase"] == "backward").all()
    assert all(s.startswith(RECOMPUTED_SCOPE) for s in again["scope"]) and "rematted" not in " ".join(again["scope"])
    # the big activation is recomputed on its own line: batch 8 x 2048 float32
    wide = again[again["source"].str.endswith(f"memory_models.py:{mm.BIG_LINE} (MLP.__call__)")]
    assert 8 * mm.WIDE * 4 in set(wide["bytes"]) and "MLP.__call__ › self.wide(x)" in set(wide["layer"])
    assert "recomputed" not in set(mlp.buffers["role"])  # without remat nothing is recomputed


def test_a_fusion_xla_merged_without_a_frame_takes_the_line_of_its_fused_instructions(remat8):
    mod = remat8.assignment._module
    by_name = {i.name: i for i in mod.instructions.values()}

    def fused_frames(ins):
        return [mod.instructions[i].frame_id for c in ins.called for i in mod.computations[c][1]
                if mod.instructions[i].frame_id]

    rows = remat8.buffers[[(by_name[n].opcode == "fusion" and not by_name[n].frame_id)
                           for n in remat8.buffers["instruction"]]]
    framed = rows[[bool(fused_frames(by_name[n])) for n in rows["instruction"]]]
    # XLA joined the op names of the instructions it merged with ';' and kept no frame: the fused ones have it
    assert len(framed) and any(";" in by_name[n].op_name for n in framed["instruction"])
    assert all(s.startswith("tests/memory_models.py:") or "memory_models.py:" in s for s in framed["source"])
    assert not any(";" in s for s in framed["scope"]) and "unknown" not in set(framed["scope"])
    bare = rows[[not fused_frames(by_name[n]) and not by_name[n].op_name for n in rows["instruction"]]]
    assert set(bare["source"]) <= {"unknown"}  # nothing inside has metadata: nothing guessed


def test_only_results_of_the_program_are_outputs_not_temporaries_sharing_their_allocation(remat8):
    b = remat8.buffers
    outputs = b[b["role"] == "output"]
    assert len(outputs) >= 13 and (outputs["end"] == remat8.steps - 1).all()  # a result lives to the end
    live_out = {a.index for a in remat8.assignment.allocations if a.maybe_live_out}
    earlier = b[b["allocation"].isin(live_out) & (b["end"] < remat8.steps - 1)]
    # XLA reuses an output's allocation for values that die before the output is written
    assert len(earlier) >= 3 and "output" not in set(earlier["role"])


def test_live_bytes_are_split_by_role_and_the_peak_step_splits_as_the_peak(mlp, remat8):
    from xlakit._text.theme import ROLE_COLORS
    from xlakit.memory.attribution import ROLES
    from xlakit.view.memory_charts import liveness_chart

    for a in (mlp, remat8):
        live = a.liveness
        roles = [r for r in ROLES if r in live.columns]
        # each byte charged to one role: the roles add up to the bytes XLA's allocations hold (swept apart)
        assert (live[roles].sum(axis=1) == a.assignment.live_bytes_by_step()["live_bytes"]).all()
        assert (live["live_bytes"] == live[roles].sum(axis=1)).all()
        p = peak(a)
        at = live.loc[live["step"] == p.step, roles].iloc[0]
        by_role = p.by("role").set_index("group")["bytes"]
        assert {r: int(v) for r, v in at.items() if v} == {r: int(v) for r, v in by_role.items()}
        fig = liveness_chart(live, peak_step=p.step)
        meta = fig.layout.meta["xlakit_liveness"]
        assert meta["stacked_by"] == "role" and meta["peak_step"] == p.step
        assert {r: v for r, v in meta["at_peak"].items() if v} == {r: int(v) for r, v in at.items() if v}
        traces = {t.name: t for t in fig.data if t.name != "peak"}
        assert all(t.line.color == ROLE_COLORS[n] for n, t in traces.items())
    assert "residual" in {t.name for t in liveness_chart(mlp.liveness).data}
    assert "recomputed" in {t.name for t in liveness_chart(remat8.liveness).data}


def _block(x, w):
    h = x @ w
    return jnp.tanh(h) * jax.nn.sigmoid(h) + jnp.sin(h)


def _four_blocks(ws, x):
    for i in range(4):
        x = _block(x, ws[i])
    return jnp.mean(x ** 2)


def test_remat_of_the_whole_function_moves_no_peak_and_compare_says_why():
    """Issue 35: "356.5 → 356.5 MiB (±0 B): residuals −280.4, recomputed +280.4" was right (the backward pass
    recomputes the whole checkpointed function before using it) but said nothing of why; per-block remat does
    lower the peak, and then nothing needs explaining."""
    args = (jax.ShapeDtypeStruct((4, 128, 128), jnp.float32), jax.ShapeDtypeStruct((512, 128), jnp.float32))
    plain = peak(jax.jit(jax.grad(_four_blocks)), *args)
    whole = compare(plain, peak(jax.jit(jax.grad(jax.checkpoint(_four_blocks))), *args))
    roles = whole.by("role").set_index("group")
    saved, recomputed = -roles.loc["residual", "delta"], roles.loc["recomputed", "delta"]
    assert saved > 0 and recomputed > 0 and -whole.peak_delta < saved, whole
    assert whole.why.startswith("The peak did not move: the backward pass recomputes the checkpointed values "
                                "before it uses them, all together") or whole.why.startswith("The peak fell by only"), \
        whole.why
    assert f"{recomputed / MIB:.1f} MiB of recomputed values are live at once" in whole.why
    assert whole.why in repr(whole) and "why" in whole._repr_html_()
    # checkpoint_each does what jax.checkpoint on the block in the model's code would: the peak falls
    each = compare(plain, peak(jax.jit(jax.grad(checkpoint_each(_four_blocks, _block))), *args))
    assert each.peak_delta < 0 and each.why == "", each
    assert each.by("role").set_index("group").loc["residual", "delta"] < 0
    with pytest.raises(RuntimeError, match="never called .*nothing was checkpointed"):
        jax.jit(checkpoint_each(lambda ws, x: (x * 2).sum(), _block)).lower(*args)
    with pytest.raises(TypeError, match="module level"):
        checkpoint_each(_four_blocks, lambda x: x)


def _tanh_layer(h, w):
    return jnp.tanh(h @ w)


def _one_layer_loss(params, x):
    return jnp.mean((_tanh_layer(x, params["w1"]) @ params["w2"]) ** 2)


def test_remat_that_raises_the_peak_says_that_nothing_was_recomputed():
    """A teacher's trial (2026-12-07): notebook 02's "each layer: checkpoint (save nothing)" raised a one-layer
    step's peak 3.4 → 4.4 MiB ("residuals +1.0 MiB") with no word of why, while the whole-function comparison told
    users to checkpoint each block instead. On XLA:CPU the checkpointed ``tanh(h @ w)`` is not recomputed: the
    backward pass reads ``h @ w`` kept from the forward pass, beside ``tanh``'s result (measured here)."""
    args = ({"w1": jax.ShapeDtypeStruct((256, 1024), jnp.float32),
             "w2": jax.ShapeDtypeStruct((1024, 16), jnp.float32)}, jax.ShapeDtypeStruct((256, 256), jnp.float32))
    plain = peak(jax.jit(jax.grad(_one_layer_loss)), *args)
    each = compare(plain, peak(jax.jit(jax.grad(checkpoint_each(_one_layer_loss, _tanh_layer))), *args))
    roles = each.by("role").set_index("group")
    more = roles.loc["residual", "delta"]
    assert each.peak_delta > 0 and more > 0 and "recomputed" not in roles.index, each
    assert each.why.startswith(f"The peak rose by {each.peak_delta / MIB:.1f} MiB: no value is recomputed"), each.why
    assert f"{more / MIB:.1f} MiB more residuals than without the checkpoint" in each.why
    # the whole-function advice no longer tells users to checkpoint each block as if it always paid
    whole = compare(plain, peak(jax.jit(jax.grad(jax.checkpoint(_one_layer_loss))), *args))
    assert "instead" not in whole.why and "does not always pay" in whole.why, whole.why
    # one name twice, one of them checkpointed: told apart by that, not "first (…)" / "second (…)"
    assert whole.labels[1] == whole.labels[0] + ", remat" and each.labels[1] == each.labels[0] + ", remat"


def test_remat_of_a_step_whose_peak_is_its_results_says_remat_cannot_reach_it():
    """A researcher's trial (2026-12-07): compare(plain, remat) of an adam train step whose peak is its last step
    said only "no change at the peak". No residual is live at either peak: the arguments and the new parameters
    and moments fill it, which remat does not change."""
    import optax

    opt = optax.adam(1e-3)

    def loss(ws, x):
        for w in ws:
            x = jnp.tanh(x @ w)
        return jnp.mean(x ** 2)

    def step(ws, s, x, remat=False):
        g = jax.grad(jax.checkpoint(loss) if remat else loss)(ws, x)
        u, s = opt.update(g, s, ws)
        return optax.apply_updates(ws, u), s

    ws = [jax.ShapeDtypeStruct((256, 256), jnp.float32)] * 3
    s = jax.eval_shape(opt.init, ws)
    x = jax.ShapeDtypeStruct((8, 256), jnp.float32)
    c = compare(peak(jax.jit(step), ws, s, x), peak(jax.jit(lambda *a: step(*a, remat=True)), ws, s, x))
    held = c.by("role").set_index("group")["bytes_b"]
    assert c.peak_delta == 0 and "residual" not in held[held > 0].index, c
    assert c.why.startswith("The peak did not move: no residual is live at either peak (it holds "), c.why
    assert f"output {held['output'] / MIB:.1f} MiB" in c.why


def test_grouped_bytes_are_shown_as_the_views_show_them_and_the_raw_rows_stay(mlp):
    """Issue 35: ``p.by(...)`` was raw pandas (integer bytes, names cut at 50 characters, every argument a row of
    its own, an unlabelled "—" row); the summary said 41.0 MiB where the chart caption said 43.0 MiB."""
    from xlakit.view.peak import peak_caption

    p = peak(mlp)
    by_source = p.by("source")
    raw = by_source.raw
    args = raw[raw["group"].str.startswith("argument ")]
    assert len(args) == 15 and "argument params['wide']['kernel']" in set(raw["group"])
    folded = by_source.set_index("group").loc["arguments"]
    assert folded["bytes"] == args["bytes"].sum() and folded["count"] == args["count"].sum()
    assert by_source["bytes"].sum() == raw["bytes"].sum() == p.total_bytes and len(by_source) == len(raw) - 14
    text = repr(by_source)
    assert "15 argument rows folded into 'arguments'" in text and "MiB" in text and str(p.total_bytes) not in text
    assert f"memory_models.py:{mm.BIG_LINE} (MLP.__call__)" in text  # whole, however long the path
    assert f"data-bytes='{int(folded['bytes'])}'" in by_source._repr_html_()
    by_param = p.by("parameter").set_index("group")
    assert "(not an argument: values the program makes)" in by_param.index and "—" not in by_param.index
    # one quantity, one value: the summary's top line and the chart caption's come from the same groups
    top = by_source.iloc[0]
    assert f"{top['bytes'] / MIB:.1f} MiB from {top['group']}" in repr(p)
    assert peak_caption(p.buffers, groups=("source",)).startswith(f"top source {top['group']} "
                                                                  f"({top['bytes'] / MIB:.1f} MiB")


def test_peak_of_a_function_asks_xla_for_its_memory_analysis_once(monkeypatch):
    """memory_analysis() serializes the whole buffer assignment and computes XLA's peak (4-5 % of a narrow step's
    compile): peak(fn, *args) asked it twice (does the program carry its assignment? then decode it)."""
    calls = []
    real = jax.stages.Compiled.memory_analysis
    monkeypatch.setattr(jax.stages.Compiled, "memory_analysis", lambda self: calls.append(self) or real(self))

    def step(w, x):
        return jnp.tanh(x @ w).sum()

    p = peak(step, jnp.ones((64, 64)), jnp.ones((8, 64)))
    assert p.total_bytes > 0 and len(calls) == 1, calls
