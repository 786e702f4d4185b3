"""On a platform whose ``memory_analysis()`` carries no buffer assignment (TPU), an entry the cache compiled with
XLA's dump keeps that dump in its authenticated header (``assignment_zstd``), so a fresh process that LOADS the
program answers ``memory.peak`` by decoding, without compiling it again with the dump (measured on the TPU v5e,
2026-12-06, before this was kept: the warm process's first ``peak()`` compiled for 3.2 s a step that loaded in
0.44 s). Here on CPU with the TPU's rules from the platform table and ``memory_analysis()`` without its assignment,
as recorded on the TPU; each process is a fresh one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import fresh_process

_CHILD = r'''
import dataclasses, json, sys, types, warnings
import jax, jax.numpy as jnp
import xlakit
from xlakit import memory
from xlakit._jax import compiler_dump, platforms
from xlakit.memory import _analysis

platforms._TABLE["cpu"] = dataclasses.replace(platforms.CPU, assignment_in_memory_analysis=False,
                                              capture_assignment_on_miss=True)  # the TPU's rules
real = _analysis.memory_analysis
_analysis.memory_analysis = lambda c: types.SimpleNamespace(**{
    **{f: getattr(real(c), f) for f in dir(real(c)) if not f.startswith("_")},
    "serialized_buffer_assignment_proto": b""})  # as the TPU answers
dumps = []
dump_compile = compiler_dump.compile_with_assignment
compiler_dump.compile_with_assignment = lambda *a, **k: dumps.append(1) or dump_compile(*a, **k)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    xlakit.enable_cache(sys.argv[1])

def program(w, x):
    return jnp.tanh(x @ w).sum(0) * 3.0

compiled = jax.jit(program).lower(jnp.ones((64, 64)), jnp.ones((16, 64))).compile()
p = memory.peak(compiled)
print(json.dumps({"events": [e.kind for e in xlakit.events.log().events() if e.kind in ("hit", "miss", "store")
                             and e.source == "xlakit"],
                  "dump_compiles": len(dumps), "peak": p.total_bytes, "step": p.step,
                  "rows": len(p.buffers)}))
'''


def _run(folder: Path, code: str = _CHILD) -> dict:
    done = fresh_process.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True,
                             timeout=240, env=None)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_loaded_program_answers_peak_from_the_dump_kept_with_its_entry(tmp_path):
    cold = _run(tmp_path / "cache")
    assert "miss" in cold["events"] and "store" in cold["events"] and cold["dump_compiles"] == 0
    warm = _run(tmp_path / "cache")
    assert warm["events"] and set(warm["events"]) == {"hit"}  # every program loaded, none compiled
    assert warm["dump_compiles"] == 0  # decoded from the entry's header, not compiled again with the dump
    assert (warm["peak"], warm["step"], warm["rows"]) == (cold["peak"], cold["step"], cold["rows"])


def test_a_header_without_the_dump_or_with_a_damaged_one_compiles_with_the_dump_as_before(tmp_path):
    """Entries of xlakit before this field, and a field that does not decompress (it is authenticated, so only a
    writer holding the key could make one) fall back to the compile with the dump."""
    from xlakit._jax import dump_memo
    from xlakit.cache import entry

    proto = b"\x0a\x00" + b"\x1a\x02\x08\x01" * 1000  # an HloProto: a module and a buffer assignment
    packed = entry.pack_assignment(proto)
    assert entry.unpack_assignment(packed) == proto
    assert entry.unpack_assignment(packed[:-8] + "AAAAAAAA") is None and entry.unpack_assignment(None) is None
    assert entry.pack_assignment(None) is None and entry.assignment_fields(object()) == {}

    class Loaded:
        fingerprint = b"fp-later"

    entry.keep_assignment({"assignment_zstd": packed}, Loaded())
    assert dump_memo._lookup([Loaded.fingerprint]) == proto  # decompressed when first asked
    assert dump_memo.of_executable(Loaded()) is None  # not captured here: a new entry never carries it on
    entry.keep_assignment({"assignment_zstd": "not base64 zstd"}, type("L", (), {"fingerprint": b"fp-bad"})())
    assert dump_memo._memo.get(b"fp-bad") is not None  # kept unread ...
    assert dump_memo._lookup([b"fp-bad"]) is None and b"fp-bad" not in dump_memo._memo  # ... and dropped once read
    # decompresses, but holds no buffer assignment (only a writer with the key could make it): dropped the same way
    entry.keep_assignment({"assignment_zstd": entry.pack_assignment(bytes(range(256)) * 40)},
                          type("L", (), {"fingerprint": b"fp-junk"})())
    assert dump_memo._lookup([b"fp-junk"]) is None and b"fp-junk" not in dump_memo._memo


@pytest.mark.parametrize("size", [0, 5])
def test_an_entry_keeps_the_dump_only_when_the_compile_captured_one(size, tmp_path):
    from xlakit._jax import dump_memo
    from xlakit.cache import entry

    class Executable:
        fingerprint = f"fp-{size}".encode()

    dump_memo.remember(b"\x1a\x03xyz", Executable.fingerprint)  # filed from elsewhere (a Lowered's compile): never kept
    if size:
        dump_memo.remember(b"\x1a\x03abc" * size, Executable.fingerprint, ("captured", Executable.fingerprint))
    fields = entry.assignment_fields(Executable())
    assert bool(fields) == bool(size)
    if size:
        assert entry.unpack_assignment(fields["assignment_zstd"]) == b"\x1a\x03abc" * size


def test_the_dump_is_left_out_where_it_would_take_the_header_past_the_envelopes_limit(monkeypatch):
    from xlakit._jax import dump_memo
    from xlakit.cache import entry
    from xlakit.store import envelope

    class Executable:
        fingerprint = b"fp-big-header"

    dump_memo.remember(bytes(range(256)) * 64, ("captured", Executable.fingerprint))
    small = entry.assignment_fields(Executable(), {"name": "f"})
    assert small and envelope.seal({"name": "f", **small}, b"x", b"k" * 32)
    big = {"name": "f", "module_text_zstd": "A" * (envelope.MAX_HEADER_BYTES - entry.HEADER_ROOM
                                                   - len(small["assignment_zstd"]))}
    assert entry.assignment_fields(Executable(), big) == {}


def test_the_memo_counts_a_kept_dump_once_decompressed(monkeypatch):
    """A kept dump counts only its compressed text until read; decompressed, the memo's byte bound applies."""
    from xlakit._jax import dump_memo
    from xlakit.cache import entry

    monkeypatch.setattr(dump_memo, "_memo", type(dump_memo._memo)())
    monkeypatch.setattr(dump_memo, "MEMO_BYTES", 3_000_000)
    proto = b"\x0a\x00" + b"\x1a\x02\x08\x01" * 250_000  # 1 MB, compresses to a few KB
    for i in range(5):
        entry.keep_assignment({"assignment_zstd": entry.pack_assignment(proto)},
                              type("L", (), {"fingerprint": f"fp-{i}".encode()})())
    assert dump_memo._held_bytes() < 100_000
    found = []
    for i in range(5):
        found.append(dump_memo._lookup([f"fp-{i}".encode()]))
        assert dump_memo._held_bytes() <= 3_000_000  # the oldest go, read or not
    assert found[:2] == [proto, proto] and set(found) <= {proto, None}


_OPTIONS_CHILD = _CHILD.split("def program")[0] + r'''
def f(x):
    for i in range(4):
        x = jnp.tanh(x * 1.5 + i) @ x
    return x.sum()

lowered = jax.jit(f).lower(jnp.ones((256, 256)))
plain, other = lowered.compile(), lowered.compile(compiler_options={"xla_disable_all_hlo_passes": True})
print(json.dumps({"plain": memory.peak(plain).total_bytes, "other": memory.peak(other).total_bytes}))
'''


@pytest.mark.parametrize("capture", ["0", "1"])
def test_a_program_compiled_with_its_own_compiler_options_is_described_as_compiled(capture, tmp_path, monkeypatch):
    """``Lowered.compile(compiler_options=...)`` makes another program (here: 1.8 MB at the peak, not 262 kB); the
    compile with the dump repeats those options, and no dump of the plain program is filed under the other one's
    fingerprint (a red team found the plain program's answer given for both, and carried into the cache entry).
    The answers equal those from CPU's own assignment (memory_analysis() carries it)."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    def f(x):
        for i in range(4):
            x = jnp.tanh(x * 1.5 + i) @ x
        return x.sum()

    lowered = jax.jit(f).lower(jnp.ones((256, 256)))
    want = {"plain": memory.peak(lowered.compile()).total_bytes,
            "other": memory.peak(lowered.compile(compiler_options={"xla_disable_all_hlo_passes": True})).total_bytes}
    assert want["other"] > 2 * want["plain"]
    monkeypatch.setenv("XLAKIT_CAPTURE_ASSIGNMENT", capture)
    assert _run(tmp_path / "cache", _OPTIONS_CHILD) == want
    assert _run(tmp_path / "cache", _OPTIONS_CHILD) == want  # loaded from the entries
