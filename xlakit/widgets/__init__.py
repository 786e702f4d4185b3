"""Jupyter widgets over xlakit's core objects (ipywidgets + plotly): thin views, no logic of their own.

========================== ===============================================================================
:class:`MemoryBreakdown`   compiled memory per program (stacked bars, peak marker); a program's largest
                           buffers and live bytes over program order
:class:`AllocatorPanel`    per-device bytes in use, peak, limit, a sparkline, **Reset peak** buttons
:class:`CacheTimeline`     cache and compile events over time, one lane per function, live
:class:`CacheBrowser`      the entries of an executable cache; verify, evict, explain
:class:`LiveArrays`        live JAX arrays as a table and a treemap
:func:`dashboard`          all of them in tabs
========================== ===============================================================================

Every widget's ``_repr_mimebundle_`` carries a static HTML snapshot (plotly HTML plus a table with the
numbers) next to the live view, so a saved notebook still shows it without a kernel; ``to_html()`` gives the
snapshot and ``save_html(path)`` a standalone page. Errors in callbacks appear inside the widget (and in
``widget.errors``). Refresh threads are daemons that stop on ``close()``.

Needs the ``widgets`` extra: ``pip install 'xlakit[widgets]'``. ``import xlakit`` never imports this package.
"""

from __future__ import annotations

# Eager (not lazy): ``dashboard`` is both a submodule and the function; binding the names after the
# submodules are imported keeps ``xlakit.widgets.dashboard`` the function.
from xlakit.widgets.allocator_panel import AllocatorPanel
from xlakit.widgets.cache_browser import CacheBrowser
from xlakit.widgets.cache_timeline import CacheTimeline
from xlakit.widgets.dashboard import Dashboard, dashboard
from xlakit.widgets.live_arrays import LiveArrays
from xlakit.widgets.memory_breakdown import MemoryBreakdown

__all__ = ["MemoryBreakdown", "AllocatorPanel", "CacheTimeline", "CacheBrowser", "LiveArrays", "Dashboard",
           "dashboard"]
