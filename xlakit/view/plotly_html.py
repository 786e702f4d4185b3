"""A plotly figure as static HTML that draws with no network, with plotly.js at most once per document.

plotly.js (about 4.8 MB) is carried gzip-compressed and base64-encoded (about 1.9 MB) by
:func:`loader_html`; the browser inflates it with its built-in ``DecompressionStream``. Each chart from
:func:`figure_html` is a ``<div>`` and a script that draws it as soon as plotly.js is there — whether the
loader comes before or after it in the page — so one loader per document serves every chart of every cell,
in a saved notebook, ``jupyter nbconvert --to html`` output, or a report. Used by widget snapshots and the
report; imports plotly.
"""

from __future__ import annotations

import base64
import functools
import gzip
import itertools
import json
import os
import threading
from typing import Any

from xlakit._text.untrusted import html_text

__all__ = ["figure_html", "loader_html", "plotly_js_size", "reset_once", "STATIC_CLASS"]

#: CSS class of static snapshot outputs (hidden where a live widget view is drawn).
STATIC_CLASS = "xlakit-static"
_ids = itertools.count()
_lock = threading.Lock()
_sent = False  # the loader was put into an output of this process ("once" mode)


@functools.lru_cache(maxsize=1)
def _compressed() -> str:
    from plotly.offline import get_plotlyjs

    raw = get_plotlyjs().encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def plotly_js_size() -> tuple[int, int]:
    """(bytes of plotly.js, bytes of the compressed base64 text the loader carries)."""
    from plotly.offline import get_plotlyjs

    return len(get_plotlyjs().encode("utf-8")), len(_compressed())


# Runs once per page: inflates plotly.js, defines window.Plotly (hiding an AMD ``define`` such as
# require.js's, which would otherwise capture it), then draws the charts that were waiting for it.
_LOADER_JS = """(function(){
if (window.xlakitPlotlyLoading || (window.Plotly && window.Plotly.newPlot)) { return; }
window.xlakitPlotlyLoading = true;
var b64 = document.getElementById('%(id)s').textContent.trim();
var bin = atob(b64), bytes = new Uint8Array(bin.length);
for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text().then(function(src){
  if (!(window.Plotly && window.Plotly.newPlot)) {
    var amd = window.define; window.define = undefined;
    var s = document.createElement('script'); s.text = src; document.head.appendChild(s);
    window.define = amd;
  }
  var waiting = window.xlakitPlotlyWaiting || []; window.xlakitPlotlyWaiting = [];
  waiting.forEach(function(draw){ try { draw(window.Plotly); } catch (e) { console.error(e); } });
});
})();"""

_DRAW_JS = """(function(){
var el = document.getElementById('%(id)s');
var spec = JSON.parse(document.getElementById('%(id)s-spec').textContent);
var draw = function(P){ P.newPlot(el, spec.data, spec.layout, spec.config); };
if (window.Plotly && window.Plotly.newPlot) { draw(window.Plotly); }
else { (window.xlakitPlotlyWaiting = window.xlakitPlotlyWaiting || []).push(draw); }
})();"""


def loader_html() -> str:
    """plotly.js, compressed, with the script that installs it (about 1.9 MB of HTML)."""
    uid = f"xlakit-plotlyjs-{os.getpid()}-{next(_ids)}"
    return (f"<script type='application/octet-stream' id='{uid}'>{_compressed()}</script>"
            f"<script type='text/javascript'>{_LOADER_JS % {'id': uid}}</script>")


_owner: tuple[str | None, str | None] = (None, None)  # (notebook cell id, request id) whose output has it


def reset_once() -> None:
    """Forget that the loader was sent ("once" mode sends it again with the next figure)."""
    global _sent, _owner
    with _lock:
        _sent, _owner = False, (None, None)


def _current_request() -> tuple[str | None, str | None]:
    """(cell id, message id) of the execute request running now in an IPython kernel, else (None, None)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None, None
    kernel = getattr(get_ipython(), "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)
    try:
        parent = get_parent() if callable(get_parent) else None
    except Exception:  # noqa: BLE001 - no request context: behave as outside a kernel
        parent = None
    if not isinstance(parent, dict):
        return None, None
    meta = parent.get("metadata") or {}
    return meta.get("cellId"), (parent.get("header") or {}).get("msg_id")


def _take_once() -> bool:
    """True for the first figure of the process, and again when the cell that carried the loader runs anew
    (its old output, loader included, is being replaced)."""
    global _sent, _owner
    cell, request = _current_request()
    with _lock:
        if not _sent:
            _sent, _owner = True, (cell, request)
            return True
        if cell is not None and cell == _owner[0] and request != _owner[1]:
            _owner = (cell, request)
            return True
        return False


def figure_html(fig: Any, include_plotlyjs: bool | str = "once", *, height: int | None = None) -> str:
    """``fig`` (a plotly Figure or its dict) as an HTML fragment that draws without a kernel.

    Args:
      include_plotlyjs: ``"once"`` (default) puts :func:`loader_html` before the first figure this process
        renders and nothing before later ones; True always includes it; False never (the page has it);
        ``"cdn"`` links plotly.js from the CDN instead (needs network).
      height: the div's height in px (default: the figure's ``layout.height``, else 360).
    """
    spec = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else dict(fig)
    import plotly.io as pio

    text = pio.to_json(spec, validate=False, remove_uids=True)
    data = json.loads(text)
    data["config"] = {"responsive": True, "displaylogo": False}
    layout = data.get("layout") or {}
    h = height or layout.get("height") or 360
    uid = f"xlakit-fig-{os.getpid()}-{next(_ids)}"
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    if include_plotlyjs == "cdn":
        from plotly.offline.offline import get_plotlyjs_version

        prefix = f"<script src='https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js'></script>"
    elif include_plotlyjs is True or (include_plotlyjs == "once" and _take_once()):
        prefix = loader_html()
    else:
        prefix = ""
    return (f"{prefix}<div class='xlakit-chart' id='{uid}' style='width:100%;height:{int(h)}px'></div>"
            f"<script type='application/json' id='{uid}-spec'>{payload}</script>"
            f"<script type='text/javascript'>{_DRAW_JS % {'id': html_text(uid)}}</script>")
