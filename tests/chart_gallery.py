"""One figure of every kind xlakit draws, built from small hand-made inputs (no JAX): the liveness chart (stacked
by role), buffer lifetimes, the peak treemap, peak by batch size (several variants and one point), compiled
memory per program, measurements, the weight budget's arena, the cache timeline and the live-arrays treemap.
Each is filled so its legend has as many entries as a real one can (every role, every event kind): the
narrow-window layout checks in ``tests/test_browser_charts.py`` draw them all."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

MiB = 2**20


def _liveness():
    from xlakit.view.memory_charts import liveness_chart

    steps = 40
    roles = ["parameter", "optimizer state", "aliased", "output", "residual", "recomputed", "temporary",
             "constant", "thread-local"]
    frame = pd.DataFrame({r: (np.arange(steps) % (i + 2) + 1) * MiB for i, r in enumerate(roles)})
    frame["step"] = np.arange(steps)
    frame["live_bytes"] = frame[roles].sum(axis=1)
    frame.attrs["stacked_by"] = "role"
    return liveness_chart(frame, caption="top source model.py:42 (8.0 MiB, mostly residual)",
                          title="Live bytes over program order: jit_train_step")


def _buffers(n=12):
    roles = ["parameter", "optimizer state", "aliased", "output", "residual", "recomputed", "temporary",
             "constant", "thread-local", "unknown"]
    return pd.DataFrame({"buffer_id": range(n), "instruction": [f"fusion.{i}" for i in range(n)],
                         "bytes": [(i + 1) * MiB for i in range(n)], "shape": [(i + 1, 1024) for i in range(n)],
                         "dtype": ["float32"] * n, "role": [roles[i % len(roles)] for i in range(n)],
                         "scope": [f"jvp(MLP)/layer{i % 3}" for i in range(n)],
                         "source": [f"model.py:{40 + i % 4}" for i in range(n)], "parameter": [None] * n,
                         "start": [i for i in range(n)], "end": [i + 5 for i in range(n)]})


def _lifetimes():
    from xlakit.view.memory_charts import lifetime_chart

    return lifetime_chart(_buffers(), peak_step=7, title="Buffer lifetimes: jit_train_step (largest buffers, "
                                                         "coloured by role)")


def _peak_treemap():
    from xlakit.view.peak import peak_treemap_figure, peak_treemap_nodes

    return peak_treemap_figure(peak_treemap_nodes(_buffers(), ("source", "scope")),
                               title="What holds the peak of jit_train_step: source → scope → buffer")


def _variants(rows=None):
    from xlakit.view.peak import variants_figure

    if rows is None:
        rows = [{"batch": b, "variant": f"remat {r}, donate {d}", "peak": b * (3 if r == "none" else 2) * MiB}
                for b in (8, 16, 32, 64) for r in ("none", "full") for d in (True, False)]
    return variants_figure(rows)


def one_point_sweep():
    """The sweep of one batch size and one variant (what MemoryExplorer draws for a single point)."""
    return _variants([{"batch": 32, "variant": "remat none, donate True", "peak": 9 * MiB}])


def _breakdown():
    from xlakit.view.breakdown import BREAKDOWN_PARTS, breakdown_figure, breakdown_frame

    fields = [f for f, _, _ in BREAKDOWN_PARTS]
    memories = {f"jit_step_{i}": SimpleNamespace(**{f: (i + k + 1) * MiB for k, f in enumerate(fields)},
                                                 peak_bytes=20 * MiB, footprint_bytes=30 * MiB, platform="cpu")
                for i in range(3)}
    return breakdown_figure(breakdown_frame(memories))


def _measurements():
    from xlakit.view.budget import measurements_figure

    return measurements_figure([{"label": "naive: high-water growth", "bytes": 300 * MiB, "kind": "naive"},
                                {"label": "probe, isolated", "bytes": 40 * MiB, "kind": "probe"},
                                {"label": "compiler: temporaries + outputs", "bytes": 38 * MiB, "kind": "compiler"},
                                {"label": "allocator peak", "bytes": 50 * MiB, "kind": "other"}])


def _arena():
    from xlakit.memory import weight_budget
    from xlakit.view.budget import arena_figure

    budget = weight_budget(256 * MiB, [40 * MiB, 10 * MiB], pinned_bytes=30 * MiB)
    return arena_figure(budget, {"cnn": 10 * MiB, "transformer": 20 * MiB})


def _timeline():
    from xlakit.events import KINDS, Event
    from xlakit.view import timeline as tl

    t0 = 1_700_000_000.0
    events = []
    for lane in range(40):  # more lanes than shown at once: the title gets its second line
        for k, kind in enumerate(KINDS):
            events.append(Event(kind, name=f"jit_step_{lane}", duration_s=0.05, saved_s=0.1, reason="absent",
                                origin="user", time=t0 + lane + 0.05 * k))
    cols = tl.EventColumns()
    cols.extend(events)
    return tl.timeline_figure(tl.timeline_data(cols))


def _live_treemap():
    from xlakit.view.live import treemap_figure

    return treemap_figure({"ids": ["cpu:0", "cpu:0/device", "cpu:0/device/f32[1024]"], "labels":
                           ["cpu:0", "device", "f32[1024]"], "parents": ["", "cpu:0", "cpu:0/device"],
                           "values": [4096, 4096, 4096], "text": ["4 KiB", "4 KiB", "4 KiB"]})


def gallery() -> dict:
    """name -> plotly Figure, one per kind of chart."""
    return {"liveness": _liveness(), "lifetimes": _lifetimes(), "peak treemap": _peak_treemap(),
            "variants": _variants(), "one-point sweep": one_point_sweep(), "breakdown": _breakdown(),
            "measurements": _measurements(), "arena": _arena(), "timeline": _timeline(),
            "live treemap": _live_treemap()}
