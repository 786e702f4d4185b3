"""How long a plotly figure takes to draw in a real browser: ``Plotly.newPlot`` timed inside the page in headless
chromium (Debian's ``chromium``, ``make browser``; driven by playwright). Shared by the benchmarks that bound a
chart's draw (``timeline_scale.py``, ``memory_charts.py``).

``--disable-gpu``: WebGL (``scattergl``) is software-rendered, so a draw here is an upper bound for a machine
with a GPU. On a loaded machine (print the load average beside it) a draw waits for the CPU; the renderer's CPU
seconds for the same draw (DevTools ``Performance.getMetrics`` ``ProcessTime``) are what load does not inflate.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from typing import NamedTuple

_DRAW = """async (s) => { const f = JSON.parse(s); Plotly.purge('g'); const t = performance.now();
  await Plotly.newPlot('g', f.data, f.layout); return (performance.now() - t) / 1000; }"""


class Draw(NamedTuple):
    """One ``Plotly.newPlot``: ``wall_s`` (the page's ``performance.now()``), ``cpu_s`` (the renderer process's
    CPU seconds over the same call, DevTools ``ProcessTime``)."""

    wall_s: float
    cpu_s: float


@contextlib.contextmanager
def browser_page() -> Iterator[Callable[[str], Draw] | None]:
    """A page with plotly.js loaded in headless chromium, as ``draw(message) -> Draw`` (``message``: the
    figure's plotly JSON, ``plotly.io.to_json``; one ``Plotly.newPlot`` into a 1400 px wide div); None when
    Debian's ``chromium`` is not installed. One browser for every draw inside the ``with``."""
    chromium = shutil.which("chromium-headless-shell") or shutil.which("chromium")  # as tests/lab_harness.py
    if chromium is None:
        yield None
        return
    from playwright.sync_api import sync_playwright
    from plotly.offline import get_plotlyjs

    page_html = f"<html><body><div id='g' style='width:1400px'></div><script>{get_plotlyjs()}</script></body></html>"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_content(page_html)
            devtools = page.context.new_cdp_session(page)
            devtools.send("Performance.enable")

            def cpu() -> float:
                metrics = devtools.send("Performance.getMetrics")["metrics"]
                return float(next(m["value"] for m in metrics if m["name"] == "ProcessTime"))

            def draw(message: str) -> Draw:
                before = cpu()
                wall = float(page.evaluate(_DRAW, message))
                return Draw(wall, cpu() - before)

            yield draw
        finally:
            browser.close()


def browser_draw_s(message: str) -> tuple[float, float] | None:
    """(first, second) seconds of ``Plotly.newPlot`` for the figure JSON ``message`` in headless chromium (a
    fresh browser), or None without chromium."""
    with browser_page() as draw:
        if draw is None:
            return None
        return draw(message).wall_s, draw(message).wall_s
