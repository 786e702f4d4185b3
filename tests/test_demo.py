"""The README's main job: `xlakit demo` runs real programs cold then warm in fresh processes, on the backend JAX
picks, and proves each warm program loaded from the cache with bit-identical results (its exit status says so)."""

from __future__ import annotations

import subprocess
import sys

from conftest import worker_env


def test_quick_demo_runs_cold_then_warm_with_bit_identical_results(tmp_path):
    done = subprocess.run([sys.executable, "-m", "xlakit.cli", "demo", "--quick", "--keep-cache", str(tmp_path / "c")],
                          env=worker_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "cnn_train_step" in out and "mlp_infer_b1" in out
    assert "running on 1 x cpu (platform cpu)" in out  # the device JAX picked, named while the demo runs
    assert "bit-identical for all 2 programs" in out and out.count("loaded (1 hit)") == 2
    assert list((tmp_path / "c").glob("*/*.xlk")), "the demo's cache holds the stored programs"


# What a warm TPU process recorded for the train step before the cache loaded TPU programs (issue 33): xlakit's
# kernel check refused the entry (the TPU compiler's internal custom calls), so the program was compiled again;
# JAX's own helper compiled too (a library program, which never fails a row).
_TPU_REFUSED = [
    {"kind": "miss", "name": "jit_transformer_train_step", "origin": "user", "source": "xlakit",
     "reason": "the program calls kernel(s) ['AssumeGatherIndicesInBound', 'ConcatBitcast'] that are not ready in "
               "this process without lowering: no kernel of that name is registered for 'tpu', and xlakit does not "
               "know which library provides it; the program is compiled instead; compiling instead"},
    {"kind": "compile", "name": "jit_transformer_train_step", "origin": "user", "source": "xlakit", "reason": None},
    {"kind": "compile", "name": "jit_broadcast_in_dim", "origin": "library", "source": "xlakit", "reason": None},
]


def test_a_program_compiled_again_in_the_warm_process_is_a_failed_row_with_its_reason(tmp_path):
    import io

    import numpy as np
    from rich.console import Console

    from xlakit.demo.runner import report, warm_outcome

    refused = warm_outcome(_TPU_REFUSED)
    assert (refused.loaded, refused.hits) == (False, 0)
    assert refused.reasons[0].startswith("miss: the program calls kernel(s) ['AssumeGatherIndicesInBound'")
    assert refused.reasons[1] == "compile"  # the user program's compile; the library's is left out
    assert warm_outcome([{"kind": "hit", "origin": "user"}, *_TPU_REFUSED[2:]]).loaded  # a library compile: loaded
    assert not warm_outcome([]).loaded  # nothing served from the cache is not a load
    assert warm_outcome([{"kind": "hit", "origin": "user"}, {"kind": "load_error", "origin": "user",
                                                             "reason": "refused"}]).reasons == ("load_error: refused",)

    for side in ("cold", "warm"):  # equal outputs on both sides: "bit-identical" alone must not pass the demo
        (tmp_path / side).mkdir()
        for name in ("transformer_train_step", "mlp_infer_b1"):
            np.savez(tmp_path / side / f"{name}.npz", np.arange(3, dtype=np.float32))
    row = {"first_call_s": 1.0, "entries": [], "events": []}
    cold = {"transformer_train_step": row, "mlp_infer_b1": row}
    warm = {"transformer_train_step": {**row, "events": _TPU_REFUSED},
            "mlp_infer_b1": {**row, "first_call_s": 0.1, "events": [{"kind": "hit", "origin": "user"}]}}
    tpu = {"platform": "tpu", "device_kind": "TPU v5 lite", "count": 1}
    text = io.StringIO()
    status = report(Console(file=text, width=250, color_system=None), cold, warm, tmp_path, tpu, tpu)
    out = text.getvalue()
    assert status == 1, out
    assert "on 1 x TPU v5 lite (platform tpu)" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 5}
    assert "compiled again (miss)" in rows["transformer_train_step"]
    assert "loaded (1 hit)" in rows["mlp_infer_b1"] and "10.0x" in rows["mlp_infer_b1"]
    assert "transformer_train_step compiled again in the warm process: miss: the program calls kernel(s) " \
           "['AssumeGatherIndicesInBound', 'ConcatBitcast']" in out
    assert "1 of 2 programs were compiled again" in out and "bit-identical for all" not in out


def test_demo_processes_run_on_the_backend_jax_picks(monkeypatch):
    from xlakit.demo.runner import _child_env

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert "JAX_PLATFORMS" not in _child_env()  # unset stays unset: an accelerator is used when present
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    assert _child_env()["JAX_PLATFORMS"] == "tpu"
