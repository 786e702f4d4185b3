"""How long a plotly figure takes to draw in a real browser: ``Plotly.newPlot`` timed inside the page in headless
chromium (Debian's ``chromium``, ``make browser``; driven by playwright). Shared by the benchmarks that bound a
chart's draw (``timeline_scale.py``, ``memory_charts.py``).

``--disable-gpu``: WebGL (``scattergl``) is software-rendered, so a draw here is an upper bound for a machine
with a GPU. On a loaded machine (print the load average beside it) a draw waits for the CPU.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator

_DRAW = """async (s) => { const f = JSON.parse(s); Plotly.purge('g'); const t = performance.now();
  await Plotly.newPlot('g', f.data, f.layout); return (performance.now() - t) / 1000; }"""


@contextlib.contextmanager
def browser_page() -> Iterator[Callable[[str], float] | None]:
    """A page with plotly.js loaded in headless chromium, as ``draw(message) -> seconds`` (``message``: the
    figure's plotly JSON, ``plotly.io.to_json``; seconds of one ``Plotly.newPlot`` into a 1400 px wide div,
    the page's own ``performance.now()``); None when Debian's ``chromium`` is not installed. One browser for
    every draw inside the ``with``."""
    chromium = shutil.which("chromium")
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
            yield lambda message: float(page.evaluate(_DRAW, message))
        finally:
            browser.close()


def browser_draw_s(message: str) -> tuple[float, float] | None:
    """(first, second) seconds of ``Plotly.newPlot`` for the figure JSON ``message`` in headless chromium (a
    fresh browser), or None without chromium."""
    with browser_page() as draw:
        if draw is None:
            return None
        return draw(message), draw(message)
