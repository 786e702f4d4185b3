"""CompiledMemory's HTML as a researcher reads it (JupyterLab trial, round four): each number beside what it is and
its XLA field, no row of "not reported" per missing field (the CPU table had six), the footprint shown as the sum
it is. One CPU program, and the TPU train step's fields recorded on a TPU v5e (2026-12-05, jax 0.10.2,
``tests/data/tpu/facts.json``)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import jax
import jax.numpy as jnp

import xlakit.memory as xm
from xlakit._text.format import fmt_bytes
from xlakit.memory._compiled_view import compiled_rows
from xlakit.memory.compiled import _from_values

TRAIN = json.loads((Path(__file__).parent / "data" / "tpu" / "facts.json").read_text())["programs"]["train_step"]


def _cells(html: str) -> list[list[str]]:
    return [[unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", html) if "<td" in row]


def test_cpu_table_says_each_number_once_with_its_meaning_and_lists_what_xla_left_out():
    f = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
    m = xm.compiled_memory(f.lower(jnp.ones((256, 256)), jnp.ones((8, 256))).compile())
    rows = {r[0]: r for r in _cells(m._repr_html_())}
    assert rows["arguments"][1] == fmt_bytes(256 * 256 * 4 + 8 * 256 * 4) == "264.0 KiB"
    assert "argument_size_in_bytes" in rows["arguments"][2]
    assert all(r[1] != "not reported" for r in rows.values())  # before: six rows read "not reported"
    assert "generated code" in rows["not reported"][2] and "host-memory" in rows["not reported"][2]
    assert "generated code" not in rows  # XLA:CPU reports 0 for its code: not a row
    terms, _ = compiled_rows(m)
    footprint = next(r for r in terms if r["what"] == "footprint")
    assert footprint["bytes"] == fmt_bytes(m.footprint_bytes)
    for words, value in (("arguments", m.argument_bytes), ("temporaries", m.temp_bytes),
                         ("constants", m.constant_bytes)):
        assert f"{words} {fmt_bytes(value)}" in footprint["meaning"]
    assert "without temporaries" in rows["peak (XLA)"][2]


def test_tpu_fields_recorded_on_the_chip_are_all_rows_and_the_footprint_counts_the_code():
    m = _from_values(TRAIN["memory_analysis"], name="jit_train_step", platform="tpu", source="recorded")
    rows, missing = compiled_rows(m)
    by_what = {r["what"]: r for r in rows}
    assert by_what["generated code"]["bytes"] == fmt_bytes(TRAIN["memory_analysis"]["generated_code_size_in_bytes"])
    assert "arguments in host memory (pinned_host)" in by_what  # a real 0 on the TPU, shown
    assert "peak (XLA)" in by_what and "memory.peak()" in by_what["peak (XLA)"]["meaning"]
    assert "code " in by_what["footprint"]["meaning"]  # code lives in device memory there
    assert missing == ["constants"]  # no buffer assignment given: constants not known, said once


def test_max_batch_html_shows_the_exact_bytes_and_every_size_tried():
    """JupyterLab trial: "2411: 64.0 MiB of 64.0 MiB" was all the display said; the bytes that show it fits, the
    sizes checked and the notes were in attributes only."""
    f = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
    spec = jax.ShapeDtypeStruct
    m = xm.max_batch(f, lambda b: (spec((256, 256), jnp.float32), spec((b, 256), jnp.float32)), budget_bytes=2**20)
    rows = {r[0]: r[1] for r in _cells(m._repr_html_())}
    assert rows["largest batch that fits"] == str(m.batch) and rows["budget"] == "1.0 MiB (1,048,576 B)"
    assert rows["its footprint"].endswith(f"({m.bytes:,} B)") and m.bytes <= 2**20
    assert rows[f"batch {m.batch}"] == f"{m.bytes:,} B: fits"
    assert rows[f"batch {m.batch + 1}"].endswith("over the budget")  # the answer + 1 was checked
    notes = [r[1] for r in _cells(m._repr_html_()) if r[0] == "note"]
    assert notes == list(m.notes) and notes
