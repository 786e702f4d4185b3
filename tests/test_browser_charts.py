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
import pandas as pd
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
          notes: Array.from(gd.querySelectorAll('.annotation')).map(a => [a.textContent.slice(0, 40), box(a)])
            .filter(n => n[1]),
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
    the x axis's title and tick labels, the title and every annotation lie inside the figure (a long title was
    cut at both edges, the peak's caption at one) and no annotation covers the title. A one-point sweep's y
    axis has labelled ticks from 0 B."""
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
            # Every annotation (the peak's caption, a lane's label, a colour key) inside the figure and clear of
            # the title: the peak's caption ran past the plot's edge, its line name cut off.
            for text, b in d["notes"]:
                if b[0] < svg[0] - 1 or b[2] > svg[2] + 1 or b[1] < svg[1] - 1 or b[3] > svg[3] + 1:
                    problems.append(f"{where}: annotation {text!r} {b} outside the figure {svg}")
                if any(_intersect(b, t) for t in d["title"]):
                    problems.append(f"{where}: annotation {text!r} {b} over the title {d['title']}")
        legends = {d["name"]: d["legend"] for d in drawn}
        assert all(legends[n] for n in ("liveness", "lifetimes", "variants", "breakdown", "timeline")), legends
        sweep = next(d for d in drawn if d["name"] == "one-point sweep")
        assert sweep["yticks"][0] == "0 B" and len(sweep["yticks"]) >= 3, sweep["yticks"]
    page.close()
    assert not problems, "\n".join(problems)


#: Output widths (px) of a notebook cell in JupyterLab: an 800 px window (file browser closed) and a 1280 px one
#: with the file browser open, where tables of 928-1,386 px scrolled sideways with no hint.
CELL_WIDTHS = (620, 848)

# Per table: its box and its scrolling wrapper's, whether the wrapper scrolls, and the hint it draws.
_TABLES_JS = """() => Array.from(document.querySelectorAll('section')).map(s => {
  const t = s.querySelector('table'), w = t.closest('.xlakit-table-wrap');
  return {name: s.dataset.name, table: t.getBoundingClientRect().right, wrap: w.getBoundingClientRect().right,
          cell: s.getBoundingClientRect().right, scrolls: w.scrollWidth > w.clientWidth + 1,
          hint: getComputedStyle(w).backgroundImage.split('linear-gradient').length - 1};
})"""


def _tables() -> dict[str, str]:
    """One HTML table of each wide kind, with the long texts of a real flax model: the largest buffers at the
    peak (a layer is the whole call on its line), the explorer's variants, the peak's tables, the allocator
    snapshot, and a cache's entries (13 columns: the one table left to scroll)."""
    from types import SimpleNamespace

    from xlakit.view.allocator import allocator_html
    from xlakit.view.breakdown import details_html
    from xlakit.view.cache import entries_html
    from xlakit.view.peak import peak_tables_html
    from xlakit.widgets.memory_explorer import ExplorerResult, MemoryExplorer

    layer = "Attention.__call__ › jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5, axis=-1)"
    buffers = chart_gallery._buffers().assign(
        layer=layer, source="cell [2], line 8 (Attention.__call__)", scope="transpose(jvp(Transformer))/blocks/2",
        parameter="optimizer['opt_state'][0]['nu']['blocks'][2]['attn']['qkv']['kernel']",
        instruction="wrapped_broadcast_multiply_fusion.12")
    variants = {(b, r, "argument 0"): ExplorerResult(b, r, "argument 0", compile_s=0.3, decision="compiled")
                for b in (8, 256) for r in ("none", "checkpoint (save dots without batch dims)")}
    stats = [{"device": "TFRT_CPU_0", "in_use": 3 * 2**20, "peak": 571 * 2**20, "peak_note": "lifetime (no reset yet)",
              "limit": None, "largest_alloc": None, "num_allocs": None, "process_rss": 600 * 2**20}]
    entries = pd.DataFrame([{"name": "jit_train_step", "signature": "f32[64], f32[64,64], …(60 same), f32[8,784]",
                             "key": "…6594c315865bbb0b2fbc13e", "partition": "cpu-jaxlib0.10.2-x86_64-avx512-e5",
                             "size_bytes": 176_128, "compile_s": 2.6, "hits": 0, "loadable": False, "origin": "user",
                             "argument_size_in_bytes": 2_000_000, "output_size_in_bytes": 2_000_000,
                             "temp_size_in_bytes": 60_000_000, "last_used": pd.Timestamp("2026-12-05 20:00")}] * 3)
    return {"largest buffers": details_html("train_step", None, peak_buffers=buffers),
            "variants": MemoryExplorer._history_html(SimpleNamespace(results=variants)),
            "peak tables": peak_tables_html(buffers),
            "allocator": allocator_html(stats, {"TFRT_CPU_0": [1, 2]}, {}),
            "entries": entries_html(entries)}


def test_tables_fit_a_narrow_cell_or_scroll_with_a_hint(browser, tmp_path):
    """In a 620 and an 848 px cell every table but a cache's entries fits (long source lines, layers and pytree
    paths wrap at their separators, headers wrap, empty and unreported columns are left out); the entries
    table scrolls inside its wrapper, which shows the scroll hint. The fault: "bytes at the peak" and "XLA
    footprint" off screen in a table that scrolled sideways with nothing saying so."""
    from xlakit._text.theme import STYLE

    tables = _tables()
    problems = []
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    try:
        for width in CELL_WIDTHS:
            body = "".join(f"<section data-name='{n}' style='width:{width}px'>{t}</section>" for n, t in tables.items())
            page.set_content(f"<!doctype html><html><head><meta charset='utf-8'>{STYLE}</head><body>{body}</body>"
                             "</html>")
            for t in page.evaluate(_TABLES_JS):
                where = f"{t['name']} in a {width} px cell"
                if t["wrap"] > t["cell"] + 1:
                    problems.append(f"{where}: the wrapper runs {t['wrap'] - t['cell']:.0f} px past the cell")
                if t["name"] != "entries" and (t["scrolls"] or t["table"] > t["wrap"] + 1):
                    problems.append(f"{where}: {t['table'] - t['wrap']:.0f} px past its wrapper")
                if t["scrolls"] and t["hint"] < 2:
                    problems.append(f"{where}: scrolls sideways without the hint")
            entries = next(t for t in page.evaluate(_TABLES_JS) if t["name"] == "entries")
            assert entries["scrolls"], entries  # the check of the hint above has a table to check
    finally:
        page.close()
    assert not problems, "\n".join(problems)
