"""Clicks on a :class:`~xlakit.widgets._chart.Chart`'s points, sent to the kernel without widget code.

A chart is a complete plotly output drawn by the front-end's plotly renderer (no ``FigureWidget``), so it has
no comm of its own. :class:`ClickBridge` adds two small standard ipywidgets next to it, inside the same box:

* a hidden ``ipywidgets.Text`` (class ``xlakit-click-input``): the page writes ``"<seq> <index> <index>..."``
  into its ``<input>`` and fires an ``input`` event, which ipywidgets syncs to the kernel like typing;
* an ``ipywidgets.HTML`` whose one invisible ``<img>`` runs ~1 KB of JavaScript when rendered: it watches the
  enclosing box (``MutationObserver``) and, on every plotly graph div drawn there (each redraw replaces it),
  registers ``plotly_click`` once; a click sends the points' integer ``customdata`` (the event rows); and it
  reports whether the box is on screen (``IntersectionObserver``: scrolled away or in a hidden tab is off;
  a hidden browser tab is off) into a second hidden ``Text`` (class ``xlakit-visible-input``), so a live
  view skips redraws nobody can see.

The saved widget state holds only these two small models (no ``_esm``, no plotly.js); in a saved notebook,
nbviewer or ``nbconvert`` output nothing is wired (static snapshots are skipped: class ``xlakit-static``).
Keyboard and screen-reader users keep the widgets' menus, which do the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from xlakit._text.untrusted import html_text

__all__ = ["ClickBridge", "parse_click"]

# Runs as the <img>'s onerror handler (``this`` is the img). Finds the enclosing box by ``root_class``, hooks
# each live plotly div inside it once, and forwards the integer customdata of clicked points.
_HOOK_JS = """(function(img){
var root=img.closest('.%(root)s');if(!root||root.__xlakitClicks)return;root.__xlakitClicks=1;var seq=0;
function send(ids){var inp=root.querySelector('.xlakit-click-input input');if(!inp)return;
inp.value=(++seq)+' '+ids.join(' ');inp.dispatchEvent(new Event('input',{bubbles:true}));}
function hook(){root.querySelectorAll('.js-plotly-plot').forEach(function(gd){
if(gd.__xlakitHooked||typeof gd.on!=='function'||gd.closest('.xlakit-static'))return;gd.__xlakitHooked=1;
gd.on('plotly_click',function(ev){var ids=(ev&&ev.points||[]).map(function(p){return p.customdata;})
.filter(function(v){return Number.isInteger(v);});if(ids.length)send(ids);});});}
hook();new MutationObserver(hook).observe(root,{childList:true,subtree:true});
var vis=-1,inView=1;function rep(){var v=(inView&&!document.hidden)?1:0;if(v===vis)return;vis=v;
var inp=root.querySelector('.xlakit-visible-input input');if(!inp)return;inp.value=(++seq)+' '+v;
inp.dispatchEvent(new Event('input',{bubbles:true}));}
if(window.IntersectionObserver){new IntersectionObserver(function(es){inView=es[es.length-1].isIntersecting?1:0;
rep();}).observe(root);}document.addEventListener('visibilitychange',rep);})(this)"""


def parse_click(value: str) -> list[int]:
    """The event rows in a click message ``"<seq> <row> <row>..."`` (``seq`` makes a repeated click a new
    value); malformed parts are dropped (the value comes from the page)."""
    parts = value.split()
    rows = []
    for p in parts[1:]:
        try:
            rows.append(int(p))
        except ValueError:
            continue
    return [r for r in rows if r >= 0]


class ClickBridge:
    """Forward clicks on the plotly charts inside a box (found by its CSS class ``root_class``) to
    ``on_click(rows)``, ``rows`` being the clicked points' integer ``customdata`` (list of int).

    ``on_visible(shown)`` (optional) is called with False when the box leaves the screen and True when it
    comes back (``"<seq> 0|1"`` written by the page).

    Attributes:
      widgets: the three widgets to put among the box's children (all invisible).
      input: the hidden ``ipywidgets.Text`` the page writes clicks into; visible_input: visibility.
    """

    def __init__(self, root_class: str, on_click: Callable[[list[int]], Any],
                 on_visible: Callable[[bool], Any] | None = None) -> None:
        if not root_class.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"root_class must be a plain CSS class name, got {root_class!r}")
        # Both hidden: an <img> in a display:none box still fails to load, so its handler runs.
        self.input = widgets.Text(value="", continuous_update=True, layout=widgets.Layout(display="none"))
        self.input.add_class("xlakit-click-input")
        js = html_text(" ".join(_HOOK_JS.split("\n")) % {"root": root_class})
        self.hook = widgets.HTML(value=f'<img alt="" src="" style="display:none" onerror="{js}">',
                                 layout=widgets.Layout(display="none"))
        self.hook.add_class("xlakit-click-hook")
        self.visible_input = widgets.Text(value="", continuous_update=True, layout=widgets.Layout(display="none"))
        self.visible_input.add_class("xlakit-visible-input")
        self.widgets = [self.input, self.visible_input, self.hook]
        self.input.observe(lambda change: on_click(parse_click(change["new"])) if change["new"] else None,
                           names=["value"])
        if on_visible is not None:
            self.visible_input.observe(lambda change: on_visible(change["new"].split()[-1:] != ["0"])
                                       if change["new"] else None, names=["value"])

    def close(self) -> None:
        for w in self.widgets:
            w.close()
