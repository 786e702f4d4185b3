"""The README's main job: `xlakit demo` runs real programs cold then warm in fresh processes and proves the
warm results bit-identical (its exit status says so)."""

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
    assert "bit-identical for all 2 programs" in out and "(1 hit)" in out
    assert list((tmp_path / "c").glob("*/*.xlk")), "the demo's cache holds the stored programs"
