"""How long the memory pictures take for a large program: figure build, ``to_json`` and ``to_html`` for a
synthetic program of 10,000 instructions (liveness) and 10,000 logical buffers (lifetimes, peak treemap).

The synthetic program: buffer ``i`` is defined at a random step and lives a random (heavy-tailed) number of
steps with a heavy-tailed size, and roles are drawn from the roles :mod:`xlakit.memory` uses; live bytes per step
are the exact sum of the buffers live there. One run, printed; the issue's target is <= 1 s per chart.

Run: ``PYTHONPATH=$PWD python benchmarks/memory_charts.py [--steps 10000] [--buffers 10000]``
"""

from __future__ import annotations

import argparse
import time


def synthetic(steps: int = 10_000, buffers: int = 10_000, seed: int = 0):
    """(liveness frame, buffers frame, peak buffers frame) of a synthetic program (see the module docstring)."""
    import numpy as np
    import pandas as pd

    from xlakit.view.memory_charts import ROLES

    rng = np.random.default_rng(seed)
    start = rng.integers(0, steps, buffers)
    length = np.minimum((rng.pareto(1.2, buffers) * 20).astype(int) + 1, steps)
    end = np.minimum(start + length - 1, steps - 1)
    size = ((rng.pareto(1.0, buffers) + 1) * 4096).astype(np.int64)
    roles = rng.choice(ROLES, buffers)
    delta = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(delta, start, size)
    np.add.at(delta, end + 1, -size)
    live = np.cumsum(delta)[:steps]
    liveness = pd.DataFrame({"step": np.arange(steps), "live_bytes": live,
                             "instruction": [f"fusion.{i}" for i in range(steps)]})
    frame = pd.DataFrame({
        "buffer_id": np.arange(buffers), "instruction": [f"fusion.{i}" for i in start], "bytes": size,
        "shape": [(int(s) // 4,) for s in size], "dtype": "f32", "role": roles,
        "scope": [f"layer{i % 24}/{'transpose(jvp())' if i % 2 else 'jvp()'}" for i in range(buffers)],
        "source": [f"model.py:{10 + i % 50}" for i in range(buffers)], "parameter": None,
        "start": start, "end": end, "stack": None})
    peak_step = int(live.argmax())
    at_peak = frame[(frame["start"] <= peak_step) & (frame["end"] >= peak_step)]
    return liveness, frame, at_peak, peak_step


def _time(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--buffers", type=int, default=10_000)
    opts = parser.parse_args()
    import plotly.io as pio

    from xlakit.view.memory_charts import lifetime_chart, liveness_chart
    from xlakit.view.peak import peak_caption, peak_treemap_figure, peak_treemap_nodes
    from xlakit.view.plotly_html import figure_html

    liveness, buffers, at_peak, peak_step = synthetic(opts.steps, opts.buffers)
    liveness_chart(liveness.head(10))  # import plotly's figure classes once, outside the timings
    figure_html(liveness_chart(liveness.head(10)), True)
    print(f"synthetic program: {opts.steps:,} steps, {opts.buffers:,} logical buffers, "
          f"{len(at_peak):,} live at the peak step {peak_step}")
    charts = {
        "liveness (peak marked)": lambda: liveness_chart(liveness, caption=peak_caption(at_peak)),
        "buffer lifetimes (150 largest)": lambda: lifetime_chart(buffers, top=150, peak_step=peak_step),
        "peak treemap (scope > source)": lambda: peak_treemap_figure(peak_treemap_nodes(at_peak)),
        # worst case: every one of the 10,000 buffers live at the peak (200 leaves + "smaller" per group)
        "treemap of all buffers": lambda: peak_treemap_figure(peak_treemap_nodes(buffers)),
    }
    print(f"{'chart':34} {'build':>9} {'to_json':>9} {'to_html':>9} {'total':>9}  points/bars")
    for name, build in charts.items():
        fig, t_build = _time(build)
        _, t_json = _time(lambda f=fig: pio.to_json(f, validate=False))
        _, t_html = _time(lambda f=fig: figure_html(f, False))
        drawn = sum(len(getattr(t, "x", None) if getattr(t, "x", None) is not None else (t.ids or ()))
                    for t in fig.data)
        total = t_build + t_json + t_html
        print(f"{name:34} {t_build:8.3f}s {t_json:8.3f}s {t_html:8.3f}s {total:8.3f}s  {drawn:,}"
              f"{'  OK (<= 1 s)' if total <= 1 else '  OVER 1 s'}")


if __name__ == "__main__":
    main()
