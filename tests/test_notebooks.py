"""The teaching notebooks in notebooks/: each runs top to bottom on CPU, and each is committed without outputs.

The kernel is ``python3``, which jupyter_client resolves to the interpreter running pytest (ipykernel's
built-in kernelspec uses ``sys.executable``), so the notebooks run against this virtual environment.

Binder's build of binder/ is tested in tests/test_binder.py.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from conftest import cpu_share

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 180
NOTEBOOK_BUDGET_S = 60  # each notebook, top to bottom, on the 2-core machine
#: An executed teaching notebook, saved with its outputs and widget state, stays under this (bytes). Plotly
#: FigureWidgets used to put ~5 MB of widget code each into the saved widget state (10-15 MB notebooks).
SAVED_BUDGET_BYTES = 3_000_000


def _kernel_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def _all_text(nb) -> str:
    return "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")


def _execute(path: Path, tmp_path: Path, prelude: str | None = None):
    nb = nbformat.read(path, as_version=4)
    if prelude is not None:  # a cell run right after the setup cell
        nb.cells.insert(2, nbformat.v4.new_code_cell(prelude))
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    # The kernel inherits this environment (isolated XLAKIT_CONFIG_DIR from conftest, CPU JAX).
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(_kernel_env())
    try:
        load, start = os.getloadavg()[0], time.perf_counter()
        client.execute()
        return nb, time.perf_counter() - start, cpu_share(load)
    finally:
        os.environ.clear()
        os.environ.update(old)


def _check_01(text: str) -> None:
    m = re.search(r"hits=(\d+), compiles=(\d+)", text)
    assert m, text[-3000:]
    assert int(m.group(1)) > 0 and int(m.group(2)) == 0, m.group(0)
    assert "same loss as the cold run: True" in text
    assert "CompiledMemory(jit_cnn_train_step" in text
    assert re.search(r"miss: jit_cnn_train_step \[xlakit\]: \S", text), "the notebook shows why the cache missed"
    m = re.search(r"warm first call ([\d.]+) s = trace ([\d.]+) s \+ lower to StableHLO ([\d.]+) s \+ cache lookup "
                  r"and load ([\d.]+) s \+ run and the rest (-?[\d.]+) s", text)
    assert m, "the notebook breaks down the warm first call's seconds"
    total, *parts = (float(v) for v in m.groups())
    # four parts and the total, each printed to 0.01 s: the sum of the parts may be 5 x 0.005 s from the total
    assert abs(sum(parts) - total) <= 0.025 + 1e-9 and float(m.group(4)) > 0
    # Only the timed call's events: not the traces build() did before the timer started (a negative rest).
    assert parts[-1] >= 0, m.group(0)
    # The warm run's lanes are the timed call's program only: no all-zero rows of setup programs it traced.
    assert set(re.findall(r"(\S+) \(warm\)", text)) == {"jit_cnn_train_step"}, re.findall(r"\S+ \(warm\)", text)
    # A recompile is shown with the argument that changed and its successive shapes.
    assert re.search(r"jit_normalize recompiled 2 times: x changed shape: float32\[32\], float32\[64\], "
                     r"float32\[128\]", text), text[-2000:]
    # The recompiles' seconds are said to be theirs, and the first length's compile not among them.
    assert re.search(r"compile_s: XLA compiled those 2 recompiles in \d+\.\d{3} s together \(the first call's "
                     r"compile, for float32\[32\], is not counted\)", text), text[-2000:]
    # The warm run's jax row (zeros in every count) is explained under the table, with the seconds it does hold:
    # the same tracing and lowering seconds as the warm call's breakdown.
    m = re.search(r"jit_cnn_train_step \(warm\), source jax: 0 in every count \(the cache's lookups, compiles and "
                  r"stores are on the xlakit row\); JAX traced the call in ([\d.]+) s and lowered it in ([\d.]+) s",
                  text)
    assert m, text[-3000:]
    breakdown = re.search(r"= trace ([\d.]+) s \+ lower to StableHLO ([\d.]+) s", text)
    assert breakdown and m.groups() == breakdown.groups(), (m.group(0), breakdown.group(0))


def _check_02(text: str) -> None:
    m = re.search(r"donation removes a copy: alias ([\d,]+) B", text)
    assert m and int(m.group(1).replace(",", "")) > 0, text[-3000:]
    m = re.search(r"checkpoint: temporaries ([\d,]+) B -> ([\d,]+) B", text)
    assert m, text[-3000:]
    assert int(m.group(2).replace(",", "")) < int(m.group(1).replace(",", "")), m.group(0)
    assert "temporaries grow with batch size: True" in text
    m = re.search(r"gradient time: ([\d.]+) ms without checkpoint, ([\d.]+) ms with", text)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, "recompute time is measured, not asserted"
    m = re.search(r"(\d+) of the 8 largest buffers are \(8, 1024, 256\) stacks", text)
    assert m and int(m.group(1)) >= 2, text[-2000:]
    assert "copies of an (8, 1024, 256) buffer in the HLO:" in text
    # The peak in the user's terms: residuals dominate, and the top source is a line of the notebook's model (the
    # layer body `block`, or `loss` that scans it), named as a notebook cell, not a temporary file.
    m = re.search(r"residuals hold (\d+)% of the peak; top source: cell \[\d+\], line \d+ \((?:block|loss)\)", text)
    assert m and int(m.group(1)) > 50, text[-3000:]
    m = re.search(r"remat: residuals at the peak ([\d,]+) B -> ([\d,]+) B", text)
    assert m and int(m.group(2).replace(",", "")) < int(m.group(1).replace(",", "")), text[-3000:]
    # remat around the whole loss: residuals become recomputed values and compare says why the peak stays
    m = re.search(r"whole: +peak ([\d.]+) MiB → ([\d.]+) MiB .*\. The peak (did not move|fell by only|rose by)", text)
    assert m and float(m.group(2)) >= 0.9 * float(m.group(1)), text[-3000:]
    m = re.search(r"donation: peak ([\d,]+) B -> ([\d,]+) B", text)
    assert m and int(m.group(2).replace(",", "")) < int(m.group(1).replace(",", "")), text[-3000:]
    assert re.search(r"explorer, first variant: ExplorerResult\(batch=256, remat='none', donate='none': peak "
                     r"[\d.]+ [KM]iB, footprint [\d.]+ [KM]iB; \w+ in [\d.]+ m?s\)", text), text[-2000:]


def _check_03(text: str) -> None:
    # The reset says what it sets the peak to; the probes' verdicts are what the text after them explains: the
    # measurement matches the compiler's figure, or is a little larger by the libraries' own working memory.
    assert "process high-water mark - Reset peak sets the peak to what the whole Python process holds" in text, \
        text[-3000:]
    verdicts = dict(re.findall(r"probe in (this|a fresh) process: +[\d.]+ MiB - (.+)", text))
    assert verdicts["a fresh"] in ("matches XLA's figure", "XLA's figure plus the libraries' own working memory"), \
        verdicts
    assert verdicts["this"].startswith("matches XLA's figure") or verdicts["this"] == verdicts["a fresh"], verdicts
    assert re.search(r"why: measured [\d.]+ MiB", text), text[-3000:]
    assert "models that fit" in text
    # The copies column divides what the three models' weights leave of the pool, and says so.
    assert "more copies that fit in what is left" in text and "copies that fit in the pool" not in text
    # The weight budget's figure is recomputed by hand from the written-out defaults: both agree.
    m = re.search(r"\) = ([\d.]+) MiB\npool ([\d.]+) MiB", text)
    assert m, text[-2000:]


def _check_04(text: str) -> None:
    assert "weights-only update keeps programs: True" in text, text[-3000:]
    assert "module change drops programs: True" in text
    # The closing chart: cold vs warm load per program, from load_bundle's own seconds.
    pairs = re.findall(r"(model\.b\d+\.jaxexp): cold ([\d.]+) s, warm ([\d.]+) s", text)
    assert sorted(m for m, _, _ in pairs) == ["model.b1.jaxexp", "model.b8.jaxexp"], text[-2000:]
    assert all(float(c) > float(w) > 0 for _, c, w in pairs), pairs


def _check_05(text: str) -> None:
    assert "explain:" in text and "shape" in text, text[-3000:]
    # The nearest entry is whatever explain ranks nearest; the notebook prints it (no hard-coded shape).
    assert "nearest entry's arguments:" in text and "differs: shape of argument x: now 8x5" in text
    assert "repaired: True" in text
    assert "evicted under the cap: True" in text
    # Counted per layer: the cache's own layer looked up and stored each of the 8 programs once.
    assert "xlakit's store, 8 programs looked up: 8 stored, 5 evicted" in text, text[-2000:]
    # The cap is the store's own files (named) plus room for three entries, from sizes measured in this run, and
    # the folder then holds three entries plus those same files: the text above the cell says "three".
    m = re.search(r"cap ([\d,]+) bytes = the store's own files, ([\d,]+) bytes \((.+?)\), \+ room for 3 entries of "
                  r"([\d,]+) bytes \+ half an entry to spare", text)
    assert m, text[-2000:]
    cap, own, entry = (int(m.group(i).replace(",", "")) for i in (1, 2, 4))
    assert cap == own + 3 * entry + entry // 2 and "CACHEDIR.TAG" in m.group(3) and "partition.json" in m.group(3)
    kept = re.search(r"kept 3 entries, ([\d,]+) bytes, \+ the store's own files, ([\d,]+) bytes = ([\d,]+) bytes on "
                     r"disk; the 3 used last, for x of shape 6x16, 7x16, 8x16", text)
    assert kept, text[-2000:]
    k, o, total = (int(kept.group(i).replace(",", "")) for i in (1, 2, 3))
    assert k + o == total <= cap and o == own, kept.group(0)
    assert "CacheBrowser(" in text


def _check_04_outputs(nb) -> None:
    """The closing chart is a ``Chart`` (a live drawing plus a static HTML copy), not a bare plotly figure, whose
    plotly mimetype nbconvert's HTML cannot represent (the saved or converted notebook had no chart)."""
    chart_cells = [c for c in nb.cells if c.cell_type == "code" and any(
        "application/vnd.plotly.v1+json" in o.get("data", {}) or "Chart(" in o.get("data", {}).get("text/plain", "")
        for o in c.get("outputs", []))]
    assert chart_cells, "notebook 04 draws its closing chart"
    outputs = [o for o in chart_cells[-1].outputs if "data" in o]
    assert not any("application/vnd.plotly.v1+json" in o["data"] for o in outputs), "a bare plotly figure"
    assert outputs and "text/html" in outputs[-1]["data"], [sorted(o["data"]) for o in outputs]
    assert "plotly" in outputs[-1]["data"]["text/html"].lower() and outputs[-1]["data"]["text/plain"].startswith(
        "Chart(")


CHECKS = {"01": _check_01, "02": _check_02, "03": _check_03, "04": _check_04, "05": _check_05}
#: Checks of an executed notebook's outputs themselves (mimetypes), beyond their text.
OUTPUT_CHECKS = {"04": _check_04_outputs}


#: The notebook Binder opens: with XLAKIT_TEST_BINDER=1 (`make test`) tests/test_binder.py runs it in the
#: environment Binder builds and makes every check below on it, so it is not run a second time here.
BINDER_NOTEBOOK = "01_quickstart"


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_BUDGET_S * 3)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    if path.stem == BINDER_NOTEBOOK and os.environ.get("XLAKIT_TEST_BINDER") == "1":
        pytest.skip("run and checked in the Binder environment by tests/test_binder.py::test_binder_environment")
    nb, seconds, share = _execute(path, tmp_path)
    # The budget is a quiet machine's; beside the suite's other workers a notebook's wall time grows with them.
    assert seconds < NOTEBOOK_BUDGET_S * share, f"{path.name} took {seconds:.0f} s ({share:.1f} processes per CPU)"
    print(f"{path.name}: {seconds:.1f} s")
    check_executed(path, nb, tmp_path)


#: Run after the setup cell: xlakit's platform rules say this device may be opened by one process at a time, as
#: on a TPU (tests/data/tpu/facts.json: "child_process_open" failed there with the chip's lockfile error).
AS_EXCLUSIVE = """
import dataclasses
from xlakit._jax import platforms as _platforms
xlakit.platform_rules = lambda device=None: dataclasses.replace(_platforms.platform_rules(device),
                                                                exclusive_device=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_BUDGET_S * 3)
@pytest.mark.parametrize("stem", ["01_quickstart", "04_bundles"])
def test_warm_starts_run_in_this_process_where_one_process_may_open_the_device(stem: str, tmp_path: Path) -> None:
    """On a TPU a fresh process cannot open the chip while the notebook's kernel holds it: the warm starts of
    notebooks 01 and 04 then run in the kernel after jax.clear_caches(), and show the same answers (hits, no
    compile, the same loss and timeline lanes)."""
    path = ROOT / "notebooks" / f"{stem}.ipynb"
    nb, _seconds, _share = _execute(path, tmp_path, prelude=AS_EXCLUSIVE)
    text = _all_text(nb)
    assert "in this process after jax.clear_caches()" in text and "in a fresh process:" not in text, text[-3000:]
    check_executed(path, nb, tmp_path)


def check_executed(path: Path, nb, tmp_path: Path) -> None:
    """Everything an executed teaching notebook must show: no error, its own answers (:data:`CHECKS`), no
    throwaway folder left behind, and saved with its outputs and widget state it stays small and carries no
    widget code."""
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    CHECKS[path.stem[:2]](_all_text(nb))
    # Run by hand, each notebook left its throwaway cache folder (~2.7 MB) in /tmp: its last cell removes it.
    folders = re.findall(r"cache folder for this notebook: (\S+)", _all_text(nb))
    assert folders and not any(os.path.exists(f) for f in folders), f"{path.name} left {folders} behind"
    OUTPUT_CHECKS.get(path.stem[:2], lambda nb: None)(nb)
    saved = tmp_path / path.name
    nbformat.write(nb, saved)  # with outputs and the widget state, as Save in JupyterLab writes it
    size = saved.stat().st_size
    print(f"{path.name}: saved executed notebook {size:,} bytes")
    assert size <= SAVED_BUDGET_BYTES, f"{path.name} saved executed is {size:,} bytes"
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    bundled = [k for k, m in state.items() if "_esm" in m.get("state", {})]
    assert not bundled, f"widget code saved in the notebook for models {bundled[:3]}"


def test_notebooks_present() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert "01_quickstart.ipynb" in names, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_committed_clean(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {cell.get('id')} has outputs"
            assert cell.execution_count is None, f"{path.name}: cell {cell.get('id')} has an execution count"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "except ImportError" in first_code.source and 'xlakit[notebook]' in first_code.source
    assert "tempfile" in first_code.source
    # A kernel killed, or left behind by a server that stopped abruptly, exits without running its atexit
    # cleanup (ipykernel's parent poller calls os._exit): the scratch folder stayed in /tmp. The last cell
    # removes it.
    last_code = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "_scratch = tempfile.TemporaryDirectory(" in first_code.source and "_scratch.cleanup()" in last_code.source
