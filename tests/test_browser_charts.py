"""Real-browser test of every kind of chart xlakit draws, in a narrow notebook column: the legend never
collides with the title (nor with the x axis's title and tick labels), and a one-point sweep shows a y axis
with labelled ticks from 0.

The fault it proves absent: in JupyterLab at 800 px with the file browser open (a ~500 px output area), the
legend above the plot wrapped into more rows and grew over the chart's title. One static page holds one
figure of each kind (``tests/chart_gallery.py``, drawn with :func:`xlakit.view.plotly_html.figure_html`, the
way snapshots and the report draw them); headless Debian ``chromium`` (Playwright, ``executable_path``) draws
it at several widths and compares the bounding boxes plotly drew.
"""

from __future__ import annotations

import chart_gallery
import lab_harness as harness
import pytest

pytestmark = pytest.mark.timeout(180)

#: Window widths (px) to check: the narrow output area the fault was seen in, the narrowest supported, wide.
WIDTHS = (400, 500, 1400)

# Per drawn chart: the boxes (page px) of its title, legend, the legend-like colour key of a treemap (the
# annotation with the ■ squares), x axis titles and tick labels, and its svg; and its y tick labels.
_BOXES_JS = """() => Array.from(document.querySelectorAll('.xlakit-chart')).map(gd => {
  const box = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
      ? [r.left, r.top, r.right, r.bottom] : null; };
  const boxes = sel => Array.from(gd.querySelectorAll(sel)).map(box).filter(b => b);
  return {name: gd.closest('section').dataset.name, title: boxes('.gtitle'), legend: boxes('.legend'),
          key: Array.from(gd.querySelectorAll('.annotation')).filter(a => a.textContent.includes('■')).map(box),
          below: boxes('.xtitle, .x2title, .xtick text, .x2tick text'),
          yticks: Array.from(gd.querySelectorAll('.ytick text')).map(t => t.textContent),
          svg: box(gd.querySelector('.main-svg'))};
})"""


def _intersect(a, b) -> bool:
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


def _page(figures) -> str:
    from xlakit._text.theme import STYLE
    from xlakit.view.plotly_html import figure_html

    parts = [f"<section data-name='{name}'>{figure_html(fig, include_plotlyjs=i == 0)}</section>"
             for i, (name, fig) in enumerate(figures.items())]
    return f"<!doctype html><html><head><meta charset='utf-8'>{STYLE}</head><body style='margin:8px'>" \
           + "".join(parts) + "</body></html>"


@pytest.fixture(scope="module")
def browser():
    if harness.chromium() is None:
        pytest.skip(f"chromium is not installed: `make browser` as root runs `{harness.CHROMIUM_INSTALL}`")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=harness.chromium(), headless=True, args=harness.CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _drawn_at(page, width, count):
    """The boxes of the ``count`` charts on ``page`` once plotly has drawn them at ``width`` px (the figures are
    responsive: a narrower window lays each out anew)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_function("([n, w]) => { const c = document.querySelectorAll('.xlakit-chart .main-svg');"
                           " return c.length >= n && Array.from(c).every(s => Math.abs(s.getBoundingClientRect()"
                           ".width - (w - 16)) < 2 || s.closest('.xlakit-chart').offsetParent === null); }",
                           arg=[count, width], timeout=60_000)
    page.wait_for_timeout(200)
    return page.evaluate(_BOXES_JS)


def test_no_legend_collides_with_a_title_at_narrow_widths(browser, tmp_path):
    """Every chart at 400, 500 and 1400 px: its legend (or colour key) intersects neither the title nor
    the x axis's title and tick labels, and the title lies inside the figure (a long one was cut at both
    edges). A one-point sweep's y axis has labelled ticks from 0 B."""
    figures = chart_gallery.gallery()
    path = tmp_path / "charts.html"
    path.write_text(_page(figures), encoding="utf-8")
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    page.goto(path.as_uri())
    problems = []
    for width in WIDTHS:
        drawn = _drawn_at(page, width, len(figures))
        assert [d["name"] for d in drawn] == list(figures)
        for d in drawn:
            where = f"{d['name']} at {width} px"
            if not d["title"]:
                problems.append(f"{where}: no title drawn")
            for legend in d["legend"] + d["key"]:
                hits = [b for b in d["title"] + d["below"] if _intersect(b, legend)]
                if hits:
                    problems.append(f"{where}: legend {legend} over {hits}")
            svg = d["svg"]
            problems += [f"{where}: title {t} outside the figure {svg}" for t in d["title"]
                         if t[0] < svg[0] - 1 or t[2] > svg[2] + 1]
        legends = {d["name"]: d["legend"] for d in drawn}
        assert all(legends[n] for n in ("liveness", "lifetimes", "variants", "breakdown", "timeline")), legends
        sweep = next(d for d in drawn if d["name"] == "one-point sweep")
        assert sweep["yticks"][0] == "0 B" and len(sweep["yticks"]) >= 3, sweep["yticks"]
    page.close()
    assert not problems, "\n".join(problems)
