"""Untrusted text is data, and failures are told once.

Faults proven here:
- a bundle manifest's name carrying terminal escape sequences reached the terminal raw through
  ``xlakit bundle check`` (anyone who can write a bundle could retitle the window or clear the screen);
- a cache folder's path holding markup was pasted raw into the HTML report and a widget's status line;
- an authentic cache entry that XLA cannot deserialize (another XLA build wrote it, or it is damaged) was
  recovered — removed, compiled, stored — without telling the user, although the README promises a warning;
- a cache whose entries all belong to another environment (after a jaxlib upgrade) silently recompiled
  everything on every first start.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest

from xlakit._text.untrusted import TerminalStream, html_text, html_wrappable, terminal_text

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\u202eok\x9b"
MARKUP = "<img src=x onerror=alert(1)>"


def test_terminal_text_shows_every_control_character_as_an_escape():
    assert terminal_text(HOSTILE) == "\\x1b]0;PWNED\\x07\\x1b[2J\\u202eok\\x9b"
    assert terminal_text("a\nb\tc\rd") == "a\\x0ab\\x09c\\x0dd"  # a field stays one line
    assert terminal_text("a\nb\tc\rd", one_line=False) == "a\nb\tc\\x0dd"  # a message keeps its lines
    assert terminal_text("naïve µs → ok") == "naïve µs → ok"  # printable Unicode is untouched


def test_the_terminal_stream_keeps_line_breaks_and_progress_returns_but_no_escape(capsys):
    import sys

    stream = TerminalStream(sys.stdout)
    stream.write(f"bundle {HOSTILE}\n\r50%\n")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out
    assert out == "bundle \\x1b]0;PWNED\\x07\\x1b[2J\\u202eok\\x9b\n\r50%\n"


def test_html_text_escapes_markup_and_both_quotes():
    assert html_text(MARKUP + "'\"&") == "&lt;img src=x onerror=alert(1)&gt;&#x27;&quot;&amp;"


def _hostile_bundle(folder):
    folder.mkdir()
    manifest = {"format": "xlakit.bundle", "format_version": 2, "name": HOSTILE,
                "inputs": [{"name": "x" + HOSTILE, "shape": ["batch", 3], "dtype": "float32"}],
                "outputs": {"default": [{"name": "output", "shape": ["batch", 3], "dtype": "float32"}]},
                "batch_sizes": [1], "variants": ["default"],
                "weights": {"file": "weights.safetensors", "tensors": {}}, "platforms": ["cpu"],
                "output_trees": {"default": {"leaf": 0}}, "rows_independent": {"default": True}, "polymorphic": {}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_wrappable_html_breaks_long_tokens_at_separators_only_and_stays_escaped():
    """A narrow column wraps a pytree path before its brackets and a path after its slashes, never inside a
    name (the explorer's summary broke "Ki|B" and identifiers with ``overflow-wrap: anywhere``); markup stays
    text, and the placeholder for a break cannot be smuggled in."""
    path = "optimizer['opt_state'][0]['nu']['blocks'][2]['kernel']"
    out = html_wrappable(path)
    assert out.replace("<wbr>", "") == html_text(path) and out.count("<wbr>") == 6
    assert all(part.startswith("[") for part in out.split("<wbr>")[1:])  # each break just before a bracket
    assert html_wrappable("cell [2], line 8 (Attention.__call__) 128.0 KiB") == \
        "cell [2], line 8 (Attention.__call__) 128.0 KiB"  # spaces suffice: short tokens stay whole
    assert html_wrappable("/tmp/xlakit-notebook-abc/cpu-jaxlib0.10.2") == \
        "/<wbr>tmp/<wbr>xlakit-notebook-abc/<wbr>cpu-jaxlib0.10.2"
    hostile = html_wrappable("<b>x</b>;\ue000" * 4)  # escaped, breaks outside entities, no stray break mark
    assert hostile.replace("<wbr>", "") == html_text("<b>x</b>;" * 4) and "<b>" not in hostile
    assert all(not re.search(r"&[a-z#0-9]*$", part) for part in hostile.split("<wbr>")), hostile


def test_bundle_check_prints_a_hostile_manifest_without_raw_control_characters(tmp_path, capsys):
    from xlakit.cli import main

    main(["bundle", "check", str(_hostile_bundle(tmp_path / "b"))])
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "PWNED" in printed  # the name is shown, as data
    assert "\x1b" not in printed and "\u202e" not in printed and "\x07" not in printed


def test_a_folder_path_with_markup_is_escaped_in_the_report_and_the_memory_widget(tmp_path):
    pytest.importorskip("ipywidgets")
    import xlakit.report
    from xlakit.cache.folder import CacheFolder
    from xlakit.store import LocalStore
    from xlakit.widgets import MemoryBreakdown

    evil = tmp_path / f"c{MARKUP}"
    evil.mkdir()
    LocalStore(evil)
    page = xlakit.report.build(cache=evil, allocator=False, live=False, include_plotlyjs=False)
    assert MARKUP not in page and html_text(MARKUP) in page
    status = MemoryBreakdown(CacheFolder(evil)).status.value
    assert MARKUP not in status and html_text(MARKUP) in status


def test_an_event_log_of_hostile_names_renders_as_text():
    from xlakit.events import EventLog

    log = EventLog()
    log.emit("miss", name=MARKUP, reason=MARKUP)
    page = log._repr_html_()
    assert MARKUP not in page and page.count(html_text(MARKUP)) == 2


def _reseal_truncated(folder):
    """Re-seal every entry with the right secret but its executable cut short: authentic, unloadable."""
    import xlakit

    layer = xlakit.ExecutableCache(folder).store.layer
    resealed = 0
    for row in xlakit.ExecutableCache(folder).entries().to_dict("records"):
        got = layer.get(row["partition"], row["key"])
        header = {k: v for k, v in got.header.items()
                  if k not in ("format_version", "key_id", "payload_sha256", "payload_bytes", "raw_bytes")}
        layer.store.delete(row["partition"], row["key"])
        resealed += layer.put(row["partition"], row["key"], header, bytes(got.payload)[: len(got.payload) // 2]).stored
    return resealed


def test_an_authentic_entry_xla_cannot_load_is_replaced_with_one_warning(tmp_path):
    import jax
    import jax.numpy as jnp

    import xlakit

    def told_once(x):
        return jnp.tanh(x) * 3.0

    x = jnp.arange(4.0)
    folder = tmp_path / "cache"
    _, first = xlakit.ExecutableCache(folder).compile(jax.jit(told_once), x)
    assert first.kind == "store" and _reseal_truncated(folder) == 1

    cache = xlakit.ExecutableCache(folder)
    with warnings.catch_warnings(record=True) as seen, xlakit.events.record() as log:
        warnings.simplefilter("always")
        compiled, second = cache.compile(jax.jit(told_once), x)
        _, again = xlakit.ExecutableCache(folder).compile(jax.jit(told_once), x)  # the replacement loads
    assert second.kind == "store" and again.kind == "hit"
    kinds = [e.kind for e in log.events() if e.name == "jit_told_once" and e.source == "xlakit"]
    assert kinds[:1] == ["load_error"] and "store" in kinds
    messages = [str(w.message) for w in seen if "could not load the cached program" in str(w.message)]
    assert len(messages) == 1 and "jit_told_once" in messages[0]
    assert jnp.allclose(compiled(x), told_once(x))


def test_a_cache_holding_only_other_environments_says_why_everything_compiles(tmp_path):
    import jax
    import jax.numpy as jnp

    import xlakit

    folder = tmp_path / "cache"
    cache = xlakit.ExecutableCache(folder)
    old = folder / "cpu-jaxlib0.0.1-x86_64-avx2-00000000"  # what an older jaxlib left behind
    old.mkdir(mode=0o700, parents=True)
    (old / "jit_f-0123.xlk").write_bytes(b"an entry of another environment")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cache.compile(jax.jit(lambda v: v + 1), jnp.ones(2))
        cache.compile(jax.jit(lambda v: v * 2), jnp.ones(2))
    told = [str(w.message) for w in seen if "other environment" in str(w.message)]
    assert len(told) == 1 and old.name in told[0] and "cache clear --partition" in told[0]


def test_reprs_and_text_tables_show_control_characters_as_escapes():
    from xlakit._text.table import Column, Table
    from xlakit.events import Event

    assert "\x1b" not in repr(Event("miss", name=HOSTILE, reason=HOSTILE))
    text = Table([Column("name", "name")], [{"name": HOSTILE}]).to_text()
    assert "\x1b" not in text and "PWNED" in text


def test_one_huge_cell_does_not_widen_every_row_of_a_text_table():
    """Rows are padded to the widest cell: a 4 MB name in one signed entry header made `xlakit cache ls` print 50 MB
    for ten entries. A text cell shows at most MAX_CELL characters, saying how long it was."""
    from xlakit._text.table import Column, Table

    rows = [{"name": "A" * 4_000_000, "n": 1}] + [{"name": f"jit_f{i}", "n": i} for i in range(9)]
    text = Table([Column("name", "name"), Column("n", "n", "count")], rows).to_text()
    lines = text.splitlines()
    assert len(lines) == 12 and max(map(len, lines)) < 300
    assert "… (4,000,000 characters)" in lines[2] and lines[3].startswith("jit_f0 ")


def test_a_bundle_name_reaches_the_notebook_progress_bar_as_text(monkeypatch):
    """Fault: ``load_bundle`` put the manifest's name into tqdm's notebook bar, which writes it into an HTML
    widget unescaped: a bundle named ``<img src=x onerror=...>`` ran script in the user's JupyterLab."""
    pytest.importorskip("ipywidgets")
    from xlakit.bundle import progress

    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    bar = progress.progress_bar(2, MARKUP + HOSTILE)
    bar.set_postfix_str(MARKUP)
    shown = [w.value for w in bar._bar.container.children if hasattr(w, "value") and isinstance(w.value, str)]
    desc, postfix = bar._bar.desc, bar._bar.postfix
    bar.close()
    assert shown and not any(MARKUP in v or "\x1b" in v for v in shown)
    assert html_text(MARKUP) in desc and "\x1b" not in desc and html_text(MARKUP) in postfix


def test_an_event_log_with_wrong_types_or_deep_nesting_is_refused_with_a_value_error(tmp_path):
    """Fault: a log line with ``"duration_s": "text"`` loaded, then broke every repr and ``xlakit report``; a
    line nested 100,000 deep raised RecursionError; unknown field names reached the warning raw."""
    from xlakit.events import EventLog

    typed = tmp_path / "typed.jsonl"
    typed.write_text(json.dumps({"kind": "miss", "duration_s": "text"}) + "\n" + json.dumps({"kind": "hit"}) + "\n")
    with pytest.raises(ValueError, match="duration_s"):
        EventLog.load(typed)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps({"kind": "hit"}) + "\n")
    with pytest.raises(ValueError, match="not an xlakit event"):
        EventLog.load(deep)
    named = tmp_path / "named.jsonl"
    named.write_text(json.dumps({"kind": "hit", HOSTILE: 1}) + "\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        EventLog.load(named)
    assert seen and all("\x1b" not in str(w.message) for w in seen)


def test_a_local_dry_run_prune_is_refused_and_deletes_nothing(tmp_path, capsys):
    """Fault: ``xlakit cache prune --max-bytes 0 --dry-run`` on the local folder ignored ``--dry-run`` and
    evicted every entry."""
    import jax
    import jax.numpy as jnp

    import xlakit
    from xlakit.cli import main

    folder = tmp_path / "cache"
    xlakit.ExecutableCache(folder).compile(jax.jit(lambda v: v - 1), jnp.ones(3))
    assert main(["cache", "prune", "--max-bytes", "0", "--dry-run", "--path", str(folder)]) == 2
    assert "nothing was removed" in capsys.readouterr().err
    assert len(xlakit.ExecutableCache(folder).entries()) == 1


def test_a_reader_that_closes_the_pipe_is_not_reported_as_a_folder_error(tmp_path):
    """Fault: ``xlakit cache stats | head -1`` ended with "cannot access: Broken pipe; check the folder's
    permissions" and exit 2."""
    import subprocess
    import sys

    from xlakit.store import LocalStore

    LocalStore(tmp_path / "cache")
    cmd = (f"{sys.executable} -m xlakit cache ls --path {tmp_path / 'cache'} --json; "
           f"for i in 1 2 3 4 5 6; do {sys.executable} -m xlakit cache where; done")
    proc = subprocess.run(["bash", "-c", f"({cmd}) | head -c 1"], capture_output=True, text=True, timeout=120)
    assert "Broken pipe" not in proc.stderr and "permissions" not in proc.stderr, proc.stderr
