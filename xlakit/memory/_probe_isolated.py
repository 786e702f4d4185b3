"""The isolated probe's parent side: serialize a program that has never run, start a fresh Python process that
loads and runs it (:mod:`xlakit.memory._probe_child`), and read the numbers it writes (see
:mod:`xlakit.memory.probe` for why and what was measured)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run_isolated"]

_MMAP_THRESHOLD = 128 * 1024  # glibc's initial value


def _serialize_never_run(compiled: Any, lowered: Any) -> tuple[tuple, list[str]]:
    """Serialized bytes of ``compiled``; when that fails (it ran: XLA:CPU's "``LessThan`` is not
    serializable"), of a fresh compile of ``lowered`` that has never run."""
    from jax.experimental import serialize_executable

    try:
        return serialize_executable.serialize(compiled), []
    except Exception as exc:  # noqa: BLE001 - the reasons vary by backend; decided below
        first = exc
    if lowered is None:
        raise ValueError(f"this executable cannot be serialized for an isolated probe ({type(first).__name__}: "
                         f"{first}). If it has run already (XLA:CPU cannot serialize some executables after "
                         "their first run), pass the function and its arguments, or its Lowered, so a fresh "
                         "copy can be compiled; otherwise use isolate=False") from first
    from xlakit._jax.fresh import compile_fresh

    fresh = compile_fresh(lowered)
    try:
        return serialize_executable.serialize(fresh), [
            f"serialized a fresh compile: the in-process executable could not be ({first})"]
    except Exception as exc:  # e.g. host callbacks: "Can't pickle local object"
        raise ValueError(f"this program cannot be serialized for an isolated probe ({type(exc).__name__}: "
                         f"{exc}); use isolate=False") from exc


def _picklable_trees(in_tree: Any, out_tree: Any) -> tuple[Any, Any]:
    """The program's argument and result trees, or flat trees with as many leaves where they cannot be pickled
    for the child: under ``nnx.jit`` they hold flax.nnx graph definitions, and those the optimizer's closures
    (optax's ``init_fn``). The child zero-fills and calls the program leaf by leaf, which a flat tree serves
    as well: the executable takes the same leaves in the same order."""
    import jax

    try:
        pickle.dumps((in_tree, out_tree))
        return in_tree, out_tree
    except Exception:  # noqa: BLE001 - any pickling failure: fall back to flat trees
        return (jax.tree.structure(((0,) * in_tree.num_leaves, {})),
                jax.tree.structure((0,) * out_tree.num_leaves))


def _child_result(proc: subprocess.CompletedProcess[str], result: Path) -> dict[str, Any]:
    """The numbers the probe's child wrote to ``result`` (its protocol: one JSON object in that file, never
    stdout, which anything in the child may print to).

    Raises:
      RuntimeError: the child failed or broke the protocol; the message has its exit status and output tails.
    """
    tails = (f"\n--- child stderr (last 2000 chars) ---\n{proc.stderr[-2000:]}"
             f"\n--- child stdout (last 500 chars) ---\n{proc.stdout[-500:]}")
    if proc.returncode != 0:
        raise RuntimeError(f"the isolated probe's child process failed (exit {proc.returncode}){tails}")
    try:
        m = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError("the isolated probe's child process exited 0 but wrote no readable result "
                           f"(xlakit.memory._probe_child protocol: one JSON object in {result.name}; "
                           f"{type(exc).__name__}: {exc}){tails}") from exc
    if not isinstance(m, dict) or "peak" not in m:
        raise RuntimeError(f"the isolated probe's child wrote an unexpected result {str(m)[:200]!r}{tails}")
    return m


def run_isolated(compiled: Any, lowered: Any, devices: list[Any], timeout_s: float, warmup: bool
                 ) -> tuple[dict[str, Any], list[str]]:
    """``(numbers measured in the child, notes)`` for one single-device program.

    Raises:
      ValueError: a multi-device program, or one that cannot be serialized. RuntimeError: the child failed or
        ran past ``timeout_s``.
    """
    import jax

    if len(devices) != 1:
        raise ValueError(f"isolate=True supports single-device programs; this one uses {len(devices)} devices "
                         "(use isolate=False)")
    (payload, in_tree, out_tree), notes = _serialize_never_run(compiled, lowered)
    flat, _ = jax.tree.flatten(compiled.in_avals)
    in_tree, out_tree = _picklable_trees(in_tree, out_tree)
    job = {"payload": payload, "in_tree": in_tree, "out_tree": out_tree,
           "specs": [(tuple(a.shape), str(a.dtype)) for a in flat], "platform": devices[0].platform,
           "device_id": devices[0].id, "warmup": warmup}
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("JAX_PLATFORMS", devices[0].platform)
    if devices[0].platform == "cpu":
        # glibc raises its mmap threshold after the first large free (up to 32 MiB), after which buffers of
        # libraries XLA calls are served from freed heap memory and never raise the high-water mark: a fixed
        # threshold keeps every buffer >= 128 KiB its own mapping, faulted in (and counted) on each run.
        env["MALLOC_MMAP_THRESHOLD_"] = str(_MMAP_THRESHOLD)
    with tempfile.TemporaryDirectory(prefix="xlakit-probe-") as tmp:
        path = Path(tmp) / "job.pkl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # our own bytes, readable by us only
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(job, fh)
        result = Path(tmp) / "result.json"
        try:
            proc = subprocess.run([sys.executable, "-m", "xlakit.memory._probe_child", str(path), str(result)],
                                  capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the isolated probe ran past {timeout_s} s (its child process was stopped); "
                               "raise timeout_s or use isolate=False") from exc
        m = _child_result(proc, result)
    notes.insert(0, "fresh process: executable loaded, not compiled; zero-filled args")
    return m, notes
