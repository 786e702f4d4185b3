"""Mechanics every xlakit widget shares: the static snapshot, the error area, guarded callbacks, workers.

* :class:`View` is mixed into each widget (before the ipywidgets box class). Its ``_repr_mimebundle_``
  returns the live widget view *and* a ``text/html`` static snapshot (``to_html()``: plotly HTML plus a table
  with the numbers), so a saved notebook still shows the view on GitHub or nbviewer without a kernel.
* Callbacks (buttons, observers, refresh threads, event-log observers) run through :meth:`View._guard`: an
  exception is shown in the widget's error area, appended to :attr:`View.errors` and logged on the
  ``xlakit.widgets`` logger — never swallowed, never raised into ipywidgets' message loop.
* :class:`Worker` is a daemon thread that calls a function every ``interval_s`` seconds and/or when poked
  (throttled); it waits on a ``threading.Event`` so ``close()`` stops it at once. It never runs on the kernel's
  main thread, so it never blocks cell execution; what it changes in a widget it hands to the kernel's
  thread (:meth:`View._on_kernel`), so widget messages are only ever sent from there.
* Displaying a view (``_ipython_display_``) gives two outputs: the live widget, and its static snapshot
  (class ``xlakit-static``) that a live JupyterLab, Notebook 7 or Voilà page hides, and that a saved
  notebook, ``jupyter nbconvert --to html`` or GitHub shows — charts included, plotly.js once per document.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from xlakit._text.theme import STYLE
from xlakit._text.untrusted import html_text
from xlakit.widgets._chart import kernel_loop, on_kernel_thread
from xlakit.widgets._html import page, static_output

__all__ = ["View", "Worker", "page", "static_output"]

log = logging.getLogger("xlakit.widgets")
_MAX_ERRORS = 50


def checked_count(value: Any, name: str, what: str) -> int:
    """A count trait's value (``top``, ``max_rows``, ``history_len``): an int >= 1, not a bool; else a
    ``traitlets.TraitError`` naming it (-1 dropped the last row, True read as 1, 1.5 reached a bare error)."""
    import traitlets

    from xlakit._units import is_int

    if not is_int(value) or value < 1:
        raise traitlets.TraitError(f"{name} must be an int of at least 1 ({what}), got {type(value).__name__} "
                                   f"{value!r:.40}")
    return int(value)


def _stop_live_workers() -> None:
    """At interpreter exit, stop every worker before Python tears down: a daemon thread still inside JAX (reading
    allocator stats, compiling for the explorer) while the interpreter finalizes ended a kernel with "terminate
    called ... FATAL: exception not rethrown"."""
    for worker in list(_live_workers):
        worker._stop.set()
        worker._wake.set()
    for worker in list(_live_workers):
        if threading.current_thread() is not worker._thread:
            worker._thread.join(2.0)


_live_workers: weakref.WeakSet[Worker] = weakref.WeakSet()
atexit.register(_stop_live_workers)


class Worker:
    """A daemon thread calling ``fn()`` every ``interval_s`` seconds and/or soon after :meth:`poke`.
    Every live worker is stopped at interpreter exit (joined for up to 2 s each), before Python finalizes.

    Args:
      fn: the function (exceptions are the caller's business: pass a guarded function).
      interval_s: seconds between periodic calls (float > 0), or None for calls only when poked.
      throttle_s: after a poke, wait this many seconds (float >= 0) so a burst of pokes becomes one call.
      name: the thread's name.
    """

    def __init__(self, fn: Callable[[], Any], interval_s: float | None = None, *, throttle_s: float = 0.0,
                 name: str = "xlakit-widget-worker") -> None:
        if interval_s is not None and interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 seconds or None, got {interval_s}")
        self.fn, self.interval_s, self.throttle_s = fn, interval_s, throttle_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        _live_workers.add(self)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def poke(self) -> None:
        """Ask for a call soon (after ``throttle_s``)."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread; waits up to ``timeout`` seconds for a running call (not when called from it)."""
        self._stop.set()
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            poked = self._wake.wait(self.interval_s)
            if self._stop.is_set():
                return
            if poked and self.throttle_s and self._stop.wait(self.throttle_s):
                return
            self._wake.clear()
            self.fn()


class View:
    """Mixin for xlakit widgets: snapshot in the mime bundle, error area, guarded callbacks, owned workers.

    Attributes:
      errors: ``"where: ExcType: message"`` for each callback failure (list of str, newest last, at most 50).
      error_area: the ``ipywidgets.HTML`` showing the latest failures with tracebacks (hidden when none).
    """

    _title = "xlakit"

    def _setup_view(self) -> None:
        self.errors: list[str] = []
        self.error_area = widgets.HTML(layout=widgets.Layout(display="none"))
        self.error_area.add_class("xlakit-errors")
        # The theme stylesheet (JupyterLab CSS variables); a hidden element's <style> still applies.
        self._style = widgets.HTML(STYLE, layout=widgets.Layout(display="none"))
        self._loop = kernel_loop()  # the kernel's IO loop when built in a kernel (None in a script)
        self._workers: list[Worker] = []
        self._cleanups: list[Callable[[], Any]] = []
        self._owned: list[widgets.Widget] = []
        self._closed = False
        self._lock = threading.RLock()

    # -- errors -------------------------------------------------------------------------------------------
    def _guard(self, fn: Callable[..., Any], where: str | None = None) -> Callable[..., Any]:
        """``fn`` wrapped so an exception shows in the widget instead of escaping (holds only a weak
        reference to the widget, so a worker thread does not keep it alive)."""
        label = where or str(getattr(fn, "__name__", "callback"))
        ref = weakref.ref(self)

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - shown in the widget, recorded and logged
                view = ref()
                if view is not None:
                    view._show_error(label, exc)
                else:
                    log.exception("xlakit widget callback %s failed", label)
                return None

        return guarded

    def _show_error(self, where: str, exc: BaseException) -> None:
        text = f"{where}: {type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        log.error("xlakit widget %s: %s\n%s", type(self).__name__, text, tb)
        self.errors.append(text)
        del self.errors[:-_MAX_ERRORS]
        items = "".join(f"<li><code>{html_text(e)}</code></li>" for e in self.errors[-5:])
        self.error_area.value = (
            "<div class='xlakit-error'>"
            f"<b>Error in a callback</b> ({len(self.errors)} so far; newest last)<ul>{items}</ul>"
            f"<details><summary>traceback of the newest</summary><pre>{html_text(tb)}</pre></details></div>")
        self.error_area.layout.display = ""

    def clear_errors(self) -> None:
        """Forget the recorded errors and hide the error area."""
        self.errors.clear()
        self.error_area.value = ""
        self.error_area.layout.display = "none"

    # -- workers and cleanup ------------------------------------------------------------------------------
    def _on_kernel(self, fn: Callable[[], Any], where: str = "update") -> None:
        """Run ``fn`` (guarded) on the kernel's main thread: now when called there, else queued on the
        kernel's loop. Without a kernel (a script, a test) it runs now on the calling thread."""
        on_kernel_thread(self._loop, self._guard(fn, where))

    def _start_worker(self, fn: Callable[[], Any], interval_s: float | None = None, *, throttle_s: float = 0.0,
                      where: str = "refresh") -> Worker:
        """A worker that calls ``fn`` on the kernel's thread (see :meth:`_on_kernel`) every ``interval_s``
        seconds and/or when poked; the worker thread itself only waits."""
        worker = Worker(lambda: self._on_kernel(fn, where), interval_s, throttle_s=throttle_s,
                        name=f"xlakit-{type(self).__name__}-{where}")
        self._workers.append(worker)
        return worker

    def _stop_worker(self, worker: Worker | None) -> None:
        if worker is not None:
            worker.stop()
            if worker in self._workers:
                self._workers.remove(worker)

    @property
    def threads_alive(self) -> int:
        """How many of this widget's worker threads are running (int)."""
        return sum(w.alive for w in self._workers)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop every refresh thread and observer, close the child widgets, then the widget. Idempotent."""
        if getattr(self, "_closed", True):
            return super().close()  # type: ignore[misc]
        self._closed = True
        for worker in list(self._workers):
            worker.stop()
        self._workers.clear()
        for cleanup in self._cleanups:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - closing must finish
                log.exception("xlakit widget cleanup failed")
        self._cleanups.clear()
        for child in self._owned:
            child.close()
        super().close()  # type: ignore[misc]

    # -- display ------------------------------------------------------------------------------------------
    def to_html(self, include_plotlyjs: bool | str = "once") -> str:  # pragma: no cover - each widget has one
        """A static HTML snapshot of what the widget shows now (plotly HTML and tables with the numbers).

        Args:
          include_plotlyjs: "once" (default) includes plotly.js (compressed, ~1.9 MB, no network) with the
            first chart this process renders; True with this one; False never (the page has it); "cdn"
            links it (needs network). See :func:`xlakit.view.plotly_html.figure_html`.
        """
        raise NotImplementedError

    def save_html(self, path: str, include_plotlyjs: bool | str = True) -> str:
        """Write :meth:`to_html` as a standalone page to ``path``; returns the path."""
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(page(self._title, [self.to_html(include_plotlyjs)]))
        return path

    def _snapshot_html(self, include_plotlyjs: bool | str = "once") -> str:
        try:
            return self.to_html(include_plotlyjs)
        except Exception as exc:  # noqa: BLE001 - the live view must still display
            self._show_error("static snapshot", exc)
            return f"<pre>{html_text(type(self).__name__)}: snapshot failed: {html_text(str(exc))}</pre>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live view and, as ``text/html``, the static snapshot (one output)."""
        data = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        data = dict(data or {})
        data["text/html"] = static_output(self._snapshot_html())
        data["text/plain"] = repr(self)
        return data

    def _ipython_display_(self) -> None:
        """Two outputs: the live widget view, then the static snapshot. A notebook converter prefers a
        widget view over ``text/html`` in one output (and draws nothing offline), so the snapshot gets an
        output of its own, which live front-ends hide."""
        from IPython.display import display

        from xlakit.widgets._captured import note_displayed

        note_displayed(self)  # an Output capturing this display keeps it for its own snapshot
        live = dict(super()._repr_mimebundle_() or {})  # type: ignore[misc]
        live["text/plain"] = repr(self)
        display(live, raw=True)
        handle = display({"text/html": static_output(self._snapshot_html()), "text/plain": repr(self)}, raw=True,
                         display_id=True)
        if handle is not None:
            self.__dict__.setdefault("_snapshot_handles", []).append(handle)
            self.__dict__["_snapshot_version"] = self._changes()
            _refresh_after_each_cell(self)

    def _mark_changed(self) -> None:
        """What this widget shows changed (a live redraw): its displayed snapshot is replaced after the cell."""
        self.__dict__["_change_count"] = self.__dict__.get("_change_count", 0) + 1

    def _changes(self) -> int:
        """Changes of this widget and of the xlakit widgets it holds (a dashboard's timeline)."""
        own = self.__dict__.get("_change_count", 0)
        return own + sum(c._changes() for c in getattr(self, "_owned", ()) if isinstance(c, View))

    def refresh_snapshot(self) -> None:
        """Replace the static snapshot(s) this widget displayed with one of its state now, so a notebook saved
        after a background update (a compile that finished, a selection) records the result, not the state at
        display time. Called by widgets that change after they were shown; failures never reach the user."""
        handles = self.__dict__.get("_snapshot_handles")
        if not handles:
            return
        self.__dict__["_snapshot_version"] = self._changes()
        data = {"text/html": static_output(self._snapshot_html()), "text/plain": repr(self)}
        for handle in handles:
            try:
                handle.update(data, raw=True)
            except Exception:  # noqa: BLE001 - a closed front-end or a finished kernel session: nothing to update
                pass


_shown: weakref.WeakSet = weakref.WeakSet()  # views whose static snapshot is displayed in this kernel
_hooked = False


def _refresh_after_each_cell(view: View) -> None:
    """Keep ``view``'s displayed snapshot current: after each cell (IPython's ``post_run_cell``), every shown
    view that changed since its snapshot (a live timeline's redraws) gets a new one, so a notebook saved later
    records what the widget shows then, not what it showed when displayed. One re-render per changed view
    per cell, none for views that did not change."""
    global _hooked
    _shown.add(view)
    if _hooked:
        return
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return
        shell.events.register("post_run_cell", _refresh_changed_snapshots)
        _hooked = True
    except Exception:  # noqa: BLE001, S110 - no IPython events here: snapshots stay as displayed
        pass


def _refresh_changed_snapshots(*_: Any) -> None:
    for view in list(_shown):
        try:
            if getattr(view, "_closed", False):
                _shown.discard(view)
            elif view._changes() != view.__dict__.get("_snapshot_version"):
                view.refresh_snapshot()
        except Exception:  # noqa: BLE001 - a snapshot is a convenience; never fail the user's cell for it
            log.exception("xlakit snapshot refresh failed")
