"""Real-browser test in JupyterLab: after *Run All*, every chart is drawn with the traces Python holds.

The fault it proves absent: charts that came up as an empty grid after *Run All* (a plotly ``FigureWidget``
created empty and filled later, partly from worker threads, lost its first messages about one time in five).
One JupyterLab server (127.0.0.1, token) serves the module; Debian's ``chromium-headless-shell`` runs through
Playwright (``executable_path``). Each run opens a fresh copy of ``tests/notebooks/widgets_run_all.ipynb``
(``dashboard()``, ``MemoryBreakdown``, ``CacheTimeline``, ``LiveArrays``, ``CacheBrowser``), runs *Run All
Cells*, and compares for every chart — each dashboard tab shown in turn — the traces plotly drew (type, name,
number of points, drawn SVG groups) with ``live_charts()`` in the kernel. One run in the light theme at
1400 px, one in the dark theme at 800 px that also checks contrast and narrow-window layout: the fault came
about one run in five, so the two runs here catch it about one time in three, and ``benchmarks/widgets_run_all.py``
does 10 runs (nine times in ten). After each run a click on a miss marker in the timeline must bring the
kernel's explanation of that miss.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import lab_harness as harness
import pytest
from conftest import cpu_share

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def lab():
    if harness.chromium() is None:
        pytest.skip(f"chromium is not installed: `make browser` as root runs `{harness.CHROMIUM_INSTALL}`")
    pytest.importorskip("jupyterlab")
    sync_api = pytest.importorskip("playwright.sync_api")
    folder = Path(tempfile.mkdtemp(prefix="xlakit-lab-"))
    server = harness.Lab(folder)
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=harness.chromium(), headless=True, args=harness.CHROMIUM_ARGS)
    try:
        yield server, browser
    finally:
        browser.close()
        pw.stop()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


# The standalone (or the dashboard's) CacheTimeline's first drawn miss marker (an SVG point of the trace named
# "miss"), marked so Playwright can click it; its event row comes from the point's customdata.
_MARK_MISS_JS = """(inDashboard) => {
  document.querySelectorAll('[data-xlakit-test-miss]').forEach(e => e.removeAttribute('data-xlakit-test-miss'));
  const tl = Array.from(document.querySelectorAll('.xlakit-cache-timeline'))
    .find(t => !!t.closest('.xlakit-dashboard') === inDashboard && !t.closest('.xlakit-static'));
  const gd = tl && tl.querySelector('.js-plotly-plot');
  if (!gd) return null;
  for (const g of gd.querySelectorAll('.scatterlayer .trace')) {
    const cd = g.__data__;
    if (!cd || !cd[0] || cd[0].trace.name !== 'miss') continue;
    const pt = g.querySelector('path.point');
    if (!pt) return null;
    pt.setAttribute('data-xlakit-test-miss', '1');
    return {row: cd[0].trace.customdata[0], misses: cd.length};
  }
  return null;
}"""


def _click_a_miss(page, in_dashboard=False):
    """Click a miss marker of the standalone timeline (or the dashboard's, whose tab must be shown); return
    its row, the explanation shown before and after, and the misses menu's label."""
    marked = page.evaluate(_MARK_MISS_JS, in_dashboard)
    if marked is None:
        return {"marked": None, "explanation": None}
    timeline = page.locator(".xlakit-dashboard .xlakit-cache-timeline" if in_dashboard else
                            ".xlakit-cache-timeline:not(.xlakit-dashboard .xlakit-cache-timeline)").first
    explanation = timeline.locator(".xlakit-miss-explanation")
    before = explanation.inner_text()
    point = page.locator("[data-xlakit-test-miss]").first
    point.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    # The point lies under plotly's drag layer, which receives the real mouse click (hence force).
    point.click(force=True)
    for _ in range(40):
        text = explanation.inner_text()
        if text and text != before:
            break
        page.wait_for_timeout(250)
    menu = timeline.locator(".xlakit-miss-menu select")
    return {"marked": marked, "before": before, "explanation": explanation.inner_text(),
            "menu": menu.input_value() if menu.count() else None}


def test_run_all_draws_every_chart_with_the_traces_python_holds(lab):
    """Every chart drawn as Python holds it; then a click on a miss marker in the timeline shows that miss's
    explanation (sent to the kernel through the timeline's click bridge, answered by the kernel)."""
    server, browser = lab
    server.set_theme("JupyterLab Light")
    r = harness.run_all(server, browser, 0, check=_click_a_miss)
    assert r["charts"] >= 7, r  # 3 in the dashboard (+ its liveness chart), breakdown x2, timeline, treemap
    assert r["ok"], f"charts not drawn as Python holds them: {r['problems'][:5]}"
    assert not r["errors"], r["errors"][:3]
    click = r["checks"]
    print(f"click on a miss: {click}")
    assert click["marked"] is not None, "no miss marker drawn in the timeline"
    assert click["before"] == "" and " missed: " in click["explanation"], click
    _assert_menu_agrees(click)


def _assert_menu_agrees(click):
    """The kernel picked the clicked miss in the menu ("<time> s: <function>") and explained that function;
    a miss in the folded library helpers lane is explained but not listed (the menu lists the user's)."""
    if ": " in click["menu"]:
        function = click["menu"].split(": ", 1)[1]
        assert click["explanation"].startswith(f"{function} missed: "), click
    else:
        assert "library helpers folded" in click["menu"] and " missed: " in click["explanation"], click


_LAYOUT_JS = """() => {
  const lum = c => { const m = c.match(/[\\d.]+/g).map(Number); const [r, g, b] = m.slice(0, 3).map(v => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const contrast = (a, b) => { const x = lum(a), y = lum(b);
                               return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const bgOf = el => { for (let e = el; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
      if (c && !c.startsWith('rgba(0, 0, 0, 0)') && c !== 'transparent') return c; } return 'rgb(255, 255, 255)'; };
  const out = {};
  const th = document.querySelector('.xlakit-cache-browser .xlakit-table th');
  out.header_contrast = th ? contrast(getComputedStyle(th).color, bgOf(th)) : null;
  const note = document.querySelector('.xlakit-cache-browser .xlakit-note');
  out.note_contrast = note ? contrast(getComputedStyle(note).color, bgOf(note)) : null;
  const svgText = document.querySelector('.xlakit-memory-breakdown .js-plotly-plot .main-svg .gtitle');
  out.chart_text_contrast = svgText
    ? contrast(getComputedStyle(svgText).fill, bgOf(svgText.closest('.js-plotly-plot'))) : null;
  const svg = document.querySelector('.xlakit-memory-breakdown .js-plotly-plot .main-svg');
  out.chart_background = svg ? getComputedStyle(svg).backgroundColor : null;
  const panel = document.querySelector('.jp-NotebookPanel').getBoundingClientRect();
  const reset = document.querySelector('.xlakit-allocator-panel .xlakit-reset-peak-0');
  const r = reset ? reset.getBoundingClientRect() : null;
  out.reset_visible = !!r && r.width > 0 && r.left >= panel.left && r.right <= panel.right;
  const names = Array.from(document.querySelectorAll('.xlakit-cache-browser .xlakit-partitions td:first-child'));
  out.partition_name_lines = names.map(td => Math.round(td.getBoundingClientRect().height /
      parseFloat(getComputedStyle(td).lineHeight || '16')));
  out.clipped_legends = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(gd => gd.offsetParent !== null && !gd.closest('.xlakit-static') && gd.querySelector('.legend'))
    .filter(gd => { const s = gd.querySelector('.main-svg').getBoundingClientRect();
                    const l = gd.querySelector('.legend').getBoundingClientRect();
                    return l.left < s.left - 1 || l.right > s.right + 1; }).length;
  // Nothing past its output's right edge: a table's scrolling wrapper (its widget once grew to the table's
  // width, so the whole view scrolled, hint unseen), an allocator row's cells (they wrap), a chart's annotation.
  const visible = sel => Array.from(document.querySelectorAll(sel)).filter(e => e.offsetParent !== null
                                                                            && !e.closest('.xlakit-static'));
  const past = e => { const o = e.closest('.jp-OutputArea-output');
                      return o && e.getBoundingClientRect().right > o.getBoundingClientRect().right + 1; };
  out.past_cell = visible('.xlakit-table-wrap, .xlakit-allocator-row > *').filter(past)
    .map(e => e.className.slice(0, 40));
  // No view's box scrolls sideways: a full-width child (a chart, a nested box) with ipywidgets' 2 px margins made
  // MemoryBreakdown's boxes 4 px wider than themselves (JupyterLab trial, 2026-12-06: 852 px in 848).
  out.boxes_scrolling = visible('.widget-box[class*="xlakit-"], [class*="xlakit-"] .widget-box')
    .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
    .map(e => [e.className.slice(-40), e.scrollWidth, e.clientWidth]);
  out.notes_outside = visible('.js-plotly-plot').flatMap(gd => {
    const s = gd.querySelector('.main-svg').getBoundingClientRect();
    return Array.from(gd.querySelectorAll('.annotation'))
      .map(a => [a.textContent.slice(0, 30), a.getBoundingClientRect()])
      .filter(([, r]) => r.width > 0 && (r.left < s.left - 1 || r.right > s.right + 1)).map(([t]) => t); });
  out.theme = document.body.dataset.jpThemeName;
  return out;
}"""


# Live charts in the page with a legend and a title: [checked, those whose legend box meets the title's, the
# widest one's width in px].
_LEGEND_OVER_TITLE_JS = """() => {
  const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const charts = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(gd => gd.offsetParent !== null && !gd.closest('.xlakit-static'))
    .filter(gd => gd.querySelector('.legend') && gd.querySelector('.gtitle'));
  return [charts.length, charts.filter(gd => meet(gd.querySelector('.legend').getBoundingClientRect(),
                                                  gd.querySelector('.gtitle').getBoundingClientRect())).length,
          Math.max(0, ...charts.map(gd => Math.round(gd.getBoundingClientRect().width)))];
}"""


#: The dashboard's visible timeline: [its width, how many filter controls end past its right edge].
_CONTROLS_OVERFLOW_JS = """() => {
  const view = Array.from(document.querySelectorAll('.xlakit-dashboard .xlakit-cache-timeline'))
    .find(v => v.offsetParent !== null);
  if (!view) return null;
  const edge = view.getBoundingClientRect().right + 1;
  const controls = view.querySelectorAll('.widget-select-multiple, .widget-text, .widget-dropdown, .widget-checkbox');
  return [Math.round(view.getBoundingClientRect().width),
          Array.from(controls).filter(c => c.getBoundingClientRect().right > edge).length];
}"""


def _dark_narrow_checks(page):
    # First with the file browser open (an 800 px window leaves the notebook ~500 px): no legend over a title.
    legend_over_title = page.evaluate(_LEGEND_OVER_TITLE_JS)
    # The Allocator tab of the dashboard, with the left sidebar collapsed (an 800 px window).
    page.locator(".xlakit-dashboard .lm-TabBar-tab", has_text="Allocator").first.click()
    if page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").count():
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").first.click()
    page.wait_for_timeout(800)
    page.locator(".xlakit-allocator-panel .xlakit-reset-peak-0").first.scroll_into_view_if_needed()
    out = page.evaluate(_LAYOUT_JS)
    # The dashboard's Timeline tab: a click on a miss works there too (the bridge inside a Tab, narrow, dark).
    page.locator(".xlakit-dashboard .lm-TabBar-tab", has_text="Timeline").first.click()
    page.wait_for_timeout(800)
    # ... and in a 600 px window (the file browser open beside an 800 px one leaves about that)
    size = page.viewport_size
    page.set_viewport_size({"width": 600, "height": size["height"]})
    page.wait_for_timeout(600)
    out["timeline_controls"] = page.evaluate(_CONTROLS_OVERFLOW_JS)
    page.set_viewport_size(size)
    page.wait_for_timeout(300)
    out["click"] = _click_a_miss(page, in_dashboard=True)
    out["legend_over_title"] = legend_over_title
    return out


def test_dark_theme_and_an_800px_window(lab):
    server, browser = lab
    server.set_theme("JupyterLab Dark")
    try:
        r = harness.run_all(server, browser, 10, width=800, check=_dark_narrow_checks)
    finally:
        server.set_theme("JupyterLab Light")
    c = r["checks"]
    print(f"dark/800 px checks: {c}; run {r['seconds']:.1f} s; screenshots in {server.folder}")
    assert r["ok"], r["problems"][:5]
    assert c["theme"] == "JupyterLab Dark"
    # Table headers and notes readable on the dark background (WCAG: 4.5 for text, 3 for small notes).
    assert c["header_contrast"] >= 4.5 and c["note_contrast"] >= 3.0, c
    # Charts: transparent background, text in the theme's font colour.
    assert c["chart_background"] in ("rgba(0, 0, 0, 0)", "transparent"), c
    assert c["chart_text_contrast"] >= 4.5, c
    # 800 px: Reset peak on screen, partition names on one line, no legend clipped.
    assert c["reset_visible"], c
    assert c["partition_name_lines"] and max(c["partition_name_lines"]) <= 1, c
    assert c["clipped_legends"] == 0, c
    assert c["past_cell"] == [] and c["notes_outside"] == [], c
    assert c["boxes_scrolling"] == [], c["boxes_scrolling"]
    checked, overlapping, _width = c["legend_over_title"]
    assert checked >= 2 and overlapping == 0, c  # a legend above the plot grew over the title when it wrapped
    # the timeline's filter controls ran past the dashboard's right edge in a narrow window; they wrap now
    assert c["timeline_controls"] is not None and c["timeline_controls"][1] == 0, c["timeline_controls"]
    click = c["click"]
    assert click["marked"] is not None and click["before"] == "", click
    _assert_menu_agrees(click)


#: ``jupyter nbconvert --to html --execute`` of the widget notebook stays under this (bytes); it was 62 MB
#: when each FigureWidget saved ~5 MB of widget code and the widget cells were empty offline.
CONVERTED_BUDGET_BYTES = 5_000_000

_STATIC_JS = """() => Array.from(document.querySelectorAll('.xlakit-static')).map(s => ({
  visible: s.offsetParent !== null,
  charts: Array.from(s.querySelectorAll('.xlakit-chart')).map(gd => ({
    traces: (gd.data || []).length,
    drawn: gd.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .treemaplayer .slice').length})),
}))"""


def test_converted_notebook_shows_every_snapshot_offline_and_stays_small(lab, tmp_path):
    """``jupyter nbconvert --to html --execute``: one static snapshot per displayed widget, each chart drawn
    from plotly.js carried once in the document, with every network request refused; at most 5 MB."""
    import os
    import subprocess
    import sys

    server, browser = lab
    nb = tmp_path / "widgets.ipynb"
    nb.write_bytes(harness.NOTEBOOK.read_bytes())
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(harness.ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute", str(nb),
                    "--output", "widgets.html"], cwd=tmp_path, env=env, check=True, timeout=300,
                   capture_output=True)
    html_path = tmp_path / "widgets.html"
    size = html_path.stat().st_size
    text = html_path.read_text()
    print(f"converted widget notebook: {size:,} bytes")
    assert size <= CONVERTED_BUDGET_BYTES, f"{size:,} bytes"
    assert text.count("DecompressionStream") == 1  # plotly.js once per document, not per chart
    assert "cdn.plot.ly" not in text

    page = browser.new_page(viewport={"width": 1200, "height": 900})
    refused: list[str] = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(html_path.as_uri())
        snapshots = []
        for _ in range(40):
            snapshots = page.evaluate(_STATIC_JS)
            charts = [c for s in snapshots for c in s["charts"]]
            if charts and all(c["traces"] and c["drawn"] for c in charts):
                break
            page.wait_for_timeout(250)
    finally:
        page.close()
    # dashboard, MemoryBreakdown, CacheTimeline, LiveArrays, CacheBrowser: five snapshots, all shown.
    assert len(snapshots) == 5 and all(s["visible"] for s in snapshots), snapshots
    charts = [c for s in snapshots for c in s["charts"]]
    assert len(charts) >= 7, charts  # dashboard: bars, timeline, treemap; breakdown: bars, liveness; +2
    assert all(c["traces"] > 0 and c["drawn"] > 0 for c in charts), charts
    assert not errors, errors[:3]


def test_the_comparison_flags_a_blank_or_partial_chart():
    """The check itself can fail: an empty grid (no traces), a chart with traces but nothing drawn, a chart
    missing from the page, and a trace with other points are all reported."""
    want = {"c1": [{"type": "bar", "name": "a", "points": 2}], "c2": [{"type": "scatter", "name": "s", "points": 3}],
            "c3": [{"type": "treemap", "name": "t", "points": 4}]}
    drawn = [{"id": "c1", "traces": [], "drawn": 0, "calc": 0, "visible": True},
             {"id": "c2", "traces": [{"type": "scatter", "name": "s", "points": 3}], "drawn": 0, "calc": 0,
              "visible": True}]
    problems = harness.compare(drawn, want)
    assert any(p.startswith("c1: page has []") for p in problems)
    assert any(p.startswith("c2: traces present but not drawn") for p in problems)
    assert "c3: not in the page" in problems
    ok = [{"id": "c1", "traces": want["c1"], "drawn": 1, "calc": 1, "visible": True}]
    assert harness.compare(ok, {"c1": want["c1"]}) == []
    assert harness.compare([{**ok[0], "traces": [{"type": "bar", "name": "a", "points": 1}]}], {"c1": want["c1"]})


BURST_NOTEBOOK = Path(__file__).resolve().parent / "notebooks" / "timeline_burst.ipynb"

# How long the page takes to answer, sampled by the test while the burst runs: a script evaluation round trip
# (blocked by any long task on the page's main thread) and the long tasks the page itself observed.
_LONG_TASKS_JS = """() => { window.__xlakitLong = []; new PerformanceObserver(l => l.getEntries().forEach(
  e => window.__xlakitLong.push(Math.round(e.duration)))).observe({type: 'longtask'}); return true; }"""


def _open_and_run_all(server, page, name, before=None):
    """Open notebook ``name`` in the lab, wait for its kernel, call ``before()``, then Run All (retried: the
    menu can miss a click while the kernel dialog settles)."""
    page.goto(server.url(f"lab/tree/{name}?reset"), timeout=120_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    harness._accept_kernel_dialog(page, wait_s=3)
    harness._wait_kernel_idle(page, 90)
    if before is not None:
        before()
    for _attempt in range(4):
        harness._accept_kernel_dialog(page)
        page.locator(".jp-Notebook").first.click()
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.locator(".lm-Menu-item[data-command='runmenu:run-all']").first.click()
        if harness._wait_started(page, 15):
            break


def test_page_answers_during_a_burst_with_a_dashboard_and_three_live_timelines(lab):
    """A dashboard and three live timelines of the process log while 300 functions' events (3,000) arrive
    over ~3 s: the page keeps answering (no script round trip over 2 s on a quiet machine), the cell after the
    burst prints its output, and each timeline, once on screen, shows every event (off screen it was not redrawn)."""
    server, browser = lab
    name = "burst.ipynb"
    (server.folder / name).write_text(BURST_NOTEBOOK.read_text())
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open_and_run_all(server, page, name, before=lambda: page.evaluate(_LONG_TASKS_JS))
        started = page.locator(".jp-OutputArea-output", has_text="the burst started")
        started.first.wait_for(timeout=150_000)
        loads = [os.getloadavg()[0]]  # the contention while the burst runs, sampled with each round trip
        start = time.monotonic()
        page.evaluate("() => { window.__xlakitLong = []; }")  # long tasks from the burst on
        worst = time.monotonic() - start
        done = page.locator(".jp-OutputArea-output", has_text="after the burst:")
        while True:  # every query into the page waits while its main thread is busy: time each round
            t = time.monotonic()
            finished = done.count() > 0
            page.evaluate("() => performance.now()")
            worst = max(worst, time.monotonic() - t)
            loads.append(os.getloadavg()[0])
            if finished or time.monotonic() - start > 150:
                break
            page.wait_for_timeout(250)
        assert done.count(), "the cell after the burst printed nothing"
        long_tasks = page.evaluate("() => window.__xlakitLong || []")
        # A timeline off screen is not redrawn; shown (scrolled to, its dashboard tab picked) it catches up.
        tab = page.locator(".xlakit-dashboard .lm-TabBar-tab", has_text="Timeline").first
        tab.scroll_into_view_if_needed()
        tab.click()
        counts = []
        live = page.locator(".xlakit-cache-timeline:not(.xlakit-static .xlakit-cache-timeline)")
        for i in range(live.count()):
            timeline = live.nth(i)
            timeline.scroll_into_view_if_needed()
            count = timeline.locator(".xlakit-event-count").first
            end = time.monotonic() + 30
            while int(count.get_attribute("data-events") or 0) < 3000 and time.monotonic() < end:
                page.wait_for_timeout(250)
            counts.append(int(count.get_attribute("data-events") or 0))
    finally:
        page.close()
        server.shutdown_kernels()
    # 2 s on a quiet machine. A task's wall time grows with the CPU it has to share (`make test` runs other pytest
    # workers beside the kernel, JupyterLab and chromium), so the bound grows with the run queue per CPU, the
    # highest sampled while the burst ran: 3 s per extra process per CPU, since the round trip waits on the
    # kernel, the server and chromium's processes, each queued (measured beside the suite: 4.97 s at 2.4 per
    # CPU, 5.37 s at 2.6, where 2 s per unit failed by 4 %); on a quiet machine it stays 2 s.
    share = cpu_share(*loads)
    bound = 2.0 + 3.0 * (share - 1.0)
    print(f"burst: worst round trip {worst:.2f} s, long tasks {sorted(long_tasks)[-5:]}, timelines {counts}, "
          f"bound {bound:.1f} s (load {share:.1f} per CPU)")
    assert worst < bound, f"the page stopped answering for {worst:.1f} s"
    assert max(long_tasks, default=0) < 1000 * bound, f"a task blocked the page for {max(long_tasks)} ms"
    assert len(counts) >= 4 and min(counts) >= 3000, counts  # the dashboard's timeline and the three


def _code(source):
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


# Standalone charts: no layout.height (drawn at the default, 360 px), 450 px, the views' base layout (380 px),
# and one below a tall output, so its cell runs off screen. Their expected heights, by chart, in cell order.
_STANDALONE_CELLS = [
    "import plotly.graph_objects as go\nfrom xlakit._text.theme import BASE_LAYOUT\nfrom xlakit.widgets import Chart",
    "Chart(go.Figure(go.Bar(y=[1, 2, 3])))",
    "Chart(go.Figure(go.Bar(y=[1, 2, 3]), layout=dict(height=450)))",
    "Chart(go.Figure(go.Scatter(y=[1, 3, 2]), layout=BASE_LAYOUT))",
    "print('\\n' * 80)",
    "Chart(go.Figure(go.Bar(y=[5, 1]), layout=dict(height=420)))",
    "print('charts shown')",
]
_STANDALONE_HEIGHTS = [360, 450, 380, 420]

# Each live chart's drawn height: its plotly div (what the cell reserves) and its SVG, and the widths.
_HEIGHTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => !gd.closest('.xlakit-static') && gd.querySelector('.main-svg')).map(gd => ({
    div: Math.round(gd.getBoundingClientRect().height),
    svg: Math.round(gd.querySelector('.main-svg').getBoundingClientRect().height),
    width: Math.round(gd.getBoundingClientRect().width),
    output_width: Math.round(gd.parentElement.getBoundingClientRect().width)}))"""


def test_standalone_charts_draw_at_their_height_with_windowing_mode_none(lab):
    """With windowing mode "none" (dark theme), each standalone chart's plot div and SVG are as high as its
    layout says, before and after the window narrows, and as wide as its output. The fault it proves absent:
    the page's first chart drawn 0 px high (plotly's responsive mode sized it to 100% of an output with no
    height once the renderer's resize had cleared ``layout.height``)."""
    server, browser = lab
    name = "standalone_charts.ipynb"
    nb = {"cells": [_code(src) for src in _STANDALONE_CELLS], "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    (server.folder / name).write_text(json.dumps(nb))
    server.set_windowing_mode("none")
    server.set_theme("JupyterLab Dark")
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    measured = {}
    try:
        _open_and_run_all(server, page, name)
        page.locator(".jp-OutputArea-output", has_text="charts shown").first.wait_for(timeout=120_000)
        for width in (1300, 900):
            page.set_viewport_size({"width": width, "height": 900})
            for _ in range(40):  # until every chart is drawn and the renderer's resize has settled
                charts = page.evaluate(_HEIGHTS_JS)
                if len(charts) == len(_STANDALONE_HEIGHTS) and [c["div"] for c in charts] == _STANDALONE_HEIGHTS:
                    break
                page.wait_for_timeout(250)
            page.wait_for_timeout(1000)  # a late collapse (after the resize) would show here
            measured[width] = page.evaluate(_HEIGHTS_JS)
        page.screenshot(path=str(server.folder / "standalone_charts.png"))
    finally:
        page.close()
        server.shutdown_kernels()
        server.set_windowing_mode(None)
        server.set_theme("JupyterLab Light")
    print(f"windowing mode none, standalone charts: {measured}")
    for width, charts in measured.items():
        assert [c["div"] for c in charts] == _STANDALONE_HEIGHTS, (width, charts)
        assert [c["svg"] for c in charts] == _STANDALONE_HEIGHTS, (width, charts)
        assert all(abs(c["width"] - c["output_width"]) <= 1 for c in charts), (width, charts)
    assert measured[900][0]["width"] < measured[1300][0]["width"] - 200, measured  # it followed the window
