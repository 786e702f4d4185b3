"""Round four, a settings red team (2026-12-06): each bad value names its setting, and nothing is lost — an event
log poisoned by a non-event, ``report --out`` and ``--trace`` naming one file, ``demo --keep-cache`` under a file,
a blank ``XLAKIT_CONFIG_DIR``, ``prune --older-than 30`` read as seconds, report and trace arguments, live-array
backends, a bundle's ``ready()`` for a size never exported, huge numbers."""

from __future__ import annotations

import numpy as np
import pytest

import xlakit
from xlakit import events
from xlakit.cli import main


def test_an_event_log_refuses_what_is_no_event_and_stays_whole(tmp_path):
    log = events.EventLog()
    log.emit("hit", name="f")
    for call in (lambda: log.append(None), lambda: log.extend([log.events()[0], "abc"])):
        with pytest.raises(TypeError, match="nothing was added"):
            call()
    assert len(log.events()) == 1 and log.save(tmp_path / "e.jsonl") == 1  # save() failed for good before
    with pytest.raises(TypeError, match="subscribe.*function of one event"):
        log.subscribe(None)
    with pytest.raises(ValueError, match="'duration_s' must be 0 or more and below 2\\*\\*63"):
        log.emit("compile", name="f", duration_s=10**400)  # was a bare OverflowError
    with pytest.raises(ValueError, match="save_trace\\(path\\): the path is empty"):
        log.save_trace("")
    with pytest.raises(IsADirectoryError, match="is a folder; give a file in it"):
        log.save_trace(tmp_path)
    with pytest.raises(ValueError, match="pid=.*from 0 to 2\\*\\*31 - 1"):
        log.save_trace(tmp_path / "t.json", pid=float("inf"))


def test_cli_settings_that_lost_data_or_were_misread(tmp_path, capsys, monkeypatch):
    events_file = tmp_path / "e.jsonl"
    events.EventLog().save(events_file)
    same = tmp_path / "same.html"
    code = main(["report", "--events", str(events_file), "--out", str(same), "--trace", str(same)])
    assert code == 2 and "name the same file" in capsys.readouterr().err and not same.exists()  # was overwritten
    (tmp_path / "afile").write_text("x")
    code = main(["demo", "--quick", "--keep-cache", str(tmp_path / "afile" / "sub")])
    err = capsys.readouterr().err
    assert code == 2 and "is a file, so the folder cannot be made there" in err and "Traceback" not in err
    bucket = (tmp_path / "bucket").as_uri()
    for age in ("30", "1M"):
        code = main(["cache", "prune", "--remote", bucket, "--older-than", age, "--dry-run"])
        assert code == 2 and "unit in lower case" in capsys.readouterr().err  # "30" was 30 seconds
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", " ")
    from xlakit.store.secret import SecretUnavailable, secret_path

    with pytest.raises(SecretUnavailable, match="XLAKIT_CONFIG_DIR is set but empty"):
        secret_path()  # was a folder ' ' in each working directory: one key per directory


def test_report_and_live_array_arguments_name_the_setting(tmp_path):
    from xlakit import report
    from xlakit.memory import live_arrays

    for kwargs, error, words in [({"include_plotlyjs": "CDN"}, ValueError, "include_plotlyjs"),
                                 ({"allocator": "no"}, TypeError, "allocator"),
                                 ({"log": "events.jsonl"}, TypeError, "log must be an xlakit.events.EventLog"),
                                 ({"devices": -1}, TypeError, "devices must be a list"),
                                 ({"title": None}, TypeError, "title must be a str")]:
        with pytest.raises(error, match=words):
            report.build(**kwargs)
    with pytest.raises(ValueError, match="path is empty"):
        report.write("")
    for backend, error in ((1.5, TypeError), (True, TypeError), ("", ValueError), ("abc", ValueError)):
        with pytest.raises(error, match="backend"):
            live_arrays(backend=backend)


def test_a_bundles_ready_refuses_a_size_never_exported_and_huge_numbers_are_said_too_large(tmp_path):
    from xlakit._units import parse_int

    xlakit.export_bundle(lambda p, x: x @ p["w"], {"w": np.ones((3, 4), np.float32)}, np.ones((2, 3), np.float32),
                         tmp_path / "b", batch_sizes=(2,))
    loaded = xlakit.load_bundle(tmp_path / "b", progress=False, background=False)
    assert loaded.ready(2)
    for size, variant in ((8, "default"), (2, "typo"), (True, "default")):
        with pytest.raises(KeyError, match="exports no program"):
            loaded.ready(size, variant)  # False before: a polling loop never ended
    with pytest.raises(ValueError, match="max_workers must be from 1 to 4096"):
        xlakit.load_bundle(tmp_path / "b", progress=False, background=False, max_workers=10**400)
    with pytest.raises(ValueError, match="too large \\(at most 18 digits\\)"):
        parse_int("1" * 23, "--workers")
    from xlakit.memory import parse_memory_stats

    assert parse_memory_stats({"bytes_in_use": 10**400}).bytes_in_use is None  # was a bare OverflowError
