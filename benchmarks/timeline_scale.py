"""The cache timeline with 100,000 events over 324 programs (300 of the user's, 24 JAX helpers): one run.

    python benchmarks/timeline_scale.py [--events 100000] [--programs 324]

Prints, side by side with the issue's bounds: the seconds to build the widget's figure (filter, fold,
aggregate, plotly figure), to serialise it as the one message the front-end draws (``Chart.show``: plotly
JSON) and its size, a live redraw after one more event, the static snapshot's size (``to_html`` without
plotly.js, which a notebook carries once for all charts), and the view's own event columns in memory.
With Debian's ``chromium`` installed (``make browser``), also the seconds ``Plotly.newPlot`` takes to draw
that message in headless chromium (``--disable-gpu``: WebGL is software-rendered, so this is an upper bound
for a machine with a GPU), first draw and a redraw, each bounded by 1 s, with the CPU seconds of the page's main
thread; and the figure built, serialised and first drawn together ("built + drawn"), bounded by 1 s. On a loaded
machine (the load average is printed) a draw waits for the CPU: compare runs at a similar load, and the CPU
seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _browser import browser_page  # noqa: E402


def _events(n: int, programs: int, library_from: int):
    from xlakit.events import Event

    kinds = ("hit", "miss", "compile", "store", "trace", "lower")
    t0 = 1_700_000_000.0
    return [Event(kinds[i % 6], name=f"jit_fn{i % programs}", key=f"jit_fn{i % programs}-{i:08x}",
                  duration_s=0.001 * (i % 13), saved_s=0.2 if i % 6 == 0 else None, partition="cpu-abc",
                  reason="absent: no entry with this key" if i % 6 == 1 else None, time=t0 + 0.0005 * i,
                  origin="library" if i % programs >= library_from else "user",
                  site=None if i % programs >= library_from else f"train.py:{i % programs} (step)")
            for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--programs", type=int, default=324)
    args = parser.parse_args(argv)
    import plotly.io as pio

    from xlakit.events import EventLog
    from xlakit.view import timeline as tl
    from xlakit.widgets import CacheTimeline

    events = _events(args.events, args.programs, args.programs - 24)
    log = EventLog(maxlen=max(100_000, args.events))
    log.extend(events)

    tracemalloc.start()
    cols = tl.EventColumns(maxlen=log.maxlen)
    cols.extend(events)
    cols.arrays()
    columns_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()

    warm = tl.EventColumns()
    warm.extend(events[:12])
    tl.timeline_figure(tl.timeline_data(warm))  # plotly's classes imported, as in a notebook already drawing
    start, cpu = time.perf_counter(), time.process_time()
    data = tl.timeline_data(cols, max_points=CacheTimeline.max_points.default_value)
    fig = tl.timeline_figure(data)
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    message = pio.to_json(fig, validate=False, remove_uids=True)
    json_s, json_cpu_s = time.perf_counter() - start, time.process_time() - cpu

    start = time.perf_counter()
    w = CacheTimeline(log, throttle_s=0.0, live=False)
    widget_s = time.perf_counter() - start
    log.emit("hit", name="jit_fn0", saved_s=1.0, origin="user", time=events[-1].time + 0.001)
    start = time.perf_counter()
    w.refresh()
    redraw_s = time.perf_counter() - start
    start = time.perf_counter()
    snap = w.to_html(include_plotlyjs=False)
    snap_s = time.perf_counter() - start
    lanes, shown = len(w.data.lanes), w.data.shown
    w.close()

    with browser_page() as draw:
        draws = (draw(message), draw(message)) if draw is not None else None
    drawn = (draws[0].wall_s, draws[1].wall_s, draws[0].cpu_s, draws[1].cpu_s) if draws else None
    # What the user waits for when the timeline is displayed: the figure built, serialised, and first drawn.
    together = build_s + json_s + drawn[0] if drawn else None
    rows = [("figure built (filter, fold, aggregate, plotly)", f"{build_s:.3f} s", "<= 1 s", build_s <= 1.0),
            ("figure serialised for the page (plotly JSON)", f"{json_s:.3f} s", "", True),
            ("  CPU: built, serialised (process_time)", f"{build_cpu_s:.3f} s, {json_cpu_s:.3f} s", "", True),
            ("message to the page", f"{len(message) / 1e3:,.0f} KB", "", True),
            ("drawn by chromium (Plotly.newPlot; first, again)",
             f"{drawn[0]:.2f} s, {drawn[1]:.2f} s" if drawn else "no chromium", "<= 1 s" if drawn else "",
             drawn is None or max(drawn[:2]) <= 1.0),
            ("  CPU: the page's renderer (first, again)", f"{drawn[2]:.2f} s, {drawn[3]:.2f} s" if drawn else "",
             "", True),
            ("built + drawn (build + JSON + first draw)", f"{together:.2f} s" if together is not None else
             "no chromium", "<= 1 s" if together is not None else "", together is None or together <= 1.0),
            ("widget built and first drawn (kernel side)", f"{widget_s:.3f} s", "", True),
            ("live redraw after one more event", f"{redraw_s:.3f} s", "<= 1 s", redraw_s <= 1.0),
            ("static snapshot (without plotly.js)", f"{len(snap.encode()) / 1e3:,.0f} KB in {snap_s:.2f} s",
             "<= 500 KB", len(snap.encode()) <= 500_000),
            ("markers drawn / lanes", f"{shown:,} / {lanes} (30 shown at once)", "", True),
            ("view's event columns in memory", f"{columns_bytes / 1e6:,.1f} MB", "", True)]
    import os

    print(f"{args.events:,} events over {args.programs} programs ({args.programs - 24} user, 24 library); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for what, value, bound, ok in rows:
        print(f"  {what:<48} {value:>28}  {bound:<10} {'' if not bound else ('ok' if ok else 'FAIL')}")
    print(json.dumps({"build_s": build_s, "build_cpu_s": build_cpu_s, "json_s": json_s, "json_cpu_s": json_cpu_s,
                      "built_and_drawn_s": together, "message_bytes": len(message), "widget_s": widget_s,
                      "redraw_s": redraw_s,
                      "browser_draw_s": drawn, "snapshot_bytes": len(snap.encode()), "markers": shown, "lanes": lanes,
                      "columns_bytes": columns_bytes}))
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
