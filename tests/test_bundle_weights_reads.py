"""A weights file that changes under its reader is a clear error, never a signal.

Fault proved: ``load_bundle`` read ``weights.safetensors`` through a memory map (safetensors' ``safe_open``);
a file truncated while it was read (an export replacing it in place, a copy still being written) made the next
touched page lie past the end of the file, and the kernel killed the process with SIGBUS. The file is now read
with plain reads checked against its header and its size / modification time.
"""

from __future__ import annotations

import json
import sys

import fresh_process
import ml_dtypes
import numpy as np
import pytest
from conftest import worker_env

from xlakit.bundle.errors import WeightsError
from xlakit.bundle.weights import read_weight_specs, read_weights, weights_file_bytes

TRUNCATED_WHILE_LOADING = r'''
import json, os, sys
import numpy as np
import xlakit
from xlakit.bundle import weights
path = sys.argv[1]
params = {"a": np.ones((256, 256), np.float32), "b": np.full((256, 256), 2.0, np.float32)}
xlakit.export_bundle(lambda p, x: x @ p["a"] + p["b"].sum(0), params, np.ones((2, 256), np.float32), path,
                     batch_sizes=(2,))
wfile = os.path.join(path, "weights.safetensors")

class Truncating:
    """The real file; after the first tensor is read, another writer truncates the file on disk."""
    def __init__(self, f):
        self.f = f
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def readinto(self, buf):
        n = self.f.readinto(buf)
        os.truncate(wfile, 4096)
        return n

real_open = open
weights.open = lambda p, mode: Truncating(real_open(p, mode))
try:
    xlakit.load_bundle(path, background=False, progress=False)
    print(json.dumps({"raised": None}))
except xlakit.bundle.WeightsError as e:
    print(json.dumps({"raised": type(e).__name__, "message": str(e)}))
'''


def test_weights_truncated_while_load_bundle_reads_them_raise_in_a_live_process(tmp_path):
    proc = fresh_process.run([sys.executable, "-c", TRUNCATED_WHILE_LOADING, str(tmp_path / "b")], env=worker_env(),
                             capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"process ended with {proc.returncode} (negative: a signal)\n{proc.stderr[-2000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["raised"] == "WeightsError"
    assert "changed while it was read" in report["message"] and "weights.safetensors" in report["message"]


def _write(path, tensors) -> None:
    path.write_bytes(weights_file_bytes(tensors))


def test_plain_reads_give_what_was_written_for_every_stored_dtype(tmp_path):
    from safetensors.numpy import load

    tensors = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3), "bf16": np.full(4, 1.5, ml_dtypes.bfloat16),
               "i8": np.array([-3, 7], np.int8), "flag": np.array([True, False]), "empty": np.zeros((0, 5), np.int64),
               "scalar": np.array(2.5, np.float64), "c64": np.array([1 + 2j], np.complex64)}
    _write(tmp_path / "w.safetensors", tensors)
    got = read_weights(tmp_path / "w.safetensors")
    want = dict(load(weights_file_bytes({k: v for k, v in tensors.items() if k != "bf16"})), bf16=tensors["bf16"])
    assert sorted(got) == sorted(want) == sorted(tensors)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name])
    specs = read_weight_specs(tmp_path / "w.safetensors")
    assert specs["bf16"].dtype == "bfloat16" and specs["f32"].shape == (2, 3) and specs["empty"].shape == (0, 5)


def test_dtypes_safetensors_has_no_code_for_come_back_with_their_dtype(tmp_path):
    """complex128 and the float8 kinds safetensors cannot name are stored as raw bytes with their dtype and shape in
    __metadata__; the fnuz/e8m0 kinds it names are read back (they were a "malformed entry" before). Metadata that
    claims another size, or a dtype outside the list, is a WeightsError."""
    tensors = {"c128": np.array([[1 + 2j, -3j]], np.complex128),
               "e3m4": np.linspace(0, 1, 5).astype(ml_dtypes.float8_e3m4), "e4m3": np.array(1.5, ml_dtypes.float8_e4m3),
               "fnuz": np.arange(3).astype(ml_dtypes.float8_e4m3fnuz),
               "e8m0": np.array([1, 4], ml_dtypes.float8_e8m0fnu), "b11": np.ones((2, 2), ml_dtypes.float8_e4m3b11fnuz)}
    f = tmp_path / "w.safetensors"
    f.write_bytes(weights_file_bytes(tensors))
    got, specs = read_weights(f), read_weight_specs(f)
    for name, want in tensors.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert got[name].tobytes() == want.tobytes(), name
        assert (specs[name].dtype, specs[name].shape) == (want.dtype.name, want.shape), name

    header = json.loads(f.read_bytes()[8:8 + int.from_bytes(f.read_bytes()[:8], "little")])
    for lie, message in (({"dtype": "float8_e3m4", "shape": [6]}, "raw bytes do not hold float8_e3m4"),
                         ({"dtype": "object", "shape": [5]}, "no dtype this reader knows")):
        raw = json.loads(header["__metadata__"]["xlakit.raw_dtypes"])
        header["__metadata__"]["xlakit.raw_dtypes"] = json.dumps({**raw, "e3m4": lie})
        data = f.read_bytes()[8 + int.from_bytes(f.read_bytes()[:8], "little"):]
        (tmp_path / "lie.safetensors").write_bytes(_raw(header, 0) + data)
        with pytest.raises(WeightsError, match=message):
            read_weight_specs(tmp_path / "lie.safetensors")


def test_a_truncated_or_malformed_file_names_what_is_wrong(tmp_path):
    good = weights_file_bytes({"w": np.ones((64, 64), np.float32)})
    f = tmp_path / "w.safetensors"
    cases = {
        "short": (good[:5], "shorter than the 8-byte header length"),
        "header past the end": (good[:40], "exceeds the file"),
        "data cut": (good[:-100], r"do not fit shape \[64, 64\] of float32 within the file.s 16284 data bytes"),
        "not json": ((8).to_bytes(8, "little") + b"{not js}" + b"\0" * 8, "header is not JSON"),
        "bad dtype": (_raw({"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, 1), "malformed entry"),
    }
    for label, (data, message) in cases.items():  # label: which damage, shown when it fails
        f.write_bytes(data)
        with pytest.raises(WeightsError, match=message):
            read_weights(f)
            pytest.fail(label)
        with pytest.raises(WeightsError):
            read_weight_specs(f)


def _raw(header: dict, data_bytes: int) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + b"\0" * data_bytes


def test_a_file_rewritten_while_read_is_refused(tmp_path, monkeypatch):
    import os

    from xlakit.bundle import weights

    f = tmp_path / "w.safetensors"
    _write(f, {"a": np.ones(1000, np.float32), "b": np.ones(1000, np.float32)})
    real_fstat, calls = os.fstat, []

    def fstat_after_a_rewrite(fd):  # the second look (after reading) sees another size
        st = real_fstat(fd)
        calls.append(st)
        if len(calls) == 3:  # _open_regular, before the read, after it
            with open(f, "ab") as out:
                out.write(b"\0" * 10)
            st = real_fstat(fd)
        return st

    monkeypatch.setattr(weights.os, "fstat", fstat_after_a_rewrite)
    with pytest.raises(WeightsError, match="changed while it was read"):
        read_weights(f)


def test_a_shape_whose_element_count_overflows_64_bits_is_a_weights_error(tmp_path):
    """Fault: the size check multiplied the shape in int64, so ``[2**32, 2**32]`` wrapped to 0 elements and a
    tensor with ``data_offsets [0, 0]`` passed, to fail later as a bare numpy "array is too big"."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}).encode()
    path = tmp_path / "weights.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(WeightsError, match="do not fit shape"):
        read_weights(path)
