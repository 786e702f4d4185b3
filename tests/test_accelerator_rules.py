"""The accelerator paths, tested on CPU with data recorded on a TPU v5e (jax/jaxlib 0.10.2, libtpu cl/933746096,
2026-12-05; ``tests/data/tpu/facts.json`` says what each file is and how it was made).

* loading: the platform table decides what a loaded executable needs ready (TPU: the compiler compiles custom calls
  in; measured by loading in a fresh process), never an allow-list of names;
* partitions: the host CPU partitions only where programs carry host code; a TPU entry with host code records it;
* memory: XLA's dump of the TPU train step decodes to XLA's own totals (arguments, outputs, peak to the byte), on-chip
  memory spaces apart, the reserved scratch region predicted to the byte;
* the probe's verdict on a reserved-region platform from the measured TPU numbers;
* the PJRT C API reset against a stand-in plugin built here (gcc), refused where its table is too old or small.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
import subprocess
import types
import warnings
from pathlib import Path

import pytest
import zstandard

from xlakit._jax import kernels, platforms
from xlakit._jax.environment import Environment

DATA = Path(__file__).parent / "data" / "tpu"
FACTS = json.loads((DATA / "facts.json").read_text())
TRAIN = FACTS["programs"]["train_step"]


def _hlo_proto(name: str) -> bytes:
    path = DATA / name
    data = path.read_bytes()
    return zstandard.ZstdDecompressor().decompress(data) if path.suffix == ".zst" else data


# -- loading -----------------------------------------------------------------------------------------------------
def test_tpu_compiles_custom_calls_in_so_loaded_programs_need_nothing_ready():
    recorded = set(TRAIN["custom_calls"]) | set(FACTS["programs"]["pallas_step"]["custom_calls"])
    assert recorded == {"AssumeGatherIndicesInBound", "ConcatBitcast", "GatherScatterIndicesBitpacked",
                        "tpu_custom_call"}  # what ordinary TPU programs call (recorded)
    assert all(FACTS["programs"][p]["fresh_process_equal"] for p in ("train_step", "gather_step", "pallas_step",
                                                                    "compute_on_host"))
    kernels.prepare(recorded, "tpu")  # nothing to make ready, nothing refused
    assert kernels.unready_reason(sorted(recorded), "tpu") is None
    assert kernels.make_ready(object(), "tpu") == frozenset()  # the HLO is not even read there
    with pytest.raises(kernels.KernelsNotReady, match="tpu_custom_call"):  # XLA:CPU looks targets up here
        kernels.prepare(["tpu_custom_call"], "cpu")
    assert "not registered for 'metal'" in kernels.unready_reason(["some_kernel"], "metal")
    assert "calls back into Python" in kernels.unready_reason(["xla_ffi_python_cpu_callback"], "tpu")


def test_an_unknown_platform_gets_rules_not_a_refusal():
    rule = platforms.rules("neuron")
    assert rule.name == "neuron" and not rule.custom_calls_compiled_in and rule.host_cpu_partitions
    assert platforms.rules("cuda").name == "gpu" and platforms.rules("TPU") is platforms.TPU
    assert platforms.memory_space("tpu", 1).kind == "on-chip" and platforms.memory_space("tpu", 5).kind == "host"
    assert platforms.memory_space("neuron", 3).label == "memory space 3"


# -- partitions --------------------------------------------------------------------------------------------------
def test_tpu_partition_ignores_the_host_cpu_but_cpu_partitions_keep_it():
    tpu = Environment.from_dict(FACTS["environment"])
    other_host = tpu._replace(cpu_flags_hash="0badf00d", cpu_level="avx512")
    assert tpu.partition_name() == FACTS["partition"] == other_host.partition_name()
    assert tpu.partition_name().startswith("tpu-TPU_v5_lite-jaxlib0.10.2-x86_64-")
    cpu = tpu._replace(platform="cpu", platform_version="cpu", device_kinds=("cpu",))
    assert cpu.partition_name() != cpu._replace(cpu_flags_hash="0badf00d").partition_name()
    from xlakit._jax.environment import expectations

    assert "cpu_flags_hash" not in expectations(tpu) and "cpu_flags_hash" in expectations(cpu)


def test_an_entry_with_host_code_records_the_cpu_and_is_refused_on_another():
    from xlakit.cache import entry

    host = FACTS["programs"]["compute_on_host"]
    assert host["custom_calls"] == ["HostExecute"] and host["serialized_has_elf"] == 1  # x86 code inside (recorded)
    assert kernels.host_code(host["custom_calls"], "tpu") and not kernels.host_code(TRAIN["custom_calls"], "tpu")
    tpu = Environment.from_dict(FACTS["environment"])
    header = {"custom_calls": host["custom_calls"], "host_cpu": tpu.cpu_flags_hash}
    assert entry.unrunnable_reason(header, tpu) is None
    moved = tpu._replace(cpu_flags_hash="0badf00d")
    assert "other CPU features" in entry.unrunnable_reason(header, moved)
    assert entry.unrunnable_reason({"custom_calls": TRAIN["custom_calls"]}, moved) is None


def test_header_fields_of_any_size_are_judged_in_one_pass_and_said_briefly(monkeypatch):
    """A header signed by any holder of the secret may list a million custom calls or a 16 MiB host_cpu: each name
    was looked up in jaxlib's LAPACK table anew (8.9 s per lookup for 10**6 names) and every reason, event and
    warning carried the whole list (10.9 MB); a host_cpu that was not a string let host code run unjudged."""
    from jaxlib.cpu import _lapack

    from xlakit.cache import entry

    calls = []
    real = _lapack.registrations
    monkeypatch.setattr(_lapack, "registrations", lambda: calls.append(1) or real())
    kernels.unready_reason(["k"], "cpu")  # imports what the check needs (JAX's own modules read the table too)
    calls.clear()
    names = [f"k{i}" for i in range(kernels.MAX_TARGETS - 1)]
    reason = kernels.unready_reason(names + ["lapack_sgetrf_ffi"], "cpu")
    assert calls == []  # the table was read once per process, not once per name
    assert reason.startswith("kernel(s) ['k0', 'k1', 'k10', 'k100', 'k1000'] and 9,994 more are not registered")
    assert len(reason) < 200
    assert len(kernels.unready_reason(["xla_python_cpu_callback"] * 9_000, "cpu")) < 200
    assert len(str(kernels.KernelsNotReady(names, "why"))) < 300
    many = ["k"] * (kernels.MAX_TARGETS + 1)  # more than any executable calls: refused before a name is looked at
    assert kernels.unready_reason(many, "cpu") == ("the entry lists 10,001 custom-call targets, more than the 10,000 "
                                                   "an executable could call")

    tpu = Environment.from_dict(FACTS["environment"])
    for host_cpu, said in (("x" * 10**6, "other CPU features (host_cpu xxxx"), (123, "names the CPU as 123"),
                           (["a"], "names the CPU as ['a']"), (None, "names the CPU as None")):
        reason = entry.unrunnable_reason({"custom_calls": ["HostExecute"], "host_cpu": host_cpu}, tpu)
        assert said in reason and len(reason) < 300, reason


# -- memory ------------------------------------------------------------------------------------------------------
def _train_assignment():
    from xlakit._jax.compiler_dump import split_hlo_proto
    from xlakit.memory.buffer_assignment import decode_buffer_assignment
    from xlakit.memory.compiled import _from_values

    reported = _from_values(TRAIN["memory_analysis"], name="jit_train_step", platform="tpu", source="recorded")
    assignment, module = split_hlo_proto(_hlo_proto("train_step.after_optimizations.hlo.pb.zst"))
    return decode_buffer_assignment(assignment, module, reported=reported)


def test_the_dumped_tpu_assignment_gives_xlas_totals_with_on_chip_memory_apart():
    ba = _train_assignment()
    table = ba.compare()
    for field in ("argument_bytes", "output_bytes", "alias_bytes", "peak_bytes"):
        assert bool(table.loc[field, "equal"]), field
    assert table.loc["peak_bytes", "decoded"] == TRAIN["memory_analysis"]["peak_memory_in_bytes"] == 1_393_124_864
    spaces = {platforms.memory_space("tpu", a.color).name: a.size for a in ba.on_chip if a.kind == "temporary"}
    assert spaces["vmem"] == 111_542_272  # the compiler's memory-usage report says the same (recorded)
    assert all(b.color == 0 for b in ba.logical_buffers)  # only device memory left in the views
    temp = ba.totals()["temp_bytes"]
    reserved = TRAIN["stats_run1"]["bytes_reserved"]
    assert temp == 1_077_330_432 and platforms.TPU.reserved_bytes(temp) == reserved == 1_077_346_304
    assert TRAIN["memory_analysis"]["temp_size_in_bytes"] == 1_096_563_712  # not what the allocator reserves


def test_the_tpu_run_raised_bytes_in_use_by_outputs_and_code():
    before, run1, run2 = TRAIN["stats_before_run"], TRAIN["stats_run1"], TRAIN["stats_run2"]
    ma = TRAIN["memory_analysis"]
    code_and_outputs = ma["output_size_in_bytes"] + ma["generated_code_size_in_bytes"]
    assert abs(run1["bytes_in_use"] - before["bytes_in_use"] - code_and_outputs) <= 512  # one 512 B tile
    assert run2["peak_bytes_in_use"] - run1["bytes_in_use"] == ma["output_size_in_bytes"]
    assert platforms.TPU.code_in_allocator and platforms.TPU.scratch_in_reserved_region


def _recorded_compiled(fingerprint: bytes):
    """A stand-in for the TPU's ``jax.stages.Compiled`` of the recorded train step: its ``memory_analysis()`` (no
    buffer assignment, as on the TPU) and an executable with ``fingerprint`` whose HLO is not to be read."""

    class Stats:
        serialized_buffer_assignment_proto = b""

        def __getattr__(self, name):
            return TRAIN["memory_analysis"].get(name, 0)

    class Runtime:
        class client:
            platform = "tpu"

        def hlo_modules(self):
            raise RuntimeError("not needed: the dump carries the module")

    Runtime.fingerprint = fingerprint
    return types.SimpleNamespace(memory_analysis=Stats, runtime_executable=Runtime)


def test_a_bare_compiled_uses_the_remembered_dump(monkeypatch):
    """A TPU Compiled carries no assignment; the dump remembered for its fingerprint supplies it (no compile)."""
    import jax

    from xlakit._jax import compiler_dump
    from xlakit.memory import buffer_assignment

    fake = _recorded_compiled(b"recorded-train-step")
    monkeypatch.setattr(jax.stages, "Compiled", types.SimpleNamespace)  # isinstance(fake, Compiled)
    with pytest.raises(ValueError, match="compiles it once with XLA's dump"):
        buffer_assignment(fake)
    compiler_dump.remember(_hlo_proto("train_step.after_optimizations.hlo.pb.zst"), b"recorded-train-step")
    ba = buffer_assignment(fake)
    assert ba.totals()["peak_bytes"] == 1_393_124_864 and ba.name == "jit_train_step"


def test_the_tpu_peak_is_what_the_chip_holds_and_names_the_lines_that_fill_the_scratch_region(monkeypatch):
    """On TPU the arguments, outputs and one scratch region are held for the whole run: the peak is their sum, as
    the chip's allocator showed it (recorded on a TPU v5e, 2026-12-05: ``probe.scratch`` = outputs + the region
    ``bytes_reserved`` grew to), split into the values live at the busiest step and the rest of the region. XLA's
    peak_memory_in_bytes (1,393,124,864 B) is 19.8 MB under it; for a small transformer step it was 3.7x over
    (``docs/tpu/round10-probe-2026-12-06.log``), so it is named in ``method``, not taken."""
    import jax

    from xlakit._jax import compiler_dump
    from xlakit.memory.attribution import attribute_compiled
    from xlakit.memory.peak import REGION_REST, peak_of

    monkeypatch.setattr(jax.stages, "Compiled", types.SimpleNamespace)
    compiler_dump.remember(_hlo_proto("train_step.after_optimizations.hlo.pb.zst"), b"recorded-train-step-peak")
    peak = peak_of(attribute_compiled(_recorded_compiled(b"recorded-train-step-peak")))
    ma, measured = TRAIN["memory_analysis"], TRAIN["probe"]["scratch"]
    roles = peak.by("role").raw.set_index("group")["bytes"]
    assert int(roles.sum()) == peak.total_bytes == ma["argument_size_in_bytes"] + measured + int(roles["constant"])
    assert int(roles["constant"]) == 512 and int(roles["parameter"]) == 167_815_168
    region = peak.total_bytes - 167_815_168 - ma["output_size_in_bytes"] - 512
    assert region == 1_077_346_304 == TRAIN["stats_run1"]["bytes_reserved"]
    sources = peak.by("source").raw.set_index("group")
    assert 0 < int(sources.loc[REGION_REST, "bytes"]) < region
    assert "models.py:" in repr(peak) and "1,393,124,864" in peak.method and "scratch region" in peak.method


def test_a_tpu_program_without_scratch_peaks_at_its_arguments_outputs_and_constants(monkeypatch):
    """Where XLA reports no scratch (``temp_size_in_bytes`` 0) the chip holds the arguments, outputs and code and
    nothing else during a run, while XLA's ``peak_memory_in_bytes`` is higher (measured on a TPU v5e, 2026-12-06:
    ``docs/tpu/round9-peak-components-2026-12-06.log``). With the gather step's dump and fields recorded on that
    chip (2026-12-05): the peak is its arguments + outputs + constants, not XLA's 61,933,568 B."""
    import jax

    from xlakit._jax import compiler_dump
    from xlakit.memory.attribution import attribute_compiled
    from xlakit.memory.peak import peak_of

    gather = FACTS["programs"]["gather_step"]["memory_analysis"]
    assert gather["temp_size_in_bytes"] == 0 and gather["peak_memory_in_bytes"] == 61_933_568
    monkeypatch.setattr(jax.stages, "Compiled", types.SimpleNamespace)
    monkeypatch.setitem(TRAIN, "memory_analysis", gather)  # the stand-in answers with the gather step's fields
    compiler_dump.remember(_hlo_proto("gather_step.after_optimizations.hlo.pb"), b"recorded-gather-step-peak")
    peak = peak_of(attribute_compiled(_recorded_compiled(b"recorded-gather-step-peak")))
    roles = peak.by("role").raw.set_index("group")["bytes"]
    assert dict(roles) == {"parameter": gather["argument_size_in_bytes"], "output": gather["output_size_in_bytes"],
                           "constant": 1024}
    assert peak.total_bytes == int(roles.sum()) == 18_909_184 < gather["peak_memory_in_bytes"]
    assert peak.step == peak.steps - 1 and "no scratch region" in peak.method and "61,933,568" in peak.method


def test_a_tpu_peak_leaves_host_memory_out(monkeypatch):
    """An argument in host memory (pinned_host, XLA colour 5) is not on the chip: the TPU peak leaves it out. The
    host-offload step's dump recorded on a TPU v5e (2026-12-05), its argument's allocation re-coloured as host, as
    XLA colours a pinned_host argument (simulated: no such dump was recorded). Before, the peak counted its
    4,194,304 B as chip memory beside the 4,210,688 B scratch region (found by a user trial, 2026-12-06)."""
    import jax

    from xlakit._jax import compiler_dump
    from xlakit.memory import _assignment_types
    from xlakit.memory.attribution import attribute_compiled
    from xlakit.memory.peak import peak_of

    ma = dict(FACTS["programs"]["host_offload"]["memory_analysis"])
    ma["host_argument_size_in_bytes"], ma["argument_size_in_bytes"] = ma["argument_size_in_bytes"], 0
    monkeypatch.setattr(jax.stages, "Compiled", types.SimpleNamespace)
    monkeypatch.setitem(TRAIN, "memory_analysis", ma)
    monkeypatch.setattr(_assignment_types.Allocation, "memory_space", property(
        lambda a: "host" if a.color == 5 or a.kind == "parameter" else "device"))
    compiler_dump.remember(_hlo_proto("host_offload.after_optimizations.hlo.pb"), b"recorded-host-argument")
    attribution = attribute_compiled(_recorded_compiled(b"recorded-host-argument"))
    assert attribution.assignment.totals()["host_argument_bytes"] == 4_194_304
    peak = peak_of(attribution)
    temp = attribution.assignment.totals()["temp_bytes"]  # the region: its temporary allocation, rounded up
    assert peak.total_bytes == 4_210_688 == -(-temp // (16 << 10)) * (16 << 10)
    assert dict(peak.by("role").raw.set_index("group")["bytes"]) == {"temporary": 4_210_688}
    assert "in device memory" in peak.method


def test_the_dump_route_on_cpu_gives_the_same_program_and_assignment(monkeypatch):
    import jax
    import jax.numpy as jnp

    from xlakit._jax import compiler_dump
    from xlakit.memory._programs import with_assignment
    from xlakit.memory.buffer_assignment import buffer_assignment

    lowered = jax.jit(lambda x: (jnp.sin(x) @ x).sum(0)).lower(jnp.ones((64, 64)))
    compiled, hlo_proto = compiler_dump.compile_with_assignment(lowered)
    assert compiled.runtime_executable().fingerprint == lowered.compile().runtime_executable().fingerprint
    dumped, module = compiler_dump.split_hlo_proto(hlo_proto)
    plain = buffer_assignment(compiled).totals()
    from xlakit.memory.buffer_assignment import decode_buffer_assignment

    assert decode_buffer_assignment(dumped, module).totals()["temp_bytes"] == plain["temp_bytes"] == 16384
    # A platform without the assignment in memory_analysis compiles with the dump, once.
    no_assignment = dataclasses.replace(platforms.CPU, assignment_in_memory_analysis=False)
    monkeypatch.setitem(platforms._TABLE, "cpu", no_assignment)
    calls = []
    real = compiler_dump.compile_with_assignment
    monkeypatch.setattr(compiler_dump, "compile_with_assignment",
                        lambda lo, name=None, options=None: calls.append(1) or real(lo, name, options))
    other = jax.jit(lambda x: jnp.cos(x) * 3).lower(jnp.ones((8,)))
    with_assignment(None, other)
    with_assignment(None, other)  # remembered: no second dump
    assert calls == [1]


def test_lowered_programs_and_the_explorer_get_their_assignment_where_memory_analysis_has_none(monkeypatch):
    """As on a TPU (memory_analysis() carries no buffer assignment, recorded in facts.json): what the notebooks and
    widgets hand the memory functions — a Lowered to buffer_assignment / peak / MemoryBreakdown, and the
    explorer's compiled variants — is answered from one compile with XLA's dump per program, not refused."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory
    from xlakit._jax import compiler_dump, lowerings
    from xlakit.memory import _analysis as compiled_module
    from xlakit.widgets import MemoryBreakdown, MemoryExplorer

    assert TRAIN["memory_analysis"]["sba_len"] == 0  # the recorded serialized_buffer_assignment_proto length
    monkeypatch.setitem(platforms._TABLE, "cpu",
                        dataclasses.replace(platforms.CPU, assignment_in_memory_analysis=False))
    real_analysis = compiled_module.memory_analysis

    def without_assignment(compiled):
        stats = real_analysis(compiled)
        fields = {f: getattr(stats, f) for f in dir(stats) if not f.startswith("_")}
        return types.SimpleNamespace(**{**fields, "serialized_buffer_assignment_proto": b""})

    monkeypatch.setattr(compiled_module, "memory_analysis", without_assignment)
    dumps = []
    real_dump = compiler_dump.compile_with_assignment
    monkeypatch.setattr(compiler_dump, "compile_with_assignment",
                        lambda lo, name=None, options=None: dumps.append(1) or real_dump(lo, name, options))

    def step(w, x):
        return jnp.tanh(x @ w).sum()

    lowered = jax.jit(jax.grad(step)).lower(jnp.ones((128, 128)), jnp.ones((32, 128)))
    bare = lowered.compile()
    lowerings._lowerings.pop(bare, None)  # as without an enabled cache (another test may have left one)
    with pytest.raises(ValueError, match="carries no buffer assignment"):
        memory.buffer_assignment(bare)  # a bare Compiled: says what to pass
    assert memory.buffer_assignment(lowered).totals()["temp_bytes"] > 0
    assert memory.peak(lowered).total_bytes > 0 and dumps == [1]  # remembered: one dump compile
    view = MemoryBreakdown({"grad": lowered}, selected="grad")
    assert view.peak is not None and view.peak.total_bytes > 0 and dumps == [1]
    explorer = MemoryExplorer(step, lambda b: (jax.ShapeDtypeStruct((128, 128), jnp.float32),
                                               jax.ShapeDtypeStruct((b, 128), jnp.float32)),
                              batch_sizes=(8,), batch=8, step=jax.grad)
    result = explorer.wait()
    assert result.error is None and result.peak.total_bytes > 0 and len(dumps) == 2, result


def test_a_bare_compiled_is_described_where_an_enabled_cache_kept_its_lowering(monkeypatch, tmp_path):
    """JAX's Compiled keeps no link to the program it came from: on a platform without the assignment in
    memory_analysis (TPU, as recorded) a bare Compiled is refused with what to pass — unless it was made by
    Lowered.compile() while an xlakit cache was enabled, which keeps its Lowered for one compile with the dump."""
    import jax
    import jax.numpy as jnp

    import xlakit
    from xlakit import memory
    from xlakit._jax import hooks, lowerings
    from xlakit.memory import _analysis as compiled_module

    monkeypatch.setitem(platforms._TABLE, "cpu", dataclasses.replace(
        platforms.CPU, assignment_in_memory_analysis=False, capture_assignment_on_miss=True))  # the TPU's rules
    real_analysis = compiled_module.memory_analysis
    monkeypatch.setattr(compiled_module, "memory_analysis", lambda c: types.SimpleNamespace(**{
        **{f: getattr(real_analysis(c), f) for f in dir(real_analysis(c)) if not f.startswith("_")},
        "serialized_buffer_assignment_proto": b""}))
    jax_compile = jax.stages.Lowered.compile

    def program(x):
        return (jnp.sin(x) @ x.T).sum(0)

    bare = jax.jit(program).lower(jnp.ones((48, 48))).compile()
    lowerings._lowerings.pop(bare, None)  # as without an enabled cache (another test may have left one)
    with pytest.raises(ValueError, match="an xlakit cache is enabled also works"):
        memory.peak(bare)
    already = hooks.installed()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "JAX already compiled N programs": expected here
        xlakit.enable_cache(tmp_path / "cache")
    try:
        assert jax.stages.Lowered.compile.__wrapped__ is (hooks._saved["lowered_compile"])
        compiled = jax.jit(program).lower(jnp.ones((40, 40))).compile()
        assert lowerings.lowering_of(compiled) is not None
        assert memory.peak(compiled).total_bytes > 0 and memory.buffer_assignment(compiled).totals()["temp_bytes"] > 0
    finally:
        xlakit.disable_cache()
    if not already:
        assert jax.stages.Lowered.compile is jax_compile  # JAX's own method back


def test_an_enabled_cache_compiles_a_miss_with_the_dump_so_peak_compiles_nothing_more(monkeypatch, tmp_path):
    """Where memory_analysis() carries no assignment (TPU, as recorded), peak() of a program compiled in this process
    through an enabled xlakit cache only decodes: the cache's compile of the miss carried XLA's dump (measured on the
    TPU v5e, 2026-12-06: +0.7 % / +5.4 % on the compile, against a second compile of 0.93x for peak() without it).
    On by default where the platform table says the capture was measured harmless (TPU: a capture-made entry loaded
    in fresh processes at 1.00x with no file written); XLAKIT_CAPTURE_ASSIGNMENT=0 turns it off (peak() then compiles
    with the dump when asked) and =1 on for a platform the table leaves out; no dump folder is left behind; a
    cut-short dump (a full disk) is not kept, and the memo is bounded in bytes."""
    import tempfile

    import jax
    import jax.numpy as jnp

    import xlakit
    from xlakit import memory
    from xlakit._jax import compiler_dump
    from xlakit.memory import _analysis as compiled_module

    monkeypatch.setitem(platforms._TABLE, "cpu", dataclasses.replace(
        platforms.CPU, assignment_in_memory_analysis=False, capture_assignment_on_miss=True))  # the TPU's rules
    real_analysis = compiled_module.memory_analysis
    monkeypatch.setattr(compiled_module, "memory_analysis", lambda c: types.SimpleNamespace(**{
        **{f: getattr(real_analysis(c), f) for f in dir(real_analysis(c)) if not f.startswith("_")},
        "serialized_buffer_assignment_proto": b""}))
    dump_compiles = []
    dump_compile = compiler_dump.compile_with_assignment
    monkeypatch.setattr(compiler_dump, "compile_with_assignment",
                        lambda *a, **k: dump_compiles.append(a) or dump_compile(*a, **k))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.delenv("XLAKIT_CAPTURE_ASSIGNMENT", raising=False)  # the table's default
    monkeypatch.delenv("XLA_FLAGS", raising=False)

    def program(x):
        return jnp.tanh(x @ x.T).sum(0) * 3.0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "JAX already compiled N programs": expected here
        xlakit.enable_cache(tmp_path / "cache")
    try:
        compiled = jax.jit(program).lower(jnp.ones((36, 36))).compile()
        assert compiler_dump.remembered(compiled=compiled) is not None
        first = memory.peak(compiled)
        by_fn = memory.peak(jax.jit(program), jnp.ones((28, 28)))  # a new shape: the cache compiles it, with the dump
        assert dump_compiles == []
        assert memory.buffer_assignment(compiled).totals()["temp_bytes"] > 0
        assert first.total_bytes > by_fn.total_bytes > 0
        monkeypatch.setenv("XLAKIT_CAPTURE_ASSIGNMENT", "0")
        off = jax.jit(program).lower(jnp.ones((20, 20))).compile()
        assert compiler_dump.remembered(compiled=off) is None
        assert memory.peak(off).total_bytes > 0 and len(dump_compiles) == 1
    finally:
        xlakit.disable_cache()
    assert list((tmp_path / "tmp").iterdir()) == []
    from xlakit._jax import dump_memo

    whole = compiler_dump.remembered(compiled=compiled)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / f"m.jit_program.{compiler_dump.DUMP_SUFFIX}").write_bytes(whole[: len(whole) - 100])
    assert not dump_memo.end_capture(str(cut), types.SimpleNamespace(fingerprint=b"cut-short"), "jit_program")
    assert dump_memo._memo.get(b"cut-short") is None and not cut.exists()
    monkeypatch.setattr(dump_memo, "MEMO_BYTES", 3 * len(whole))
    for i in range(6):
        dump_memo.remember(whole + bytes(i), f"k{i}".encode())
    assert dump_memo._held_bytes() <= 3 * len(whole) + 10 and b"k5" in dump_memo._memo and b"k0" not in dump_memo._memo
    monkeypatch.delenv("XLAKIT_CAPTURE_ASSIGNMENT")
    assert dump_memo.capture_enabled("cpu") and not dump_memo.capture_enabled("gpu")  # GPU: in memory_analysis()
    monkeypatch.setitem(platforms._TABLE, "cpu", dataclasses.replace(
        platforms.CPU, assignment_in_memory_analysis=False, capture_assignment_on_miss=False))
    assert not dump_memo.capture_enabled("cpu")  # not measured harmless there: off unless asked
    monkeypatch.setenv("XLAKIT_CAPTURE_ASSIGNMENT", "1")
    assert dump_memo.capture_enabled("cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/somewhere/of/theirs")  # their dump: never taken over
    assert not dump_memo.capture_enabled("cpu")


# -- the probe ---------------------------------------------------------------------------------------------------
def _measured(peak, baseline, before, after):
    return {"peak": peak, "baseline": baseline, "peak_exact": True, "peak_reason": "pjrt", "reserved_before": before,
            "reserved_after": after}


def test_the_probe_on_a_reserved_region_is_exact_only_where_the_allocator_shows_the_scratch(monkeypatch):
    from xlakit.memory import _probe_reserved

    ma = TRAIN["memory_analysis"]
    compiled = types.SimpleNamespace(memory_analysis=lambda: types.SimpleNamespace(**ma))
    monkeypatch.setattr(_probe_reserved, "reserved_temp", lambda c: (1_077_330_432, "recorded assignment"))
    base = TRAIN["stats_before_run"]["bytes_in_use"]
    out, code = ma["output_size_in_bytes"], ma["generated_code_size_in_bytes"]
    first = _measured(base + out + code, base, 0, 1_077_346_304)
    second = _measured(base + 2 * out, base + out, 1_077_346_304, 1_077_346_304)
    verdict = _probe_reserved.judge_reserved(first, second, compiled, platforms.TPU, 2 << 20)
    assert verdict["exact"] and verdict["scratch"] == out + 1_077_346_304 == verdict["xla_bytes"]
    assert verdict["code"] == code
    covered = _measured(base + out + code, base, 2 << 30, 2 << 30)  # an earlier, larger program's region
    verdict = _probe_reserved.judge_reserved(covered, second, compiled, platforms.TPU, 2 << 20)
    assert not verdict["exact"] and "cannot be seen in the allocator" in verdict["reason"]


# Recorded on a TPU v5e (jax 0.10.2, libtpu cl/933746096) on 2026-12-06, one program per fresh process:
# docs/tpu/round10-probe-2026-12-06.log. (memory_analysis, assignment temp, bytes_reserved after the first run,
# first run's bytes_in_use rise, and the probe's baseline and peak_bytes of the second run: that peak is the baseline
# + outputs + the region, so bytes_in_use peaked at it less the region.)
ROUND10 = {
    "gather": ({"output_size_in_bytes": 51200000, "temp_size_in_bytes": 0, "generated_code_size_in_bytes": 323584},
               131584, 0, 51523584, (102880768, 154080768)),
    "narrow150": ({"output_size_in_bytes": 7608320, "temp_size_in_bytes": 0, "generated_code_size_in_bytes": 4069376},
                  22118912, 115712, 11677696, (19444736, 27168768)),
    "transformer": ({"output_size_in_bytes": 11254272, "temp_size_in_bytes": 5386752,
                     "generated_code_size_in_bytes": 3067392}, 2720256, 2736128, 14321664, (37327360, 51317760)),
    "sort_outer": ({"output_size_in_bytes": 40960, "temp_size_in_bytes": 809025024,
                    "generated_code_size_in_bytes": 2023424}, 808976896, 808992768, 2064384, (2200576, 811234304)),
}


@pytest.mark.parametrize("name", sorted(ROUND10))
def test_the_probe_on_a_tpu_follows_the_region_the_allocator_reserved(monkeypatch, name):
    """XLA reserves no scratch region where temp_size_in_bytes is 0 (its assignment's device temporaries are not
    allocated), and rounds the region up to 16 KiB: before, the probe counted the gather step's 128.5 KiB of
    assignment temporaries as XLA's plan, and 64 KiB rounding made the transformer and sort steps inexact."""
    import importlib

    from xlakit.memory import _analysis, _probe_reserved

    ba_module = importlib.import_module("xlakit.memory.buffer_assignment")

    ma, assignment_temp, region, first_rise, (base, peak) = ROUND10[name]
    stats = types.SimpleNamespace(alias_size_in_bytes=0, argument_size_in_bytes=1, **ma)
    compiled = types.SimpleNamespace(memory_analysis=lambda: stats)
    monkeypatch.setattr(_analysis, "_ANALYSES", {})
    monkeypatch.setattr(ba_module, "buffer_assignment", lambda c: types.SimpleNamespace(
        totals=lambda: {"temp_bytes": assignment_temp}))
    first = _measured(first_rise, 0, 0, region)
    second = _measured(peak - region, base, region, region)
    verdict = _probe_reserved.judge_reserved(first, second, compiled, platforms.TPU, 2 << 20)
    out = ma["output_size_in_bytes"]
    assert peak - region - base == out and first_rise - out == ma["generated_code_size_in_bytes"] == verdict["code"]
    assert verdict["scratch"] == out + region
    if name == "narrow150":  # a region XLA does not plan: said, not hidden
        assert not verdict["exact"] and verdict["xla_bytes"] == out and verdict["outside_xla_bytes"] == 115712
        assert "grew to 113.0 KiB during the run, though XLA reserves none" in verdict["reason"]
    else:
        assert verdict["exact"], verdict["reason"]
        assert verdict["xla_bytes"] == out + region and verdict["outside_xla_bytes"] == 0
    if ma["temp_size_in_bytes"]:
        def rounded(granule):
            return -(-assignment_temp // granule) * granule
        assert region == rounded(16 << 10) != rounded(64 << 10)


def test_two_byte_counts_that_read_the_same_are_told_apart():
    from xlakit._text.format import fmt_bytes_apart

    assert fmt_bytes_apart(2736128, 2752512) == ("2.6 MiB (2,736,128 B)", "2.6 MiB (2,752,512 B)")
    assert fmt_bytes_apart(1024, 2048) == ("1.0 KiB", "2.0 KiB") and fmt_bytes_apart(5, 5) == ("5 B", "5 B")


# -- the PJRT C API reset ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fake_plugin(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the stand-in PJRT plugin")
    out = tmp_path_factory.mktemp("pjrt") / "libtpu_standin.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(out), str(Path(__file__).parent / "data" /
                                                                        "fake_pjrt_plugin.c")], check=True)
    return ctypes.CDLL(str(out))  # loaded, as JAX loads a plugin: xlakit only ever opens it with RTLD_NOLOAD


def _device(device_id=1, pointer=0x1000):
    client = types.SimpleNamespace(unsafe_client_pointer=pointer)
    return types.SimpleNamespace(platform="tpu", id=device_id, client=client)


def test_the_pjrt_reset_calls_clear_memory_stats_on_the_right_device(fake_plugin, monkeypatch):
    from xlakit._jax import pjrt_capi

    monkeypatch.setattr(pjrt_capi, "_resolved", {})
    fake_plugin.fake_configure(112, 138, b"tpu")
    before = fake_plugin.fake_clears()
    assert pjrt_capi.clear_memory_stats(_device(1)) == "PJRT_Device_ClearMemoryStats (PJRT C API 0.112)"
    assert fake_plugin.fake_clears() == before + 1
    with pytest.raises(pjrt_capi.PjrtUnavailable, match="not among the plugin's addressable devices"):
        pjrt_capi.clear_memory_stats(_device(7))


@pytest.mark.parametrize(("minor", "functions", "platform", "why"), [
    (105, 138, b"tpu", "no PJRT_Device_ClearMemoryStats"),   # older than the function
    (112, 120, b"tpu", "no PJRT_Device_ClearMemoryStats"),   # a table that stops before its slot
    (112, 138, b"cuda", "serves platform 'cuda', not 'tpu'"),  # another plugin's table: never used on this client
])
def test_the_pjrt_reset_is_refused_before_any_call_where_the_table_does_not_allow_it(fake_plugin, monkeypatch,
                                                                                     minor, functions, platform, why):
    from xlakit._jax import pjrt_capi

    monkeypatch.setattr(pjrt_capi, "_resolved", {})
    fake_plugin.fake_configure(minor, functions, platform)
    before = fake_plugin.fake_clears()
    with pytest.raises(pjrt_capi.PjrtUnavailable, match=why):
        pjrt_capi.clear_memory_stats(_device(1, pointer=0x2000 + minor + functions))
    assert fake_plugin.fake_clears() == before
    fake_plugin.fake_configure(112, 138, b"tpu")


def test_the_reset_falls_back_to_a_baseline_and_says_why_on_cpu():
    import jax

    from xlakit._jax import pjrt_capi

    with pytest.raises(pjrt_capi.PjrtUnavailable, match="not a PJRT C API plugin"):
        pjrt_capi.clear_memory_stats(jax.devices()[0])
    recorded = FACTS["reset"]
    assert recorded["after_reset"]["peak_bytes_in_use"] == recorded["after_reset"]["bytes_in_use"]  # on the TPU
    assert recorded["before"]["peak_bytes_in_use"] > recorded["before"]["bytes_in_use"]
    assert tuple(FACTS["pjrt_c_api_version"]) == (0, 112)
