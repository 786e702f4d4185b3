"""The restricted unpickler admits exactly what JAX's executable format contains, by name, and calls only what the
format calls.

Faults proved absent: the policy admitted globals by rule (any Enum / Sharding / AbstractValue subclass of
jax, any NumPy scalar or dtype class) and imported any jax/jaxlib/numpy/ml_dtypes module a payload named (a
module import runs its code), so a payload could call library constructors with its own arguments or trigger
imports. Now the policy (``FORMAT_GLOBALS``) is the set of globals recorded from the payloads JAX actually writes
for real programs (single device, sharded, donated, pytrees, every dtype, typed keys, shard_map ...), each
marked as called or only named; a crafted payload naming or calling anything else is refused before any import.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import worker_env

from xlakit._jax import unpickle_policy as policy

WORKER = Path(__file__).with_name("payload_globals_worker.py")


@pytest.fixture(scope="module")
def recorded():
    env = worker_env({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    proc = subprocess.run([sys.executable, str(WORKER)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_policy_equals_the_globals_of_the_payloads_jax_writes(recorded):
    assert recorded["devices"] == 4
    seen: dict[tuple[str, str], set[str]] = {}
    for globals_ in recorded["programs"].values():
        for module, name, how in globals_:
            seen.setdefault((module, name), set()).add(how)
    # The user's own node types (the worker's namedtuple and registered dataclass) and a defaultdict's factory
    # are only named, never called.
    nodes = {k: v for k, v in seen.items() if k not in policy.FORMAT_GLOBALS}
    assert nodes == {("__main__", "Pair"): {"value"}, ("__main__", "Params"): {"value"},
                     ("builtins", "list"): {"value"}}   # defaultdict(list)
    jax_written = {k: v for k, v in seen.items() if k in policy.FORMAT_GLOBALS}
    assert all(len(v) == 1 for v in jax_written.values()), "a global both called and only named"
    expected = policy.format_globals(recorded["jax"])
    assert {k: v.pop() for k, v in jax_written.items()} == expected


def test_every_real_payload_loads_through_the_policy(recorded):
    assert recorded["loads"] and set(recorded["loads"].values()) == {"loaded"}, recorded["loads"]


def _refused(payload: bytes, match: str) -> None:
    with pytest.raises(pickle.UnpicklingError, match=match):
        policy._scan_payload(payload)


@pytest.mark.parametrize("module", ["numpy.f2py", "jax.experimental.jax2tf", "jax.experimental.sparse.linalg",
                                    "ml_dtypes._finfo_sidecar"])
def test_a_payload_naming_another_module_is_refused_before_any_import(module):
    if module in sys.modules:
        pytest.skip(f"{module} is already imported in this process")
    _refused(f"c{module}\nanything\n(tR.".encode(), f"refusing to load global {module}.anything")
    assert module not in sys.modules


@pytest.mark.parametrize("module, name", [
    ("jax._src.tree_util", "default_registry"),       # format: named only
    ("numpy", "ndarray"),                             # numpy.ndarray((2**40,)) would allocate a terabyte
    ("collections", "OrderedDict"),
    ("jax._src.random.threefry2x32", "threefry_seed"),
    ("ml_dtypes", "bfloat16"),
])
def test_a_payload_calling_what_the_format_only_names_is_refused(module, name):
    _refused(f"c{module}\n{name}\n(I1099511627776\ntR.".encode(), f"refusing to call global {module}.{name}")


def test_library_classes_outside_the_format_are_refused_even_from_jax():
    _refused(b"cjax._src.numpy.linalg\nQRResult\n(I1\nI2\ntR.", "refusing to call")  # named, never called
    _refused(b"cjax._src.interpreters.mlir\nLoweringResult\n.", "not in JAX's executable format")  # not named
    for module, name in [("jax._src.sharding_impls", "PositionalSharding"), ("jax._src.core", "DShapedArray"),
                         ("jax._src.mesh", "ResourceEnv"), ("numpy", "memmap"), ("jax._src.dtypes", "ExtendedDType")]:
        _refused(f"c{module}\n{name}\n(tR.".encode(), "not in JAX's executable format")


def test_a_user_namedtuple_is_named_but_never_called():
    _refused(f"c{__name__}\n_Point\n(I1\nI2\ntR.".encode(), f"refusing to call global {__name__}._Point")
    scan = policy._scan_payload(f"c{__name__}\n_Point\n.".encode())   # named, as a treedef names its node type
    assert scan.globals == {(__name__, "_Point")}


class _Point(tuple):  # what typing.NamedTuple makes, without importing typing's machinery here
    __slots__ = ()
    _fields = ("x", "y")

    @classmethod
    def _make(cls, it):
        return cls(it)
