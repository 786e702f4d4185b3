"""Run the widget notebook with *Run All* in JupyterLab 10 times; print how many runs drew every chart.

    python benchmarks/widgets_run_all.py [--runs 10] [--width 1400]

Each run opens a fresh copy of ``tests/notebooks/widgets_run_all.ipynb`` in JupyterLab (served on
127.0.0.1) in Debian's headless ``chromium`` via Playwright, runs *Run > Run All Cells*, and compares for
every chart — each dashboard tab shown in turn — the traces plotly drew in the page with the traces the
kernel holds (see ``tests/lab_harness.py``). A run counts only when every chart matches. Prints one line
per run and then ``drawn: N/10``; exits 1 unless every run drew every chart.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lab_harness as harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args(argv)
    if harness.chromium() is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="xlakit-lab-bench-"))
    lab = harness.Lab(folder)
    good = 0
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=harness.chromium(), headless=True,
                                         args=harness.CHROMIUM_ARGS)
            try:
                for run in range(args.runs):
                    r = harness.run_all(lab, browser, run, width=args.width)
                    good += bool(r["ok"])
                    status = "ok" if r["ok"] else "FAILED: " + "; ".join(r["problems"][:3])
                    print(f"run {run + 1:2d}: {r['charts']} charts, {r['seconds']:.1f} s, {status}", flush=True)
            finally:
                browser.close()
    finally:
        lab.stop()
    print(f"drawn: {good}/{args.runs}  (screenshots and server log in {folder})")
    return 0 if good == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
