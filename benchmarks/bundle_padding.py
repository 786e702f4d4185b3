"""What padding a bundle's call costs in bits, and what ``exact=True`` costs in time, side by side with ``jax.jit``.

Per width (``--widths``, default 16 and 64), one bundle: a row-wise MLP (``softmax(tanh(x @ W1 + b1) @ W2)``,
float32), exported at batch sizes 4 and 8, its rows proven independent. It is loaded twice in this process, as the
default does (non-exported sizes padded up to 4 or 8, or chunked by 8) and with ``exact=True`` (each new size
compiled from the shape-polymorphic module, then stored in ``.cache``). For each batch size ``n`` (1, 3, 9, 20;
random inputs):

* elements differing from ``jax.jit(mlp)(params, x)`` at ``n`` rows (bitwise), and the largest difference in
  units in the last place (ULP: ``|a - b| / spacing(|b|)``), for the padded call and the exact one;
* the first call's wall time of each (``time.perf_counter`` up to ``block_until_ready``): padded runs a loaded
  program, exact compiles ``n`` the first time in a process with an empty ``.cache``;
* for comparison, ``jax.jit`` itself at ``n`` rows against the first ``n`` rows of a batch of 16: XLA's kernels
  at two batch sizes, the same kind of difference.

Run: ``PYTHONPATH=. python benchmarks/bundle_padding.py [--widths 16,64]`` (about 10 s on 2 CPU cores).
Recorded on this project's 2-core CPU machine (jax 0.10.2): at width 16 a batch of 1 padded to 4 differs from
``jax.jit`` in 8 of 16 elements by up to 2 ULP — as ``jax.jit`` at 1 row differs from its own first row at 16 —
and ``exact=True`` differs in none; at width 64 neither differs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _ulps(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    spacing = np.spacing(np.abs(b).astype(np.float32))
    return float(np.max(np.abs(a.astype(np.float64) - b) / spacing)) if a.size else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="16,64", help="comma-separated MLP widths (default 16,64)")
    ns = parser.parse_args()
    for width in (int(w) for w in ns.widths.split(",") if w.strip()):
        run(width)


def run(w: int) -> None:
    """One bundle of width ``w``: the table of the module docstring."""

    import jax
    import jax.numpy as jnp
    import numpy as np

    import xlakit

    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((w, w)).astype(np.float32) / np.sqrt(w),
              "b1": rng.standard_normal(w).astype(np.float32),
              "w2": rng.standard_normal((w, w)).astype(np.float32) / np.sqrt(w)}

    def mlp(p, x):
        return jax.nn.softmax(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], axis=-1)

    jitted = jax.jit(mlp)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mlp"
        manifest = xlakit.export_bundle(mlp, params, rng.standard_normal((4, w)).astype(np.float32), path,
                                        batch_sizes=(4, 8))
        how, _reason = manifest.rows("default")
        padded = xlakit.load_bundle(path, progress=False, background=False)
        exact = xlakit.load_bundle(path, progress=False, background=False, exact=True)
        print(f"jax {jax.__version__}, backend {jax.default_backend()}; MLP width {w}, exported at batch 4 and 8, "
              f"rows {how}")
        print(f"{'batch':>6}{'padded: differ':>16}{'max ULP':>9}{'call s':>9}{'exact: differ':>16}{'max ULP':>9}"
              f"{'call s':>9}{'jax.jit n vs 16: differ':>25}{'max ULP':>9}")
        for n in (1, 3, 9, 20):
            x = rng.standard_normal((n, w)).astype(np.float32)
            ref = np.asarray(jitted(params, x))
            row = []
            for loaded in (padded, exact):
                start = time.perf_counter()
                got = np.asarray(jax.block_until_ready(loaded(x)))
                row.append((int((got != ref).sum()), _ulps(got, ref), time.perf_counter() - start))
            wide = np.concatenate([x, rng.standard_normal((max(0, 16 - n), w)).astype(np.float32)])[:max(16, n)]
            within = np.asarray(jitted(params, wide))[:n]
            row.append((int((within != ref).sum()), _ulps(within, ref), None))
            cells = "".join(f"{f'{d}/{ref.size}':>16}{u:>9.1f}" + (f"{s:>9.3f}" if s is not None else "")
                            for d, u, s in row[:2])
            d, u, _ = row[2]
            print(f"{n:>6}{cells}{f'{d}/{ref.size}':>25}{u:>9.1f}", flush=True)
        print("padded: no compile, values equal up to rounding; exact=True: bit-identical to jax.jit, one compile "
              "per new size (then loaded from .cache)")


if __name__ == "__main__":
    main()
