"""Hypothesis drives the store fuzzer: mutated entries, headers and file kinds never get trusted, never raise an
undocumented exception, never hang, and never change a file outside the cache folder (harness and checks in
benchmarks/fuzz_store.py, which runs 10,000+ cases)."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_SPEC = importlib.util.spec_from_file_location(
    "fuzz_store", Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_store.py")
fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules["fuzz_store"] = fuzz
_SPEC.loader.exec_module(fuzz)

_NUMBERS = st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e308", b"-1e400", b"9" * 400, b"1" * 20,
                            b"-0", b"3.5", b"true", b"null", b'"x"', b"[]", b"{}"])
_FIELDS = st.sampled_from([b"key", b"partition", b"created", b"compile_s", b"payload_bytes", b"raw_bytes",
                           b"format_version", b"payload_sha256", b"name", b"environment"])
_HEADERS = st.one_of(
    st.integers(1, 200_000).map(lambda d: b"[" * d + b"]" * d),
    st.integers(1, 5_000).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
    st.lists(st.tuples(_FIELDS, _NUMBERS), max_size=8).map(
        lambda kv: b"{" + b",".join(b'"%s":%s' % (k, v) for k, v in kv) + b"}"),
    st.binary(max_size=200),
)


@pytest.fixture(scope="module")
def workspace():
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    old = {k: os.environ.get(k) for k in ("XLAKIT_CACHE_SECRET", "XLAKIT_CONFIG_DIR")}
    with tempfile.TemporaryDirectory(prefix="xlakit-fuzz-test-", dir=shm) as tmp:
        os.environ["XLAKIT_CACHE_SECRET"] = fuzz.SECRET.decode()
        os.environ["XLAKIT_CONFIG_DIR"] = str(Path(tmp) / "config")
        yield fuzz.build_template(Path(tmp)), Path(tmp) / "case"
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=st.builds(fuzz.Case, kind=st.sampled_from(fuzz.KINDS), target=st.sampled_from(fuzz.TARGETS),
                      position=st.integers(0, 4095), bit=st.integers(0, 7), header=_HEADERS,
                      ops_seed=st.integers(0, 2**31 - 1)))
def test_mutated_cache_is_never_trusted_never_hangs_never_harms(workspace, case):
    template, workdir = workspace
    result = fuzz.run_case(case, template, workdir)
    assert result.findings == [], f"{case.kind}: {result.findings}"
    assert result.operations >= 4


def test_the_fuzzer_sees_a_reintroduced_fault(workspace, monkeypatch):
    """The harness is not blind: following links again (as before) is reported as a change outside the folder."""
    from xlakit.store import quarantine

    def follows_links(root):
        for dirpath, _, files in os.walk(root / "quarantine", followlinks=True):
            for name in files:
                os.unlink(os.path.join(dirpath, name))
        return 0

    monkeypatch.setattr(quarantine, "clear_quarantine", follows_links)
    template, workdir = workspace
    findings: list[str] = []
    for seed in range(20):  # the first seeds already find it; stop at the first finding
        findings += fuzz.run_case(fuzz.Case(kind="link_quarantine", ops_seed=seed), template, workdir).findings
        if findings:
            break
    assert "a file outside the cache folder changed" in findings


def _remote_fuzzer():
    pytest.importorskip("s3fs")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fuzz_remote

    return fuzz_remote


def test_hostile_object_store_never_hangs_a_reader_and_is_never_trusted():
    """A server that hangs, drips, ignores Range, lies about lengths, answers garbage or another object's bytes,
    holding forged, damaged, foreign and renamed objects: no read or upload outlives its deadline, no read returns
    anything but the genuine object of its key, no housekeeping deletes what is not provably ours
    (benchmarks/fuzz_store.py --ops 10000 runs the same harness 10,000 times). 100 operations meet every server
    behaviour, hangs and drips included (seed 7). The bound is the 0.5 s deadline plus 3 s of slack: a loaded
    machine (the suite runs in parallel) took 1.8 s for an honest read, while a reader that ignored the deadline
    would wait forever on the hanging server."""
    fz = _remote_fuzzer()
    report = fz.run(100, seed=7, deadline_s=0.5, slack_s=3.0)
    assert report.findings == [], report.findings
    assert (report.over_bound, report.trusted_wrong, report.wrongly_deleted) == (0, 0, 0)
    assert report.by_kind["read/hang"] and report.by_kind["read/drip"]  # the hostile reads were really tried
    assert report.operations == 100 and report.served > 10  # the honest reads do get served


def test_the_remote_fuzzer_sees_a_reintroduced_fault(monkeypatch):
    """The harness is not blind: a verifier that accepts every blob is caught serving wrong objects."""
    fz = _remote_fuzzer()
    monkeypatch.setattr(fz, "verify_object", lambda blob, partition, key, secret: None)
    report = fz.run(30, seed=3, deadline_s=0.5, slack_s=1.0)
    assert report.trusted_wrong > 0
