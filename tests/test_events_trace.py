"""Chrome trace-event export of an event log (``EventLog.save_trace``, ``xlakit report --trace``).

Faults these tests catch: a file trace viewers refuse (not JSON, NaN/Infinity, missing ``ph``/``ts``/``pid``/
``tid``, a complete event without ``dur``), timestamps that are not microseconds or go backwards, a hit, miss
or store without its reason and key, lanes that are not one per function or put library helpers first, and
a CLI that writes nothing or loses the user's events.
"""

from __future__ import annotations

import json
import math

import pytest

from xlakit import events
from xlakit.cli import main


def _strict_load(path):
    def refuse(token):
        raise ValueError(f"{token} in a trace file")

    return json.loads(path.read_text(), parse_constant=refuse)


def sample_log() -> events.EventLog:
    log = events.EventLog()
    t0, m0 = 1_700_000_000.0, 500.0
    rows = [
        ("miss", "jit_step", dict(source="xlakit", reason="no entry with this key", key="jit_step-abc")),
        ("trace", "jit_step", dict(source="jax", duration_s=0.010)),
        ("lower", "jit_step", dict(source="jax", duration_s=0.020)),
        ("compile", "jit_step", dict(source="xlakit", duration_s=0.500, key="jit_step-abc")),
        ("store", "jit_step", dict(source="xlakit", key="jit_step-abc", bytes=4096)),
        ("compile", "jit_broadcast_in_dim", dict(source="jax", duration_s=0.05, origin="library")),
        ("skip", "jit_broadcast_in_dim", dict(source="xlakit", reason="compiled in 0.050 s, under 1 s",
                                              origin="library")),
        ("recompile", "jit_step", dict(source="jit", reason="x: shape float32[2] -> float32[3]",
                                       changes=[{"what": "shape", "path": "x", "before": "float32[2]",
                                                 "after": "float32[3]"}])),
        ("hit", "jit_step", dict(source="xlakit", duration_s=0.004, saved_s=0.496, key="jit_step-def")),
        ("compile", "jit_odd", dict(source="jax", duration_s=float("nan"))),  # a broken producer: no NaN out
    ]
    for i, (kind, name, fields) in enumerate(rows):
        fields.setdefault("origin", "user")
        log.emit(kind, name=name, time=t0 + i, monotonic=m0 + i, **fields)
    return log


def test_trace_file_is_valid_chrome_trace_event_json(tmp_path):
    log = sample_log()
    path = log.save_trace(tmp_path / "trace.json", pid=7, process_name="train")
    doc = _strict_load(path)
    evs = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms"
    meta = [e for e in evs if e["ph"] == "M"]
    body = [e for e in evs if e["ph"] != "M"]
    assert {"name": "process_name", "ph": "M", "pid": 7, "tid": 0, "ts": 0, "args": {"name": "train"}} in meta
    for e in body:
        assert {"name", "ph", "ts", "pid", "tid", "args"} <= set(e) and e["pid"] == 7 and e["ph"] in ("X", "i")
        assert isinstance(e["ts"], float) and math.isfinite(e["ts"])
        if e["ph"] == "X":
            assert math.isfinite(e["dur"]) and e["dur"] >= 0
        else:
            assert e["s"] == "t"
    stamps = [e["ts"] for e in body]
    assert stamps == sorted(stamps)
    # Microseconds: events 1 s apart on the monotonic clock are 1,000,000 µs apart.
    instants = {e["name"]: e for e in body if e["ph"] == "i"}
    assert instants["store"]["ts"] - instants["miss"]["ts"] == pytest.approx(4_000_000)
    # Complete events end at the event's time: the compile started 0.5 s before it ended.
    compile_ = next(e for e in body if e["ph"] == "X" and e["name"] == "compile" and e["args"]["source"] == "xlakit")
    assert compile_["dur"] == pytest.approx(500_000) and compile_["ts"] + compile_["dur"] == pytest.approx(
        instants["miss"]["ts"] + 3_000_000)
    assert {e["name"] for e in body if e["ph"] == "X"} == {"trace", "lower", "compile", "load (hit)"}
    assert instants["miss"]["args"]["reason"] == "no entry with this key"
    assert instants["miss"]["args"]["key"] == "jit_step-abc"
    assert instants["hit"]["args"]["saved_s"] == pytest.approx(0.496)
    assert instants["recompile"]["args"]["changes"][0]["path"] == "x"
    odd = [e for e in body if e["args"].get("source") == "jax" and e["name"] == "compile" and e["ph"] == "i"]
    assert len(odd) == 1  # the NaN duration became an instant, not a NaN
    # One lane per function, named, user programs sorted before library helpers.
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert sorted(names.values()) == ["jit_broadcast_in_dim [library]", "jit_odd", "jit_step"]
    by_name = {v: k for k, v in names.items()}
    assert order[by_name["jit_step"]] < order[by_name["jit_broadcast_in_dim [library]"]]
    assert {e["tid"] for e in body} == set(names)


def test_empty_log_writes_a_loadable_trace(tmp_path):
    doc = _strict_load(events.EventLog().save_trace(tmp_path / "empty.json"))
    assert [e["name"] for e in doc["traceEvents"]] == ["process_name"]


def test_report_trace_command_writes_the_events_file_as_a_trace(tmp_path, capsys):
    saved = tmp_path / "events.jsonl"
    sample_log().save(saved)
    out = tmp_path / "run.trace.json"
    assert main(["report", "--events", str(saved), "--trace", str(out)]) == 0
    assert "Chrome trace-event JSON" in capsys.readouterr().out
    doc = _strict_load(out)
    assert sum(e["ph"] != "M" for e in doc["traceEvents"]) == 11  # 10 events, and the hit also as its load span
    assert main(["report", "--trace", str(out)]) == 2  # --trace without --events: a usage error
    assert "--trace needs --events" in capsys.readouterr().err
