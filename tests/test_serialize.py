"""xlakit._jax.serialize: executables to bytes and back, the restricted unpickler, and other device placements.

Anything that compiles for 4 host devices runs in tests/serialize_worker.py subprocesses (the device count is
fixed when JAX starts, and an unsafe load could abort the process). Checks that need no compile run here.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import os
import pickle
import sys
from pathlib import Path

import fresh_process
import pytest

from xlakit._jax import payload_layout
from xlakit._jax import serialize as S
from xlakit._jax import unpickle_policy as policy

HERE = Path(__file__).resolve().parent
WORKER = HERE / "serialize_worker.py"
MODULE_NT = collections.namedtuple("MODULE_NT", "a b")


def run_worker(*args: str, devices: int = 4, extra_env: dict | None = None) -> tuple[dict, str]:
    env = dict(os.environ)
    env.update({"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
                "PYTHONPATH": os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])})
    env.update(extra_env or {})
    proc = fresh_process.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, \
        f"worker {args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


# -------------------------------------------------------------------------- other device placements

@pytest.fixture(scope="module")
def placement_run():
    return run_worker("placement")


def test_plain_jax_loads_permuted_devices_then_fails_at_first_call(placement_run):
    """Why the remap exists: JAX's own loader accepts reversed devices, then the first call fails with a
    mismatch whose passed and required shardings print the same."""
    result, _ = placement_run
    assert result["n_devices"] == 4
    error = result["plain_error"]
    assert error is not None, "plain deserialize_and_load ran on reversed devices; the remap may be unnecessary now"
    assert error["type"] == "ValueError"
    assert "disagree" in error["message"]
    assert error["prints_identically"] is True


def test_reversed_devices_load_and_return_the_same_values(placement_run):
    result, _ = placement_run
    assert result["placement"] == {"platform": "cpu", "device_ids": [0, 1, 2, 3], "device_kinds": ["cpu"] * 4,
                                   "process_indices": [0, 0, 0, 0]}
    rev = result["reversed"]
    assert rev["equal"] is True            # jnp.sin(x).sum(0)
    assert rev["ordered_equal"] is True    # an output that depends on which shard runs where
    assert rev["loaded_placement"] == [3, 2, 1, 0]
    assert rev["out_devices"] == [0, 1, 2, 3]
    assert rev["shard_devices"] == [3, 2, 1, 0]  # the first rows of the output live on device 3, like the input


def test_two_devices_refused_before_xla_and_the_process_lives_on(placement_run):
    result, stdout = placement_run
    fewer = result["fewer"]
    assert fewer["error"] is not None and fewer["is_value_error"] is True
    message = fewer["error"]
    assert "compiled for 4 device(s), 2 given" in message
    assert "ids=[0, 1, 2, 3]" in message and "ids=[0, 1]" in message      # both device lists
    assert "kinds=['cpu', 'cpu', 'cpu', 'cpu']" in message and "process_indices=[0, 0]" in message
    assert "What to do:" in message
    assert "duplicate devices [1]" in result["refusals"]["duplicates"]
    assert "device id 9 does not exist" in result["refusals"]["unknown_id"]
    # A placement that lies about the payload (2 devices for a 4-device program) would abort inside XLA.
    assert "the payload was compiled for devices [0, 1, 2, 3]" in result["refusals"]["lying_placement"]
    assert result["xla_calls_during_refusals"] == 0
    assert "STILL-ALIVE after DevicePlacementError" in stdout  # and exit code 0 (checked by run_worker)


def test_single_device_program_moves_to_another_device(placement_run):
    single = placement_run[0]["single"]
    assert single["placement"]["device_ids"] == [0]
    assert single["equal"] is True
    assert single["out_devices"] == [2]


# ------------------------------------------------------------- round trip, unserializable programs

def test_round_trip_in_a_second_process_with_pytrees(tmp_path):
    """dict / tuple / namedtuple / None leaves in and out, bf16 and int8 outputs, bit-identical across processes."""
    saved, _ = run_worker("save", str(tmp_path / "entry"), devices=1)
    assert saved["same_process_outputs"] == saved["outputs"]
    assert saved["same_process_structure"] == saved["structure"]
    assert saved["nt_type"] == "NT"
    assert "namedtuple[NT]" in saved["structure"] and "'none': None" in saved["structure"]
    assert [o.rsplit(":", 1)[1] for o in saved["outputs"]] == ["int8", "bfloat16", "float32"]
    loaded, _ = run_worker("load", str(tmp_path / "entry"), devices=1)
    assert loaded["outputs"] == saved["outputs"]
    assert loaded["structure"] == saved["structure"]
    assert loaded["nt_is_namedtuple"] is True


def test_programs_jax_cannot_serialize_raise_not_serializable():
    result, stdout = run_worker("unserializable", devices=1, extra_env={"JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "1"})
    expected = {
        "debug_print": "Can't pickle local object",
        "mutable_ref": "mutable array ref",
        "const_args": "const_args",
        "local_namedtuple": "Local",
    }
    for name, reason in expected.items():
        if name == "mutable_ref" and name not in result:  # a JAX without jax.new_ref
            continue
        assert result[name]["error"] == "NotSerializable", (name, result[name])
        assert reason in result[name]["reason"], (name, result[name])
    assert result["debug_print"]["still_runs"] == [0.0, 2.0, 4.0]
    assert result["const_args"]["still_runs"] == [1.0, 2.0, 3.0]
    assert "x=[0. 1. 2.]" in stdout


# ------------------------------------------------------------------------------------------ in-process checks

def test_placement_round_trips_through_json():
    p = S.Placement("cpu", (3, 1), ("cpu", "cpu"), (0, 0))
    again = S.Placement.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p and isinstance(again.device_ids, tuple)
    with pytest.raises(ValueError):
        S.Placement.from_dict({"platform": "cpu", "device_ids": [0]})
    with pytest.raises(ValueError):
        S.Placement("cpu", (0, 1), ("cpu",), (0, 0))


@pytest.fixture
def no_xla(monkeypatch):
    """Fail the test if anything asks XLA to load an executable."""
    def forbidden(*args):
        raise AssertionError("XLA was asked to load an executable")
    monkeypatch.setattr(S, "_load_executable", forbidden)


@pytest.mark.parametrize("platform, kind, expected", [
    ("gpu", "NVIDIA H100 80GB HBM3", "platform differs: compiled for 'gpu'"),
    ("cpu", "TPU v4", "device kind differs at position 0: compiled for 'TPU v4', given 'cpu'"),
])
def test_other_platform_or_kind_is_refused_before_the_payload_is_read(no_xla, platform, kind, expected):
    import jax

    device = jax.devices("cpu")[0]
    placement = S.Placement(platform, (device.id,), (kind,), (0,))
    with pytest.raises(S.DevicePlacementError) as info:
        S.load_compiled(b"not even a pickle", placement, devices=[device])
    message = str(info.value)
    assert expected in message
    assert f"compiled for: platform={platform} ids=[{device.id}] kinds=['{kind}']" in message
    assert f"requested:    platform=cpu ids=[{device.id}] kinds=['cpu']" in message


def test_missing_platform_or_device_ids_are_refused(no_xla):
    import jax

    with pytest.raises(S.DevicePlacementError, match="no 'tpu' backend"):
        S.check_devices(S.Placement("tpu", (0,), ("TPU v4",), (0,)))
    missing = max(d.id for d in jax.devices("cpu")) + 7
    with pytest.raises(S.DevicePlacementError, match=f"devices \\[{missing}\\] do not exist"):
        S.check_devices(S.Placement("cpu", (missing,), ("cpu",), (0,)))
    device = jax.devices("cpu")[0]
    assert S.check_devices(S.Placement("cpu", (device.id,), ("cpu",), (0,)), [device.id]) == [device]


class _RunsCode:
    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def _load(payload: bytes):
    import jax

    device = jax.devices("cpu")[0]
    return S.load_compiled(payload, S.Placement.of_devices([device]), devices=[device])


def test_restricted_unpickler_refuses_a_payload_that_runs_os_system(tmp_path, no_xla):
    target = tmp_path / "pwned"
    payload = pickle.dumps(_RunsCode(target))
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load global (posix|os|nt)\.system"):
        _load(payload)
    # The unpickler itself refuses too, not only the scan that runs before it.
    with pytest.raises(pickle.UnpicklingError, match="system"):
        S._RestrictedUnpickler(io.BytesIO(payload), None, {}, [], None).load()
    assert not target.exists()
    pickle.loads(payload)  # the payload is live: plain pickle runs it
    assert target.exists()


@pytest.mark.parametrize("module, name", [
    ("os", "system"), ("builtins", "eval"), ("builtins", "getattr"), ("builtins", "__import__"),
    ("subprocess", "Popen"), ("functools", "partial"), ("numpy", "memmap"), ("numpy", "load"),
    ("jax._src.lru_cache", "LRUCache"), ("collections", "namedtuple"), ("antigravity", "fly"),
    ("jax._src.named_sharding", "__globals__"), ("jax", "jit"),
])
def test_globals_outside_the_allow_list_are_refused(module, name, tmp_path, no_xla):
    payload = f"c{module}\n{name}\n(tR.".encode()  # protocol 0: GLOBAL, then call it with no arguments
    with pytest.raises(pickle.UnpicklingError, match=f"refusing to load global {module}.{name}"):
        _load(payload)
    assert "antigravity" not in sys.modules  # a payload never triggers an import


@dataclasses.dataclass
class _RegisteredNode:
    w: object


def test_policy_accepts_jax_payload_kinds_and_user_tree_nodes():
    import jax
    import ml_dtypes
    from jax._src.lib import xla_client as xc

    assert policy._resolve_global("jax._src.named_sharding", "_unpickle_named_sharding") is not None
    assert policy._resolve_global("jaxlib._jax", "DeviceList") is xc.DeviceList
    assert policy._resolve_global("ml_dtypes", "bfloat16") is ml_dtypes.bfloat16
    assert policy._resolve_global("ml_dtypes", "int4") is ml_dtypes.int4          # a dtype's scalar type, by name
    with pytest.raises(pickle.UnpicklingError, match="not in JAX's executable format"):
        policy._resolve_global("numpy", "float16")                                 # JAX's payloads never name it
    assert policy._resolve_global("builtins", "frozenset") is frozenset            # a defaultdict's factory
    assert policy._resolve_global(__name__, "MODULE_NT") is MODULE_NT              # a user namedtuple
    with pytest.raises(pickle.UnpicklingError, match="not on the allow-list"):
        policy._resolve_global(__name__, "_RegisteredNode")
    if not policy._is_registered_pytree_node(_RegisteredNode):
        jax.tree_util.register_dataclass(_RegisteredNode, data_fields=["w"], meta_fields=[])
    assert policy._resolve_global(__name__, "_RegisteredNode") is _RegisteredNode   # a registered pytree node
    with pytest.raises(pickle.UnpicklingError, match="not on the allow-list"):
        policy._resolve_global("jax._src.tree_util", "tree_map")                   # functions only by name


def test_not_serializable_without_an_unloaded_executable():
    class Fake:
        _executable = object()
    with pytest.raises(S.NotSerializable) as info:
        S.serialize_compiled(Fake())
    assert info.value.reason == "Compilation does not support serialization"


def test_executable_follows_the_pickle_frame_and_payloads_in_jax_format_still_load():
    """The payload keeps the executable after a kilobyte pickle frame (scanned and unpickled without copying the
    executable); a payload in JAX's own format (entries written before) loads to the same answers; a frame and
    an executable that disagree are refused before XLA."""
    import jax
    import numpy as np
    from jax.experimental.serialize_executable import _JaxPjrtPickler

    x = np.arange(4.0, dtype=np.float32)
    compiled = jax.jit(lambda v: jnp_sin(v) * 2).lower(x).compile()
    payload, placement = S.serialize_compiled(compiled)
    frame, tail = payload_layout.split(payload)
    assert payload[:8] == payload_layout.MAGIC and len(payload) == 16 + len(frame) + len(tail)
    args_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
    with io.BytesIO() as f:  # what xlakit wrote before the split layout: JAX's pickle, the executable inside
        _JaxPjrtPickler(f).dump((compiled._executable._unloaded_executable, args_flat, compiled._no_kwargs, in_tree,
                                 compiled.out_tree))
        jax_format = f.getvalue()
    scan = policy._scan_payload(payload)
    assert scan.exec_count == 1 and scan.tail is not None and scan.executable() == bytes(tail)
    assert scan.frame == frame and b"exec" in frame and bytes(tail)[:64] not in frame
    assert policy._scan_payload(jax_format).exec_bytes == bytes(tail)  # the same executable, inside
    want = np.asarray(compiled(x))
    assert np.array_equal(np.asarray(_load(payload)(x)), want)
    assert np.array_equal(np.asarray(_load(memoryview(payload))(x)), want)
    assert np.array_equal(np.asarray(_load(jax_format)(x)), want)

    with pytest.raises(pickle.UnpicklingError, match="names an executable of"):
        _load(payload_layout.join(frame, bytes(tail)[:-1]))
    with pytest.raises(pickle.UnpicklingError, match="unknown persistent id"):  # JAX's frame in the split layout
        _load(payload_layout.join(jax_format, b""))
    with pytest.raises(pickle.UnpicklingError, match="does not fit"):
        _load(payload[:8] + (len(payload)).to_bytes(8, "big") + payload[16:])
    with pytest.raises(pickle.UnpicklingError, match="truncated payload"):
        _load(payload[:12])


def jnp_sin(v):
    import jax.numpy as jnp

    return jnp.sin(v)
