"""Drive JupyterLab in Debian's chromium: serve a folder, open a notebook, *Run All*, read what plotly drew.

Used by ``tests/test_browser_lab.py`` (a few runs) and ``benchmarks/widgets_run_all.py`` (10 runs). One
JupyterLab server on 127.0.0.1 (token auth, its own settings, workspaces and runtime folders) serves every
run; each run copies the notebook to a new file (so it gets a fresh kernel), opens it, runs *Run > Run All
Cells*, waits for the last cell's output, and compares, chart by chart, the traces plotly drew in the page
with the traces the kernel holds (``xlakit.widgets._chart.live_charts()``, written to a JSON file by the
notebook's last cell). Dashboard tabs are clicked one by one so the charts of every tab are checked.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "tests" / "notebooks" / "widgets_run_all.ipynb"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

# What the page drew, per live chart (static snapshots, hidden in JupyterLab, are left out): the traces in
# plotly's graph div and how many SVG trace groups / treemap slices it drew.
_DRAWN_JS = """() => {
  const SIZES = {f8: 8, f4: 4, i8: 8, i4: 4, i2: 2, i1: 1, u8: 8, u4: 4, u2: 2, u1: 1};
  const len = v => v == null ? 0 : (v.length !== undefined ? v.length
      : (v.bdata ? atob(v.bdata).length / (SIZES[v.dtype] || 8) : 0));
  return Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => !gd.closest('.xlakit-static'))
  .map(gd => ({
    id: (gd.layout && gd.layout.meta && gd.layout.meta.xlakit_chart) || null,
    visible: gd.offsetParent !== null,
    traces: (gd.data || []).map(t => ({type: t.type, name: t.name,
        points: Math.max(len(t.x), len(t.y), len(t.values), len(t.labels))})),
    drawn: gd.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .treemaplayer .slice, '
                               + '.gl-container canvas').length,
    calc: (gd.calcdata || []).length,
  }));
}"""


#: Debian's chromium builds, the lighter first. ``chromium-headless-shell`` is the old headless mode (what
#: Playwright itself runs for headless pages): the same Blink and V8 without the browser's own UI, whose WebUI
#: renderer and browser process cost about 3 s of CPU per JupyterLab page load here (14 -> 11 s a load).
CHROMIUM_BUILDS = ("chromium-headless-shell", "chromium")
#: What to run when none is installed (``make browser`` runs it as root).
CHROMIUM_INSTALL = "apt-get install chromium-headless-shell"


def chromium() -> str | None:
    """The path of a headless-capable chromium on PATH (:data:`CHROMIUM_BUILDS`, in order), or None."""
    for name in CHROMIUM_BUILDS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server serving ``folder`` on 127.0.0.1 (stop with :meth:`stop`)."""

    def __init__(self, folder: Path, *, timeout: float = 90.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.settings = self.folder / ".lab-settings"
        self.settings.mkdir(exist_ok=True)
        news = self.settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        news.parent.mkdir(parents=True, exist_ok=True)
        news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        env = dict(os.environ, JAX_PLATFORMS="cpu", JUPYTERLAB_SETTINGS_DIR=str(self.settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(self.folder / ".lab-workspaces"),
                   JUPYTER_RUNTIME_DIR=str(self.folder / ".runtime"),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("XLA_FLAGS", None)
        self.log_path = self.folder / "jupyterlab.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={self.port}", "--ServerApp.ip=127.0.0.1",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.folder}", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
             "jupyterlab.NeverCheckForUpdate", "--ServerApp.open_browser=False", "--allow-root",
             "--LabApp.extension_manager=readonly"],
            cwd=str(self.folder), env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log_path.read_text()[-2000:]
                raise RuntimeError(f"jupyterlab exited with {self.proc.returncode}: {log}")
            try:
                self.api("GET", "api/status")
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"jupyterlab did not answer on 127.0.0.1:{self.port} within {timeout} s")

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{sep}token={self.token}"

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/{path}", data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
        return json.loads(text) if text else None

    def set_theme(self, theme: str) -> None:
        """``"JupyterLab Light"`` or ``"JupyterLab Dark"`` for pages opened from now on."""
        path = self.settings / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"theme": theme}))

    def set_windowing_mode(self, mode: str | None) -> None:
        """Settings > Notebook > Windowing mode (``"full"``, ``"defer"``, ``"none"``; None: JupyterLab's
        default) for pages opened from now on."""
        path = self.settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        if mode is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(json.dumps({"windowingMode": mode}))

    def shutdown_kernels(self) -> None:
        for k in self.api("GET", "api/kernels") or []:
            try:
                self.api("DELETE", f"api/kernels/{k['id']}")
            except OSError:
                pass

    def stop(self) -> None:
        try:
            self.shutdown_kernels()
        except OSError:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self._log.close()


def compare(drawn: list[dict[str, Any]], expected: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Problems (empty when every chart of ``expected`` is drawn with the same traces)."""
    problems = []
    by_id: dict[str, dict[str, Any]] = {}
    for d in drawn:
        if d["id"]:
            by_id.setdefault(d["id"], d)
    for cid, want in expected.items():
        got = by_id.get(cid)
        if got is None and not want:
            continue  # never shown (e.g. the liveness chart before a program is selected)
        if got is None:
            problems.append(f"{cid}: not in the page")
            continue
        names = [(t["type"], t["name"], t["points"]) for t in got["traces"]]
        wanted = [(t["type"], t["name"], t["points"]) for t in want]
        if names != wanted:
            problems.append(f"{cid}: page has {names}, Python has {wanted}")
        elif want and (got["calc"] != len(want) or got["drawn"] == 0):
            problems.append(f"{cid}: traces present but not drawn (calcdata {got['calc']}, svg {got['drawn']})")
    return problems


def run_all(lab: Lab, browser: Any, run: int, *, width: int = 1400, timeout: float = 180.0,
            check: Any = None) -> dict[str, Any]:
    """One *Run All* of a fresh copy of the widget notebook; returns ``{"ok", "problems", "charts",
    "seconds", "checks"}``. ``check(page)`` (optional) runs extra checks once the charts are compared."""
    name = f"run_{run}.ipynb"
    shutil.copy(NOTEBOOK, lab.folder / name)
    charts_out = lab.folder / f"run_{run}.charts.json"
    charts_out.unlink(missing_ok=True)
    nb = json.loads((lab.folder / name).read_text())
    # Each run writes its own JSON: the notebook reads the path from the environment when set, else here.
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "XLAKIT_CHARTS_OUT" in "".join(cell["source"]):
            src = "".join(cell["source"]).replace('os.environ.get("XLAKIT_CHARTS_OUT")', repr(str(charts_out)))
            cell["source"] = src
    (lab.folder / name).write_text(json.dumps(nb))
    start = time.monotonic()
    page = browser.new_page(viewport={"width": width, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    result: dict[str, Any] = {"ok": False, "problems": [], "charts": 0, "checks": {}, "errors": errors}
    try:
        page.goto(lab.url(f"lab/tree/{name}?reset"), timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                               ".jp-Toolbar-kernelStatus, .jp-DebuggerBugButton", timeout=60_000)
        _accept_kernel_dialog(page, wait_s=3)
        _wait_kernel_idle(page, 90)
        # Run > Run All Cells. Right after the page opens the command can be a no-op while the kernel
        # connection settles; click again only while no cell has started (a UI retry, never a re-run).
        for _attempt in range(4):
            _accept_kernel_dialog(page)
            page.locator(".jp-Notebook").first.click()
            page.locator(".lm-MenuBar-item", has_text="Run").first.click()
            page.locator(".lm-Menu-item[data-command='runmenu:run-all']").first.click()
            if _wait_started(page, 15):
                break
        deadline = time.monotonic() + timeout
        while not charts_out.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the notebook's last cell did not run")
            time.sleep(0.5)
        expected = json.loads(charts_out.read_text())
        result["charts"] = len(expected)
        problems = ["?"]
        end = time.monotonic() + 30
        while problems and time.monotonic() < end:
            drawn = page.evaluate(_DRAWN_JS)
            problems = compare(drawn, expected)
            if problems:
                page.wait_for_timeout(500)
        # The dashboard's tabs: show each one; its charts must be drawn once visible.
        tabs = page.locator(".xlakit-dashboard .lm-TabBar-tab")
        for i in range(tabs.count()):
            tabs.nth(i).click()
            tab_end = time.monotonic() + 15
            tab_problems = ["?"]
            while tab_problems and time.monotonic() < tab_end:
                drawn = page.evaluate(_DRAWN_JS)
                visible = [d for d in drawn if d["visible"]]
                tab_problems = compare(visible, {d["id"]: expected[d["id"]] for d in visible if d["id"] in expected})
                if tab_problems:
                    page.wait_for_timeout(300)
            problems += [f"tab {i}: {p}" for p in tab_problems]
        result["problems"] = problems
        if check is not None:
            result["checks"] = check(page)
        page.screenshot(path=str(lab.folder / f"run_{run}.png"), full_page=False)
        result["ok"] = not problems
    except Exception as exc:  # noqa: BLE001 - a failed run is a result (the caller counts it)
        result["problems"].append(f"{type(exc).__name__}: {exc}")
        try:
            page.screenshot(path=str(lab.folder / f"run_{run}-failure.png"), full_page=True)
        except Exception:  # noqa: BLE001
            pass
    finally:
        result["seconds"] = time.monotonic() - start
        page.close()
        lab.shutdown_kernels()
    return result


def _accept_kernel_dialog(page: Any, wait_s: float = 0) -> None:
    """Accept JupyterLab's "Select Kernel" dialog (shown when the server is slow to start the notebook's
    kernel) with its default, the notebook's own kernel."""
    deadline = time.monotonic() + wait_s
    while True:
        dialog = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
        if dialog.count():
            dialog.first.click()
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.3)


def _wait_started(page: Any, timeout: float) -> bool:
    """Whether some code cell's prompt shows it ran or is running within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = page.evaluate("() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))"
                                ".some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))")
        if started:
            return True
        time.sleep(0.3)
    return False


def _wait_kernel_idle(page: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = page.evaluate("() => { const e = document.querySelector('.jp-Notebook-ExecutionIndicator');"
                               " return e ? e.getAttribute('data-status') : null; }")
        if status == "idle":
            return
        time.sleep(0.3)
    raise TimeoutError("the kernel did not become idle")
