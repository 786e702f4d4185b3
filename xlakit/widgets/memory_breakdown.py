""":class:`MemoryBreakdown`: compiled memory per program as stacked bars; a program's buffers and liveness."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import traitlets

from xlakit._text.untrusted import html_text
from xlakit.view.programs import collect_programs
from xlakit.widgets import _data, _figures, _snapshots
from xlakit.widgets._base import View
from xlakit.widgets._chart import Chart

__all__ = ["MemoryBreakdown"]

_NONE = "\x00none"  # the dropdown's "no program" value (a Dropdown shows None as an empty box)


class MemoryBreakdown(View, widgets.VBox):
    """Stacked bars of the bytes each compiled program needs, with a peak marker; pick one to see its buffers.

    Bars per program (from :func:`xlakit.memory.compiled_memory`): arguments, outputs, temporaries, code and
    the host twins stacked upwards; aliased (donated) bytes, counted in both arguments and outputs, drawn
    below zero as a reduction, so the net height is what one run reserves. A dash marks XLA's peak; on CPU,
    where XLA:CPU's peak leaves out temporaries, it is labelled so and a second dash marks the footprint.
    Fields the backend does not report get no bar (never a fake 0). Selecting a program (the dropdown) shows
    its largest buffers at the peak (from :func:`xlakit.memory.peak`: role, source, layer, parameter, shape,
    bytes charged at the peak; XLA's :meth:`xlakit.memory.BufferAssignment.largest` only where the peak cannot
    be attributed), its live bytes over program order with the peak step marked and named (the peak's top
    source and scope, from :func:`xlakit.memory.peak`), each large buffer's lifetime as a bar over program
    order coloured by role, and a treemap of the buffers live at the peak by source and scope
    (:mod:`xlakit.view.memory_charts`, :mod:`xlakit.view.peak`). Where the peak cannot be attributed, the widget
    says why and shows the rest.

    Args:
      programs: a ``jax.stages.Compiled``; a dict name -> Compiled (or ``CompiledMemory``, or anything
        ``compiled_memory`` takes); an ``ExecutableCache``, the cache ``xlakit.enable_cache()`` returns or a
        ``LocalStore`` (memory recorded in each entry at compile time; no buffer assignment); a
        :class:`~xlakit.bundle.LoadedBundle` (one bar per loaded module); or any object with
        ``__xlakit_programs__()`` returning such a dict. None: no programs. Default None.
      unit: initial :attr:`unit`. sort: initial :attr:`sort`. selected: initial :attr:`selected` (default: the
        program, when there is exactly one).
      top: initial :attr:`top`. layout: an ``ipywidgets.Layout`` for the box (default: full width).

    Raises:
      TypeError: ``programs`` is of an unsupported type, or an unknown keyword argument.
      traitlets.TraitError: an invalid ``unit``, ``sort`` or ``selected``.
    """

    _title = "xlakit memory breakdown"

    #: Bar heights in ``"bytes"`` or ``"percent"`` of each program's total (str, default ``"bytes"``).
    unit = traitlets.Enum(_data.UNITS, default_value="bytes")
    #: Program order: ``"name"`` (A→Z) or largest first by ``"total"``, ``"footprint"``, ``"peak"``,
    #: ``"argument"``, ``"output"``, ``"temp"`` bytes (str, default ``"name"``).
    sort = traitlets.Enum(_data.SORT_KEYS, default_value="name")
    #: The program whose buffers and liveness are shown, by label, or None (str | None, default None).
    selected = traitlets.Unicode(None, allow_none=True)
    #: How many of the largest buffers to list (int, default 10, buffers).
    top = traitlets.Int(10)

    def __init__(self, programs: Any = None, *, unit: str = "bytes", sort: str = "name",
                 selected: str | None = None, top: int = 10, fold_library: bool = True,
                 layout: widgets.Layout | None = None) -> None:
        from xlakit._units import check_choice

        # named here: the toggle and the menu refused them as "Invalid selection: value not found"
        try:
            check_choice(unit, "unit", _data.UNITS, optional=False)
            check_choice(sort, "sort", _data.SORT_KEYS, optional=False)
        except (TypeError, ValueError) as e:
            raise traitlets.TraitError(str(e)) from None
        self._setup_view()
        self._source = programs
        #: leave out a cache's programs called only from inside jax/flax/optax (as the cache's or this process's
        #: events say); their number, names and bytes are in the status line. Only cache sources fold.
        self.fold_library = fold_library
        self._programs = self._collect()
        self._assignments: dict[str, Any] = {}
        self.largest = None
        self.liveness = None
        #: the selected program's :class:`xlakit.memory.Peak` (None when not available; ``detail_note`` says why).
        self.peak: Any = None
        self.detail_note: str | None = None
        self.frame = _data.breakdown_frame(self._programs.memories, sort)

        self._unit_toggle = widgets.ToggleButtons(options=[("bytes", "bytes"), ("%", "percent")], value=unit,
                                                  style={"button_width": "60px"})
        # the toggle's own description sat above its buttons in JupyterLab (a JupyterLab trial, 2026-12-06): a
        # label beside them, on their line, as "sort" and "program" are beside their menus
        unit_label = widgets.Label("unit", layout=widgets.Layout(width="auto", margin="0 4px 0 8px"))
        unit_control = widgets.HBox([unit_label, self._unit_toggle], layout=widgets.Layout(align_items="center"))
        self._sort_menu = widgets.Dropdown(options=list(_data.SORT_KEYS), value=sort, description="sort",
                                           layout=widgets.Layout(width="180px"))
        self._program_menu = widgets.Dropdown(options=self._menu_options(), value=_NONE, description="program",
                                              layout=widgets.Layout(width="420px"))
        self._program_menu.add_class("xlakit-program-menu")
        #: the bar chart (:class:`~xlakit.widgets._chart.Chart`); ``figure`` is its plotly Figure.
        self.chart = Chart()
        #: live bytes over program order of the selected program.
        self.detail_chart = Chart()
        #: each large buffer of the selected program over program order, coloured by role.
        self.lifetime_chart = Chart()
        #: the buffers live at the selected program's peak, by source and scope, coloured by role.
        self.treemap_chart = Chart()
        self._peak_box = widgets.VBox([self.lifetime_chart, self.treemap_chart],
                                      layout=widgets.Layout(display="none", width="100%"))
        self._detail_box = widgets.VBox([self.detail_chart, self._peak_box],
                                        layout=widgets.Layout(display="none", width="100%"))
        self.details = widgets.HTML()
        self.status = widgets.HTML()
        controls = widgets.HBox([unit_control, self._sort_menu, self._program_menu],
                                layout=widgets.Layout(flex_flow="row wrap"))
        self._owned = [self._unit_toggle, unit_label, unit_control, self._sort_menu, self._program_menu, self.chart,
                       self.detail_chart, self.lifetime_chart, self.treemap_chart, self._peak_box, self._detail_box,
                       self.details, self.status, self.error_area, self._style, controls]
        super().__init__(children=[self._style, controls, self.error_area, self.chart, self.status, self.details,
                                   self._detail_box],
                         unit=unit, sort=sort, top=top, layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-memory-breakdown")
        widgets.link((self._unit_toggle, "value"), (self, "unit"))
        widgets.link((self._sort_menu, "value"), (self, "sort"))
        widgets.link((self._program_menu, "value"), (self, "selected"),
                     transform=(lambda v: None if v == _NONE else v, lambda v: _NONE if v is None else v))
        self.observe(self._guard(lambda _change: self._redraw(), "redraw"), names=["unit", "sort"])
        self.observe(self._guard(lambda _change: self._show_selected(), "select"), names=["selected", "top"])
        self._redraw()
        self._show_selected()
        if selected is None and len(self._programs.memories) == 1:  # the only program: shown without a click
            selected = next(iter(self._programs.memories))
        if selected is not None:
            self.selected = selected

    # -- state ------------------------------------------------------------------------------------------
    @property
    def figure(self) -> Any:
        """The bar chart's ``plotly.graph_objects.Figure`` (what the page draws)."""
        return self.chart.figure

    @property
    def detail_figure(self) -> Any:
        """The selected program's liveness ``Figure``."""
        return self.detail_chart.figure

    @property
    def lifetime_figure(self) -> Any:
        """The selected program's buffer-lifetime ``Figure``."""
        return self.lifetime_chart.figure

    @property
    def treemap_figure(self) -> Any:
        """The selected program's peak treemap ``Figure``."""
        return self.treemap_chart.figure

    @property
    def program_names(self) -> tuple[str, ...]:
        """Program labels in display (sorted) order."""
        return tuple(str(p) for p in self.frame.index)

    @property
    def memories(self) -> dict[str, Any]:
        """label -> :class:`~xlakit.memory.CompiledMemory` of every program shown."""
        return dict(self._programs.memories)

    @traitlets.validate("top")
    def _check_top(self, proposal: Any) -> int:
        from xlakit.widgets._base import checked_count

        return checked_count(proposal["value"], "top", "rows shown")

    @traitlets.validate("selected")
    def _check_selected(self, proposal: Any) -> Any:
        value = proposal["value"]
        if value is not None and value not in self._programs.memories:
            raise traitlets.TraitError(f"no program {value!r}; programs: {sorted(self._programs.memories)}")
        return value

    def select(self, name: str | None) -> None:
        """Show the buffers and liveness of program ``name`` (None clears the selection)."""
        self.selected = name

    def refresh(self) -> None:
        """Read the programs again (e.g. new entries in a cache) and redraw."""
        with self._lock:
            self._programs = self._collect()
            self._assignments.clear()
            self._program_menu.options = self._menu_options()
            if self.selected is not None and self.selected not in self._programs.memories:
                self.selected = None
            self._redraw()
            self._show_selected()

    def _collect(self) -> Any:
        from xlakit.events import EventLog
        from xlakit.events import log as process_log

        own = getattr(self._source, "log", None)
        events = (own if isinstance(own, EventLog) else process_log()).events() if self.fold_library else None
        return collect_programs(self._source, fold_library=self.fold_library, events=events)

    # -- drawing ----------------------------------------------------------------------------------------
    def _menu_options(self) -> list[tuple[str, str | None]]:
        return [("—", _NONE), *((label, label) for label in sorted(self._programs.memories))]

    def _redraw(self) -> None:
        with self._lock:
            self.frame = _data.breakdown_frame(self._programs.memories, self.sort)
            self.chart.show(_figures.breakdown_figure(self.frame, self.unit))
            n = len(self.frame)
            self.status.value = (f"<small>{n} program(s) from {html_text(self._programs.origin)}; "
                                 f"{'percent of each program total' if self.unit == 'percent' else 'bytes'}, "
                                 f"sorted by {self.sort}"
                                 + (f"; {html_text(self._programs.library_note())}" if self._programs.library
                                    else "") + "</small>")

    def _show_selected(self) -> None:
        with self._lock:
            name = self.selected
            self.largest = self.liveness = self.peak = None
            self.detail_note = None
            if name is None:
                self.details.value = _snapshots.details_html(None, None)
                self._detail_box.layout.display = self._peak_box.layout.display = "none"
                return
            notes: list[str] = []
            assignment = self._assignment(name, notes)
            if assignment is not None:
                try:
                    self.largest = assignment.largest(self.top)
                except ValueError as exc:
                    notes.append(f"largest buffers: {exc}")
                try:
                    self.liveness = assignment.live_bytes_by_step()
                except ValueError as exc:
                    notes.append(f"liveness: {exc}")
                self.peak = self._peak(name, notes)
            if self.liveness is not None and self.liveness.attrs.get("source"):
                notes.append(f"liveness: {self.liveness.attrs['source']}")
            self.detail_note = "; ".join(notes) or None
            self.details.value = _snapshots.details_html(name, self.largest, self.detail_note,
                                                         peak_buffers=self._peak_buffers(), top=self.top)
            for chart, fig in zip((self.detail_chart, self.lifetime_chart, self.treemap_chart),
                                  self._detail_figures(name), strict=False):
                chart.show(fig)
            self._detail_box.layout.display = "" if self.liveness is not None or self.peak is not None else "none"
            self._peak_box.layout.display = "" if self.peak is not None else "none"

    def _load_entry(self, name: str, notes: list[str]) -> Any:
        """The program of cache entry ``name`` loaded through the cache shown (an ``ExecutableCache``: its
        ``load(key)``), or None (no key, a folder that cannot load, or the load failed: said in ``notes``)."""
        key = self._programs.keys.get(name)
        load = getattr(self._source, "load", None)
        if key is None or not callable(load):
            return None
        try:
            program = load(key)
        except Exception as exc:  # noqa: BLE001 - an entry that does not load still shows its recorded totals
            why = exc.args[0] if isinstance(exc, KeyError) and exc.args else f"{type(exc).__name__}: {exc}"
            notes.append(f"cache entry {key[:16]}… not loaded: {why}")
            return None
        self._programs.programs[name] = program
        notes.append(f"buffers from cache entry {key[:16]}…, loaded (not compiled)")
        return program

    def _peak(self, name: str, notes: list[str]) -> Any:
        """:func:`xlakit.memory.peak` of the selected program, or None with the reason in ``notes``."""
        from xlakit import memory

        peak = getattr(memory, "peak", None)
        if peak is None:  # an xlakit without source attribution
            notes.append("peak attribution: this xlakit has no xlakit.memory.peak")
            return None
        try:
            return peak(self._programs.programs[name])
        except (TypeError, ValueError) as exc:  # not attributable: say why, not an error
            notes.append(f"peak attribution not available: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001 - a decoding fault must not hide the rest of the view
            self._show_error("peak attribution", exc)
            notes.append(f"peak attribution failed: {type(exc).__name__}: {exc}")
            return None

    def _peak_buffers(self) -> Any:
        """The selected program's ``Peak.buffers`` (the largest-buffers table in the user's terms), or None."""
        buffers = getattr(self.peak, "buffers", None)
        return buffers if buffers is not None and not buffers.empty else None

    def _detail_figures(self, name: str) -> list[Any]:
        """[liveness (peak marked), and with a peak: lifetimes, treemap] of the selected program."""
        from xlakit.view.memory_charts import lifetime_chart
        from xlakit.view.peak import peak_caption, peak_treemap_figure, peak_treemap_nodes

        pk = self.peak
        if pk is None:
            return [] if self.liveness is None else [_figures.liveness_figure(self.liveness, name)]
        caption = peak_caption(pk.buffers)
        attribution = getattr(pk, "attribution", None)
        live = getattr(attribution, "liveness", None)
        live = live if live is not None and not live.empty else self.liveness
        figs = [_figures.liveness_figure(live, name, peak_step=pk.step, caption=caption)]
        if attribution is not None:
            figs.append(lifetime_chart(attribution.buffers, peak_step=pk.step,
                                       title=f"Buffer lifetimes: {name} (largest buffers, coloured by role)"))
        figs.append(peak_treemap_figure(peak_treemap_nodes(pk.buffers, ("source", "scope")),
                                        title=f"What holds the peak of {name}: source → scope → buffer"))
        return figs

    def _assignment(self, name: str, notes: list[str]) -> Any:
        if name in self._assignments:
            return self._assignments[name]
        program = self._programs.programs.get(name)
        if program is None:
            program = self._load_entry(name, notes)
        if program is None:
            notes.append(self._programs.notes.get(name, "no compiled program to decode"))
            return None
        from xlakit.memory import buffer_assignment

        try:
            assignment = buffer_assignment(program)
        except (TypeError, ValueError) as exc:  # not available for this program: say why, not an error
            notes.append(f"buffer assignment not available: {exc}")
            return None
        self._assignments[name] = assignment
        return assignment

    # -- display ----------------------------------------------------------------------------------------
    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: the bar chart, one table row per program (exact bytes), and the selection."""
        figures = self._detail_figures(self.selected) if self.selected is not None else []
        return _snapshots.breakdown_html(self.frame, self.unit, include_plotlyjs=include_plotlyjs,
                                         selected=self.selected, largest=self.largest, liveness=self.liveness,
                                         detail_note=self.detail_note, detail_figures=figures,
                                         peak_text=repr(self.peak) if self.peak is not None else None,
                                         peak_buffers=self._peak_buffers(), top=self.top,
                                         notes=[f"programs from {self._programs.origin}",
                                                *([self._programs.library_note()] if self._programs.library else [])])

    def __repr__(self) -> str:
        return (f"MemoryBreakdown({len(self.frame)} program(s) from {self._programs.origin}; unit={self.unit}, "
                f"sort={self.sort}, selected={self.selected!r})")
