"""Jupyter widgets over xlakit's core objects (ipywidgets + plotly): thin views, no logic of their own.

========================== ===============================================================================
:class:`MemoryBreakdown`   compiled memory per program (stacked bars, peak marker); a program's largest
                           buffers and live bytes over program order
:class:`MemoryExplorer`    a batch-size slider and remat/donation choices that recompile in the background
                           and redraw what holds the peak (liveness, buffer lifetimes, peak treemap)
:class:`AllocatorPanel`    per-device bytes in use, peak, limit, a sparkline, **Reset peak** buttons
:class:`CacheTimeline`     cache and compile events over time, one lane per function, live
:class:`CacheBrowser`      the entries of a cache folder (no JAX hooks to list); verify, evict, explain
:class:`LiveArrays`        live JAX arrays as a table and a treemap
:func:`dashboard`          all of them in tabs
:class:`Chart`             one plotly figure, drawn complete (what every widget's charts are)
:func:`snapshot`           static HTML of any widget tree holding xlakit widgets (``HBox``, ``Output``, ...)
========================== ===============================================================================

Charts are sent complete in one message and replaced whole (never a plotly ``FigureWidget`` filled later),
and refresh threads hand their updates to the kernel's thread, so a chart is drawn after *Run All* every
time. Displaying a widget also outputs its static snapshot (charts with plotly.js once per document,
compressed; tables with the numbers), hidden in live JupyterLab, Notebook 7 and Voila, shown by a saved
notebook, ``jupyter nbconvert --to html`` or GitHub with no kernel and no network; ``to_html()`` gives the
snapshot and ``save_html(path)`` a standalone page. Inside IPython an ipywidgets ``HBox``/``VBox``/``Tab``/
``Output`` holding xlakit widgets gets a snapshot of its tree too (:func:`snapshot`,
:mod:`xlakit.widgets.containers`). Colours follow JupyterLab's light or dark theme. Errors in callbacks appear
inside the widget (and in ``widget.errors``). Refresh threads are daemons that stop on ``close()``.
Rendering (formatting, tables, figures, snapshots) lives in :mod:`xlakit.view`.

Needs the ``widgets`` extra: ``pip install 'xlakit[widgets]'``. ``import xlakit`` never imports this package.
"""

from __future__ import annotations

# Eager (not lazy): ``dashboard`` is both a submodule and the function; binding the names after the
# submodules are imported keeps ``xlakit.widgets.dashboard`` the function.
from xlakit.widgets._chart import Chart
from xlakit.widgets.allocator_panel import AllocatorPanel
from xlakit.widgets.cache_browser import CacheBrowser
from xlakit.widgets.cache_timeline import CacheTimeline
from xlakit.widgets.containers import install as _install_containers
from xlakit.widgets.containers import snapshot
from xlakit.widgets.dashboard import Dashboard, dashboard
from xlakit.widgets.live_arrays import LiveArrays
from xlakit.widgets.memory_breakdown import MemoryBreakdown
from xlakit.widgets.memory_explorer import MemoryExplorer

__all__ = ["MemoryBreakdown", "MemoryExplorer", "AllocatorPanel", "CacheTimeline", "CacheBrowser", "LiveArrays",
           "Dashboard", "dashboard", "Chart", "snapshot"]

# Inside IPython, a Box/Output holding xlakit widgets also leaves their snapshot (xlakit.widgets.containers).
_install_containers()
