"""The five teaching notebooks, top to bottom, on the backend JAX picks here (a TPU or GPU where there is one), as
a Colab or Kaggle accelerator runtime would run them: per notebook, whether it ran, its seconds, and the lines of
its output that name the platform or device or give a verdict.

The tests (``tests/test_notebooks.py``) run the notebooks on CPU with ``JAX_PLATFORMS=cpu``; this runs them with
the environment as it is, so the kernel opens the accelerator. Executed notebooks (outputs included) and
``notebooks.json`` (the summary) are written to the output folder.

Run: ``PYTHONPATH=. python benchmarks/notebooks_on_device.py OUT_DIR [notebooks/02_compiled_memory.ipynb ...]``.
Needs nbformat, nbclient and ipykernel (``pip install xlakit[test]``). Exit status 1 when a notebook failed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Output lines worth printing in the summary: where it ran, and verdicts.
TELLING = re.compile(r"TPU|GPU|cuda|platform|device|backend|exact|NOT exact|compiled again|hit|miss|fits|peak",
                     re.IGNORECASE)
CELL_TIMEOUT_S = 600


def _texts(nb) -> list[str]:
    out: list[str] = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out.append(f"ERROR {o.get('ename', '')}: {o.get('evalue', '')[:500]}")
                continue
            text = o.get("text") or (o.get("data") or {}).get("text/plain") or ""
            out += [line for line in "".join(text).splitlines() if TELLING.search(line)]
    return out


def _transport() -> str:
    """``tcp`` where this machine opens IP sockets, else ``none``: the TPU machine answers ``socket(AF_INET)`` with
    errno 97 (EAFNOSUPPORT), and a Jupyter kernel died there before replying on either transport (tcp, ipc:
    its libzmq resolves an IP address regardless; seen 2026-12-06)."""
    import socket

    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except OSError:
        return "none"
    return "tcp"


def run_in_shell(path: Path, out_path: Path) -> None:
    """Execute ``path``'s code cells in this process's IPython shell (magics and ``display`` as in a kernel, no
    Jupyter transport), keeping each cell's printed and displayed text as its outputs; write the notebook to
    ``out_path``. Raises RuntimeError at the first cell that fails (the notebook is written first)."""
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    nb = nbformat.read(path, as_version=4)
    os.chdir(path.parent)
    shell = InteractiveShell.instance()
    failed = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        with capture_output() as captured:
            result = shell.run_cell(cell.source)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=captured.stdout)]
        cell.outputs += [nbformat.v4.new_output("display_data", data={"text/plain": o.data.get("text/plain", "")})
                         for o in captured.outputs]
        if not result.success:
            error = result.error_in_exec or result.error_before_exec
            cell.outputs.append(nbformat.v4.new_output("error", ename=type(error).__name__, evalue=str(error),
                                                       traceback=[captured.stderr[-3000:]]))
            failed = f"cell {i}: {type(error).__name__}: {error}"
            break
    nbformat.write(nb, out_path)
    if failed:
        raise RuntimeError(failed)


def run_shells(out_dir: Path, paths: list[Path]) -> dict[str, dict]:
    """:func:`run`, each notebook in a fresh ``python3`` process running :func:`run_in_shell` (for a machine whose
    Jupyter kernel cannot start: see :func:`_transport`)."""
    import subprocess

    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict] = {}
    for path in paths:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--in-shell", str(path), str(out_dir / path.name)],
                              capture_output=True, text=True, timeout=CELL_TIMEOUT_S * 2, check=False)
        seconds = round(time.perf_counter() - t0, 1)
        error = None if done.returncode == 0 else (done.stderr or done.stdout)[-1500:]
        lines = _texts(nbformat.read(out_dir / path.name, as_version=4)) if (out_dir / path.name).exists() else []
        summary[path.name] = {"ok": error is None, "seconds": seconds, "error": error, "lines": lines[:60],
                              "runner": "IPython shell (no Jupyter kernel on this machine)"}
        print(f"{path.name}: {'ok' if error is None else 'FAILED'} in {seconds} s (IPython shell)", flush=True)
        for line in (lines or [error or ""])[:15]:
            print(f"    {line[:200]}")
    (out_dir / "notebooks.json").write_text(json.dumps(summary, indent=1))
    return summary


def run(out_dir: Path, paths: list[Path]) -> dict[str, dict]:
    """Execute each notebook in a fresh ``python3`` kernel (cwd: ``notebooks/``); returns the summary per name."""
    import nbclient
    import nbformat

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict] = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        error = None
        try:
            nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as exc:  # noqa: BLE001 - reported per notebook, the others still run
            error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        seconds = round(time.perf_counter() - t0, 1)
        summary[path.name] = {"ok": error is None, "seconds": seconds, "error": error, "lines": _texts(nb)[:60]}
        nbformat.write(nb, out_dir / path.name)
        print(f"{path.name}: {'ok' if error is None else 'FAILED'} in {seconds} s", flush=True)
        for line in summary[path.name]["lines"][:15]:
            print(f"    {line[:200]}")
    (out_dir / "notebooks.json").write_text(json.dumps(summary, indent=1))
    return summary


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    if sys.argv[1] == "--in-shell":
        sys.path.insert(0, str(ROOT))
        run_in_shell(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    paths = [Path(p).resolve() for p in sys.argv[2:]] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    # One process at a time may open a TPU: ask which device in a child that exits before the kernels start.
    import subprocess

    probe = ("import jax; d = jax.devices(); "
             "print(f'jax {jax.__version__}, backend {jax.default_backend()}: {d[0].device_kind} x {len(d)}')")
    print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip(), flush=True)
    runner = run if _transport() == "tcp" else run_shells  # this TPU machine refuses IP sockets: no kernel there
    summary = runner(Path(sys.argv[1]), paths)
    return 0 if all(s["ok"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
