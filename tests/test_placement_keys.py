"""One cache entry for every placement of the same program, in real JAX subprocesses.

Fault proved: JAX's cache key holds the concrete device ids (the compile options' device assignment, and on
XLA:CPU a topology fingerprint that differs per process), so a 4-device program lowered again on the same
devices in reverse order, a 2-device program moved to two other devices, or a one-device program moved to
another device missed and compiled again; and the same program got a different key in each process of a
``jax.distributed`` job. xlakit's key (``xlakit/_jax/keys.py``) leaves the ids out and keeps count, kinds,
mesh shape and process layout; the stored executable is placed on the caller's devices at load.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import worker_env

WORKER = Path(__file__).with_name("placement_worker.py")


def _run(args: list[str], devices: int, timeout: float = 300) -> subprocess.Popen:
    env = worker_env({"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _report(proc: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def placements(tmp_path_factory):
    cache = tmp_path_factory.mktemp("placement") / "cache"
    return _report(_run(["placements", str(cache)], devices=4))


def _kinds(run: dict) -> list[str]:
    """The cache's decisions; a ``recompile`` event (JAX retraced for the new placement) is the timeline's
    account of the same call, not a cache decision."""
    return [e["kind"] for e in run["events"] if e["kind"] != "recompile"]


def test_permuted_and_shifted_devices_hit_one_entry_with_the_same_values(placements):
    runs = placements["runs"]
    assert _kinds(runs["4_forward"]) == ["miss", "compile", "store"]
    for label in ("4_reversed", "4_rotated"):  # the same 4 devices, other orders
        assert _kinds(runs[label]) == ["hit"], label
        assert runs[label]["value"] == runs["4_forward"]["value"], label
        # each row block is on the device the caller's mesh put it on: the assignment was remapped at load
        assert runs[label]["shards"] == runs[label]["asked"], label
    assert _kinds(runs["2_first"]) == ["miss", "compile", "store"]  # another device count: its own entry
    for label in ("2_shifted", "2_swapped"):  # devices 2,3 and 3,1 instead of 0,1
        assert _kinds(runs[label]) == ["hit"], label
        assert runs[label]["value"] == runs["2_first"]["value"]
        assert runs[label]["shards"] == runs[label]["asked"]
    assert _kinds(runs["1_dev0"]) == ["miss", "compile", "store"]
    assert _kinds(runs["1_dev3"]) == ["hit"] and runs["1_dev3"]["shards"] == [3]
    assert runs["1_dev3"]["value"] == runs["1_dev0"]["value"]
    # the entry keys: one per device count
    keys = {e["key"] for r in runs.values() for e in r["events"] if e["kind"] != "recompile"}
    assert len(keys) == 3


def test_key_leaves_device_ids_out_but_keeps_count_and_kind(placements):
    keys, jax_keys = placements["keys"], placements["jax_keys"]
    assert jax_keys["fwd"] != jax_keys["rev"]  # the fault: JAX's own key differs for the reversed mesh
    assert keys["fwd"] == keys["rev"]
    assert keys["fwd"] != keys["two"]  # another device count never shares an entry
    assert placements["kind_keys"]["cpu"] == keys["fwd"]
    assert placements["kind_keys"]["other"] != keys["fwd"]  # another device kind never shares an entry
    parts = placements["key_parts"]
    assert set(parts) == {"computation", "jax_lib version", "backend version", "XLA flags", "compile_options",
                          "accelerator_config", "compression", "custom_hook", "placement"}
    assert all(len(v) == 64 for v in parts.values())


def test_a_stored_executable_is_never_loaded_onto_another_device_count(placements):
    assert placements["check_2_of_4"].startswith("refused: the stored executable was compiled for 4 device(s)")
    assert "refused" in placements["explicit"]["load_two"]


def test_executable_cache_hits_across_placements_and_loads_onto_a_rotation(placements):
    ex = placements["explicit"]
    assert ex["fwd"]["decision"] == "store" and ex["rev"]["decision"] == "hit"
    assert ex["rev"]["key"] == ex["fwd"]["key"]
    assert ex["rev"]["value"] == ex["fwd"]["value"] == ex["load_rotated"]["value"]
    assert ex["rev"]["shards"] == ex["rev"]["asked"]
    assert ex["load_rotated"]["shards"] == ex["load_rotated"]["asked"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_processes_of_a_distributed_job_get_one_key_and_share_the_entry(tmp_path):
    """Under jax.distributed on CPU, JAX's key differs per process (device ids 0 / 2048, topology
    fingerprint); xlakit's is the same, and process 1 runs process 0's entry on its own device."""
    port = str(_free_port())
    cache = tmp_path / "shared"
    procs = [_run(["distributed", port, str(i), str(cache)], devices=2) for i in range(2)]
    reports = [_report(p, timeout=240) for p in procs]
    r0, r1 = sorted(reports, key=lambda r: r["process_id"])
    assert r0["local_ids"] == [0, 1] and r1["local_ids"] != [0, 1]
    for label in ("local", "local_2dev", "spmd"):
        assert r0["jax"][label] != r1["jax"][label], label  # the fault, as JAX keys it
        assert r0["xlakit"][label] == r1["xlakit"][label], label
    assert r0["partition"] == r1["partition"]
    assert [e["kind"] for e in r0["run_events"]] == ["miss", "compile", "store"]
    assert [e["kind"] for e in r1["run_events"]] == ["hit"]
    assert r1["run_events"][0]["key"] == r0["run_events"][0]["key"]
    assert r1["run_value"] == r0["run_value"]
    assert r1["run_device"] == r1["local_ids"][0]


class _Dev:
    def __init__(self, kind: str, process: int) -> None:
        self.device_kind, self.process_index = kind, process


def test_placement_part_names_count_kinds_and_process_layout_not_ids():
    """Which processes hold the devices is renumbered (a job's processes 2 and 5 look like 0 and 1), but a
    different layout, count, kind or mesh shape is a different placement part (so a different key)."""
    import numpy as np

    from xlakit._jax.keys import placement_descriptor

    def desc(procs, kind="cpu", shape=None):
        arr = np.empty(len(procs), dtype=object)
        arr[:] = [_Dev(kind, p) for p in procs]
        return placement_descriptor(arr.reshape(shape or (len(procs),)), "cpu", True)

    assert desc([2, 2, 5, 5]) == desc([0, 0, 1, 1])
    assert desc([7]) == desc([0])
    assert desc([0, 1, 0, 1]) != desc([0, 0, 1, 1])  # another process layout
    assert desc([0, 0, 0]) != desc([0, 0, 0, 0])  # another count
    assert desc([0, 0], kind="TPU v5e") != desc([0, 0])  # another kind
    assert desc([0, 0, 0, 0], shape=(2, 2)) != desc([0, 0, 0, 0])  # another mesh shape
    assert desc([0, 0, 1, 1]).endswith("count=4;shape=(4,);kinds=cpu,cpu,cpu,cpu;processes=0,0,1,1;"
                                       "assignment=stripped")
