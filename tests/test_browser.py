"""Real-browser test: a Voilà-served notebook in headless Chromium; Reset peak lowers the displayed peak.

Debian's ``chromium-headless-shell`` (or ``chromium``; ``make browser`` installs the first as root) is driven
by Playwright through ``executable_path`` — Playwright's own browser download does not work here. Voilà serves
``tests/notebooks/allocator_reset.ipynb`` on 127.0.0.1; the test waits for the AllocatorPanel and a plotly
FigureWidget to render, clicks a button that allocates and frees 400 MiB in the kernel, reads the peak the
panel shows (at least 400 MiB: on CPU it is the kernel's resident high-water mark), clicks **Reset peak**
and checks that the displayed peak drops by most of those 400 MiB; then, after a window resize, that every
chart on screen (the widgets' and a standalone ``Chart``) is as high as its layout. A screenshot is kept under
``test-artifacts/`` (git-ignored).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import lab_harness as harness
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "tests" / "notebooks" / "allocator_reset.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
BYTES = 400 * 2**20


def _chromium() -> str:
    path = harness.chromium()
    if path is None:
        why = (f"chromium is not installed: run `make browser` as root (it runs `{harness.CHROMIUM_INSTALL}`)"
               if os.geteuid() == 0 else "chromium is not installed and this is not root: "
               f"`sudo {harness.CHROMIUM_INSTALL}` enables this test")
        pytest.skip(why)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"voila exited with {proc.returncode} before serving")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"voila did not listen on 127.0.0.1:{port} within {timeout} s")


# [drawn height of the plot div, its layout height] of each chart on screen (px).
_CHART_HEIGHTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd.offsetParent !== null && !gd.closest('.xlakit-static') && gd._fullLayout)
  .map(gd => [Math.round(gd.getBoundingClientRect().height), Math.round(gd._fullLayout.height)])"""


def _peak(page) -> int:
    return int(page.locator(".xlakit-peak-0 .xlakit-bytes").get_attribute("data-bytes"))


def _wait_until(predicate, timeout: float, what: str, page=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.25)
    if page is not None:
        page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


# What the page shows: the panel's peak drawn, Voila's widget race, or neither yet.
_PANEL_DRAWN_JS = """() => {
  const el = document.querySelector('.xlakit-peak-0 .xlakit-bytes');
  return Boolean(el && el.offsetParent !== null && el.getAttribute('data-bytes'));
}"""
_STATE_JS = ("() => {\n  if ((" + _PANEL_DRAWN_JS + ")()) return 'ready';\n"
             "  if (document.body && document.body.innerText.includes('model not found')) return 'model not found';\n"
             "  return '';\n}")


def _page_state(page, timeout: float) -> str:
    """'ready', 'model not found', or 'nothing drawn in N s' once *timeout* seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = page.evaluate(_STATE_JS)
        if state == "ready":
            page.wait_for_timeout(1000)  # a race can still show beside a drawn panel: look once more
            return "model not found" if page.get_by_text("model not found").count() else "ready"
        if state:
            return state
        page.wait_for_timeout(500)
    return f"nothing drawn in {timeout:.0f} s"


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


@pytest.mark.timeout(420)
def test_reset_peak_in_a_browser_lowers_the_displayed_peak():
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("voila")
    ARTIFACTS.mkdir(exist_ok=True)
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)
    log_path = ARTIFACTS / "browser-voila.log"
    timings = {}
    start = time.monotonic()
    with open(log_path, "w") as log:
        voila = subprocess.Popen(
            [sys.executable, "-m", "voila", str(NOTEBOOK), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
             "--Voila.port_retries=0", "--NotebookClient.timeout=120", "--NotebookClient.startup_timeout=60",
             "--show_tracebacks=True"],
            cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(port, voila, timeout=60)
            timings["voila_listening_s"] = time.monotonic() - start
            with sync_api.sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, headless=True, args=harness.CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    # Voila's own race under load: an output can reach the page before its widget model
                    # ("Error displaying widget: model not found") — the panel itself then never draws. Each page
                    # load runs the notebook afresh in a new kernel, so one more load is a new run, not a retry.
                    for attempt in (1, 2, 3):
                        page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
                        state = _page_state(page, timeout=100)
                        if state == "model not found" and attempt < 3:
                            timings["voila_model_not_found_reloads"] = attempt
                            continue
                        break
                    if state != "ready" and not page.evaluate(_PANEL_DRAWN_JS):
                        page.screenshot(path=str(ARTIFACTS / "browser-panel-missing.png"), full_page=True)
                        raise AssertionError(f"the AllocatorPanel did not draw ({state}) after {attempt} page "
                                             f"load(s); Voila's log ends:\n{_log_tail(log_path)}")
                    # Any drawn chart of the breakdown counts; its detail chart stays hidden until a program is
                    # selected, and a first-match selector could wait on that one forever.
                    try:
                        page.wait_for_function(
                            "() => [...document.querySelectorAll('.xlakit-memory-breakdown .js-plotly-plot')]"
                            ".some(e => e.offsetParent !== null)", timeout=90_000)
                    except Exception:
                        page.screenshot(path=str(ARTIFACTS / "browser-breakdown-missing.png"), full_page=True)
                        (ARTIFACTS / "browser-breakdown.html").write_text(page.evaluate(
                            "() => (document.querySelector('.xlakit-memory-breakdown') || {}).outerHTML || 'none'"))
                        raise
                    timings["rendered_s"] = time.monotonic() - start
                    initial = _peak(page)

                    page.locator(".test-allocate").click()
                    _wait_until(lambda: "allocated and freed" in page.locator(".test-allocate-status").inner_text(),
                                60, "the kernel to allocate and free 400 MiB", page)
                    before = _wait_until(lambda: _peak(page) if _peak(page) >= BYTES else 0, 30,
                                         "a displayed peak of at least 400 MiB", page)
                    page.screenshot(path=str(ARTIFACTS / "browser-allocator-before-reset.png"), full_page=True)

                    page.locator(".xlakit-reset-peak-0").click()
                    _wait_until(lambda: "clear_refs" in page.locator(".xlakit-reset-method-0").inner_text(), 30,
                                "the reset method to show", page)
                    after = _wait_until(lambda: _peak(page) if _peak(page) < before - 0.75 * BYTES else 0, 30,
                                        "the displayed peak to drop", page)
                    timings["total_s"] = time.monotonic() - start
                    page.screenshot(path=str(ARTIFACTS / "browser-allocator.png"), full_page=True)
                    method = page.locator(".xlakit-reset-method-0").inner_text()
                    # After a window resize every drawn chart is still as high as its layout (plotly's responsive
                    # mode used to size each to 100% of an output with no height: 0 px).
                    page.set_viewport_size({"width": 1000, "height": 1000})
                    page.wait_for_timeout(1500)
                    heights = page.evaluate(_CHART_HEIGHTS_JS)
                finally:
                    browser.close()
        finally:
            voila.terminate()
            try:
                voila.wait(timeout=15)
            except subprocess.TimeoutExpired:
                voila.kill()
                voila.wait(timeout=5)
    print(f"peak: initial {initial}, after allocating {before}, after reset {after} bytes; reset: {method}; "
          f"timings {timings}")
    assert before >= BYTES
    assert after < before - 0.75 * BYTES
    assert "clear_refs" in method
    assert (ARTIFACTS / "browser-allocator.png").stat().st_size > 10_000
    assert heights and all(div == want > 0 for div, want in heights), heights
