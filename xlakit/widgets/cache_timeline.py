""":class:`CacheTimeline`: cache and compile events over time, one lane per function, updated live."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets as widgets
import traitlets

from xlakit._text.format import fmt_seconds
from xlakit._text.untrusted import html_text
from xlakit.events import KINDS, SOURCES, Event, EventLog
from xlakit.view.timeline import miss_reason
from xlakit.widgets import _data, _figures, _snapshots
from xlakit.widgets._base import View, Worker
from xlakit.widgets._chart import Chart
from xlakit.widgets._clicks import ClickBridge

__all__ = ["CacheTimeline"]

#: Markers drawn at most in a static snapshot (``to_html`` and the notebook's saved ``text/html``).
SNAPSHOT_POINTS = 1500
_ALL = "\x00all"  # the source menu's "every source" value (a Dropdown shows None as an empty box)


class CacheTimeline(View, widgets.VBox):
    """Events over time: one lane per function; compiles and loads drawn as spans from start to end; every
    kind at its own height within the lane (nothing hides under a compile); marker size by duration; and the
    cumulative seconds saved by cache hits in a panel of its own. **Clicking a miss marker** shows why that
    miss happened (:class:`xlakit.widgets._clicks.ClickBridge`: plain ipywidgets, no widget code saved); the
    **misses** menu does the same from the keyboard.

    Hovering a marker shows the function, layer, duration, seconds saved, bytes, key, partition and reason.
    Filters by kind, by function name (substring) and by source. New events arrive through
    :meth:`xlakit.events.EventLog.subscribe` (push, not poll): the observer only queues them; a daemon
    thread waits at most :attr:`throttle_s` seconds for a burst to end, then hands one redraw to the kernel's
    thread (inside a kernel, the redraw runs when the running cell finishes or yields; widget messages are
    never sent from the thread); a timeline the page does not show (scrolled away, a hidden tab) is not
    redrawn until it is shown again. Large logs stay responsive: WebGL traces (``scattergl``) above 5,000
    markers; beyond :attr:`max_points` one marker per lane, kind and time bin, the bin's slowest event with
    the bin's count (:func:`xlakit.view.lanes.aggregate`); at most 30 lanes one by one, the others collapsed
    into one last lane (counts kept), the *lanes from* box (:attr:`lane_offset`) scrolling the window.

    **Your programs first**: programs whose every event came from inside jax/flax/optax
    (``Event.origin == "library"``: ``jit_broadcast_in_dim``, ``jit__threefry_split``, …) share one
    "library helpers" lane, their counts and seconds kept; the *fold library helpers* checkbox
    (:attr:`fold_library`) lists them one lane each, after yours. A ``recompile`` event is a marker in its
    function's lane, whose label counts them (``train_step ⟳3``).

    The process-wide log holds what xlakit's caches do; :func:`xlakit.events.install_listeners` adds JAX's own
    compiles, traces, lowerings and persistent-cache activity to it.

    Args:
      log: an :class:`~xlakit.events.EventLog` (default: the process-wide :func:`xlakit.events.log`), or an
        iterable of :class:`~xlakit.events.Event` (a fixed set; nothing to follow).
      kinds: initial :attr:`kinds` (default: every kind). name_filter, source, max_points, live,
        throttle_s: initial values of those traits.
      maxlen: events kept by the view (int, default: the log's own bound, or 100,000).
      layout: an ``ipywidgets.Layout`` for the box.

    Attributes:
      event_log: the followed :class:`~xlakit.events.EventLog` (None for a fixed set of events).
      columns: the events kept by the view (:class:`xlakit.widgets._data.EventColumns`).
      data: what is drawn now (:class:`xlakit.widgets._data.TimelineData`).

    Raises:
      TypeError: an unknown keyword argument, or ``log`` is neither a log nor events.
      traitlets.TraitError: an unknown kind or source, or ``max_points`` < 100.
    """

    _title = "xlakit cache timeline"

    #: Kinds shown (tuple of str from :data:`xlakit.events.KINDS`; default all). The seconds-saved curve
    #: ignores this filter.
    kinds = traitlets.Tuple()
    #: Case-insensitive substring a function name must contain ("" = every function; str, default "").
    name_filter = traitlets.Unicode("")
    #: Only events of this source (:data:`xlakit.events.SOURCES`), or None for all (str | None, default None).
    source = traitlets.Unicode(None, allow_none=True)
    #: Markers drawn at most (int >= 100, default 1,000 markers; beyond, one per lane, kind and time bin: about
    #: 30 per lane and kind across 30 lanes, each marker's hover giving its bin's count). Every marker costs the
    #: page ~0.2 ms of CPU to draw as SVG where there is no GPU (a first draw in a fresh page, headless
    #: chromium): 1,000 keep 100,000 events built and first drawn in about 1 s on a loaded 2-CPU machine.
    max_points = traitlets.Int(1000)
    #: Follow the log as events arrive (bool, default True).
    live = traitlets.Bool(True)
    #: Seconds a live redraw waits for a burst to go on (float >= 0, default 1 s): at most one redraw a second.
    throttle_s = traitlets.Float(1.0)
    #: Fold the programs called only from inside jax/flax/optax (``Event.origin == "library"``) into one
    #: "library helpers" lane, their counts and seconds kept (bool, default True); the checkbox toggles it.
    fold_library = traitlets.Bool(True)
    #: Whether the page shows the timeline now (set by the page: scrolled away, a hidden tab or browser tab is
    #: False; True without a page). Live redraws wait while False and run once when it comes back.
    on_screen = traitlets.Bool(True)
    #: The first lane drawn one by one when there are more than 30 (int >= 0, default 0): the "lanes from"
    #: box scrolls the window; the lanes outside it share one collapsed lane, counts kept.
    lane_offset = traitlets.Int(0)

    def __init__(self, log: EventLog | Iterable[Event] | None = None, *, kinds: Iterable[str] | None = None,
                 name_filter: str = "", source: str | None = None, max_points: int = 1000, live: bool = True,
                 throttle_s: float = 1.0, maxlen: int | None = None, fold_library: bool = True,
                 layout: widgets.Layout | None = None) -> None:
        from xlakit import events as _events

        self._setup_view()
        if log is None:
            log = _events.log()
        self.event_log = log if isinstance(log, EventLog) else None
        if self.event_log is None:
            try:
                fixed: list[Any] = list(log)
            except TypeError:  # 5 raised "'int' object is not iterable"
                fixed = [None]
            if not all(isinstance(e, Event) for e in fixed):
                raise TypeError(f"log must be an EventLog or an iterable of Event, got {type(log).__name__}")
        from xlakit._units import check_choice, check_flag, check_seconds

        throttle_s = check_seconds(throttle_s, "throttle_s")  # True read as 1.0 once the trait cast it
        check_flag(live, "live")  # the checkbox refused "no" without naming it
        if not isinstance(name_filter, str):
            raise TypeError(f"name_filter must be a str (a substring of names), got {type(name_filter).__name__}")
        try:  # the menu refused an unknown kind as "Invalid selection: value not found"
            for kind in kinds if kinds is not None and not isinstance(kinds, str) else [kinds] if kinds else ():
                check_choice(kind, "kinds", KINDS, optional=False)
        except (TypeError, ValueError) as e:
            raise traitlets.TraitError(str(e)) from None
        if maxlen is not None:  # 0 became the default (``maxlen or ...``), 1.5 and True were kept
            from xlakit._units import check_int

            maxlen = check_int(maxlen, "maxlen", minimum=1, what="number of events")
        self.columns = _data.EventColumns(maxlen if maxlen is not None else (
            self.event_log.maxlen if self.event_log is not None else 100_000))
        self._pending: list[Event] = []
        self._pending_lock = threading.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        self._worker: Worker | None = None
        self.data: _data.TimelineData | None = None

        self._kind_menu = widgets.SelectMultiple(options=list(KINDS), value=tuple(kinds or KINDS), rows=6,
                                                 description="kinds", layout=widgets.Layout(width="220px"))
        self._name_box = widgets.Text(value=name_filter, description="name", placeholder="substring",
                                      continuous_update=False, layout=widgets.Layout(width="260px"))
        self._source_menu = widgets.Dropdown(options=[("all sources", _ALL), *((s, s) for s in SOURCES)],
                                             value=_ALL if source is None else source,
                                             description="source", layout=widgets.Layout(width="220px"))
        self._live_box = widgets.Checkbox(value=live, description="live", indent=False,
                                          layout=widgets.Layout(width="80px"))
        self._fold_box = widgets.Checkbox(value=fold_library, description="fold library helpers", indent=False,
                                          layout=widgets.Layout(width="200px"))
        self._stale = False
        self._offset_box = widgets.BoundedIntText(value=0, min=0, max=0, description="lanes from",
                                                  layout=widgets.Layout(width="180px", display="none"))
        self.status = widgets.HTML()
        self.status.add_class("xlakit-timeline-status")
        # Why a miss happened: pick one (newest first) and its recorded reason shows below the chart.
        self._miss_menu = widgets.Dropdown(options=[("— explain a miss —", -1)], value=-1, description="misses",
                                           layout=widgets.Layout(width="auto", max_width="100%"))
        self._miss_menu.add_class("xlakit-miss-menu")
        self.miss_explanation = widgets.HTML()
        self.miss_explanation.add_class("xlakit-miss-explanation")
        #: the timeline (:class:`~xlakit.widgets._chart.Chart`); ``figure`` is its plotly Figure.
        self.chart = Chart()
        # A click on a miss marker picks that miss in the menu (the points' customdata are event rows).
        self._clicks = ClickBridge("xlakit-cache-timeline", self._guard(self._on_click, "click"),
                                   self._guard(self._on_screen_change, "visibility"))
        controls = widgets.HBox([self._kind_menu, widgets.VBox([self._name_box, self._source_menu,
                                                                widgets.HBox([self._live_box, self._fold_box]),
                                                                self._offset_box])],
                               layout=widgets.Layout(flex_flow="row wrap", max_width="100%"))  # narrow column: wrap
        self._owned = [self._kind_menu, self._name_box, self._source_menu, self._live_box, self._fold_box,
                       self._offset_box, self.status,
                       self.chart, controls, self.error_area, self._style, self._miss_menu, self.miss_explanation,
                       *self._clicks.widgets]
        super().__init__(children=[self._style, controls, self.error_area, self.status, self.chart, self._miss_menu,
                                   self.miss_explanation, *self._clicks.widgets],
                         kinds=tuple(kinds or KINDS), name_filter=name_filter, source=source, max_points=max_points,
                         live=live, throttle_s=throttle_s, fold_library=fold_library,
                         layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-cache-timeline")
        widgets.link((self._kind_menu, "value"), (self, "kinds"))
        widgets.link((self._name_box, "value"), (self, "name_filter"))
        widgets.link((self._source_menu, "value"), (self, "source"),
                     transform=(lambda v: None if v == _ALL else v, lambda v: _ALL if v is None else v))
        widgets.link((self._live_box, "value"), (self, "live"))
        widgets.link((self._fold_box, "value"), (self, "fold_library"))
        widgets.link((self._offset_box, "value"), (self, "lane_offset"))
        self.observe(self._guard(lambda _c: self._redraw(), "filter"),
                     names=["kinds", "name_filter", "source", "max_points", "fold_library", "lane_offset"])
        self.observe(self._guard(self._on_live, "live"), names=["live", "throttle_s"])
        self._miss_menu.observe(self._guard(lambda c: self.explain_miss(c["new"]), "explain miss"), names=["value"])
        self._cleanups.append(self._detach)
        if self.event_log is not None:
            self._attach()
        else:
            self.columns.extend(fixed)
        self._redraw()
        self._on_live(None)

    @property
    def figure(self) -> Any:
        """The timeline's ``plotly.graph_objects.Figure``."""
        return self.chart.figure

    # -- validation -------------------------------------------------------------------------------------
    @traitlets.validate("kinds")
    def _check_kinds(self, proposal: Any) -> tuple[str, ...]:
        bad = [k for k in proposal["value"] if k not in KINDS]
        if bad:
            raise traitlets.TraitError(f"unknown kind(s) {bad}; expected some of {KINDS}")
        return tuple(proposal["value"])

    @traitlets.validate("source")
    def _check_source(self, proposal: Any) -> str | None:
        if proposal["value"] not in (None, *SOURCES):
            raise traitlets.TraitError(f"unknown source {proposal['value']!r}; expected one of {SOURCES} or None")
        return proposal["value"]

    @traitlets.validate("throttle_s")
    def _check_throttle(self, proposal: Any) -> float:
        from xlakit._units import check_seconds

        try:  # -1 and NaN were taken: the redraw thread's wait
            return check_seconds(proposal["value"], "throttle_s")
        except (TypeError, ValueError) as e:
            raise traitlets.TraitError(str(e)) from None

    @traitlets.validate("max_points")
    def _check_points(self, proposal: Any) -> int:
        if proposal["value"] < 100:
            raise traitlets.TraitError(f"max_points must be >= 100 markers, got {proposal['value']}")
        return proposal["value"]

    # -- following the log ------------------------------------------------------------------------------
    def _attach(self) -> None:
        # Subscribe first, then copy the log: an event appended in between arrives twice and is dropped once.
        log = self.event_log
        if log is None:
            return
        self._unsubscribe = log.subscribe(self._on_event)
        existing = log.events()
        self.columns.extend(existing)
        with self._pending_lock:
            if self._pending:
                recent = {id(e) for e in existing[-len(self._pending) - 16:]}
                self._pending = [e for e in self._pending if id(e) not in recent]

    def _detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_event(self, event: Event) -> None:
        """The log's observer: runs on the appending thread, so it only queues the event."""
        with self._pending_lock:
            self._pending.append(event)
        worker = self._worker
        if worker is not None:
            worker.poke()

    def _on_live(self, _change: Any) -> None:
        self._stop_worker(self._worker)
        self._worker = None
        if self.live and self.event_log is not None and not self._closed:
            worker = self._start_worker(self._flush_and_redraw, None, throttle_s=self.throttle_s,
                                        where="live update")
            self._worker = worker
            with self._pending_lock:
                if self._pending:
                    worker.poke()

    def _flush(self) -> int:
        with self._pending_lock:
            pending, self._pending = self._pending, []
        return self.columns.extend(pending)

    def _flush_and_redraw(self) -> None:
        if (self._flush() or self._stale) and not self._closed:
            if self.on_screen:
                self._redraw()
            else:
                self._stale = True  # drawn once when the page shows the timeline again

    def _on_screen_change(self, shown: bool) -> None:
        self.on_screen = shown
        if shown and self._stale and not self._closed:
            self._redraw()

    def refresh(self) -> None:
        """Take the events that arrived since the last draw and redraw now (the live thread does this by
        itself; call it when ``live`` is off)."""
        self._flush()
        self._redraw()

    # -- drawing ----------------------------------------------------------------------------------------
    def _redraw(self) -> None:
        with self._lock:
            if self._closed:
                return
            data = _data.timeline_data(self.columns, kinds=self.kinds, name_filter=self.name_filter,
                                       source=self.source, max_points=self.max_points, fold_library=self.fold_library,
                                       lane_offset=self.lane_offset)
            self.data = data
            self._stale = False
            self._mark_changed()  # the saved notebook's snapshot follows (after the cell)
            self.chart.show(_figures.timeline_figure(data))
            first = "— explain a miss —" if not data.library_misses else \
                f"— explain a miss ({data.library_misses:,} of library helpers folded) —"
            options = [(first, -1), *((m["label"], m["index"]) for m in data.misses)]
            if list(self._miss_menu.options) != options:
                keep = self._miss_menu.value if any(v == self._miss_menu.value for _, v in options) else -1
                self._miss_menu.options = options
                self._miss_menu.value = keep
            sampled = f", {data.shown:,} markers drawn (one per lane, kind and time bin)" if data.downsampled else ""
            programs = len(self.columns.lanes)
            folded = (f" ({len(data.library)} library helper(s) folded into one lane)" if data.folded else
                      f" ({len(data.library)} of them library helpers)" if data.library else "")
            hidden = (f"; {data.hidden_lanes} lane(s) collapsed into the last (scroll with “lanes from”)"
                      if data.hidden_lanes else "")
            self._offset_box.max = len(data.lanes) - 1 + data.hidden_lanes - 30 if data.hidden_lanes else 0
            self._offset_box.layout.display = "" if data.hidden_lanes else "none"
            dropped = f"; {data.dropped:,} older events dropped (bounded)" if data.dropped else ""
            self.status.value = (f"<small><span class='xlakit-event-count' data-events='{data.total}'>"
                                 f"{data.total:,} events</span>, {data.matched:,} match{sampled}; "
                                 f"{programs} program(s){folded}{hidden}{dropped}; seconds saved by hits: "
                                 f"{fmt_seconds(data.saved_s).replace(' ', chr(0xA0))}</small>")  # "0 s" on one line

    def _on_click(self, rows: list[int]) -> None:
        """Clicked points (event rows, from the page): the first that is a miss drawn now is explained (and
        picked in the misses menu when it is among the menu's 200 newest); clicks on other kinds, or on a
        chart drawn before the last redraw whose rows no longer match, change nothing."""
        import numpy as np

        data = self.data
        drawn = data.points.get("miss", {}).get("index") if data is not None else None
        if drawn is None:
            return
        for row in rows:
            if np.any(drawn == row):
                if any(v == row for _, v in self._miss_menu.options) and self._miss_menu.value != row:
                    self._miss_menu.value = row  # its observer explains the miss
                else:
                    self.explain_miss(row)
                return

    def explain_miss(self, index: int | None) -> str:
        """Show why the miss at row ``index`` of :attr:`columns` happened (its recorded reason, key and
        partition); -1 or None clears. Returns the text shown."""

        if index is None or index < 0:
            self.miss_explanation.value = ""
            return ""
        a = self.columns.arrays()
        if index >= a["kind"].size or a["kind"][index] != "miss":
            raise ValueError(f"row {index} is not a miss")
        reason, _, why = miss_reason(a, index).partition("; it was retraced just before because ")
        text = (f"{a['name'][index]} missed: {reason} "
                f"(key {a['key'][index] or '—'}, partition {a['partition'][index] or '—'})")
        if why:  # the cache only knows the key is new; the retrace just before it knows what changed
            text += f"; it was retraced just before because {why}"
        self.miss_explanation.value = f"<p class='xlakit-note'>{html_text(text)}</p>"
        return text

    # -- display ----------------------------------------------------------------------------------------
    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: the timeline figure (at most :data:`SNAPSHOT_POINTS` markers, so a saved notebook
        stays small), the counts, and a per-function table of event kinds, with the current filters."""
        points = min(self.max_points, SNAPSHOT_POINTS)
        data = self.data
        if data is None or self._stale or points != self.max_points or data.total != len(self.columns):
            # the live chart's data is reused when it is the snapshot's (the default budget is the same): at
            # 100,000 events, displaying the widget built the timeline twice
            data = _data.timeline_data(self.columns, kinds=self.kinds, name_filter=self.name_filter,
                                       source=self.source, max_points=points, fold_library=self.fold_library,
                                       lane_offset=self.lane_offset)
        return _snapshots.timeline_html(data, include_plotlyjs=include_plotlyjs)

    def __repr__(self) -> str:
        d = self.data
        shown = f"{d.total} events, {d.matched} matching, {d.shown} drawn" if d else "not drawn"
        return f"CacheTimeline({shown}; live={self.live})"
