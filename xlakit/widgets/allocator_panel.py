""":class:`AllocatorPanel`: per-device memory in use, peak and limit, with a Reset peak button per device."""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
import traitlets

from xlakit._text.format import fmt_bytes
from xlakit._text.untrusted import html_text
from xlakit.view.allocator import bytes_span
from xlakit.widgets import _data, _snapshots
from xlakit.widgets._base import View, Worker

if TYPE_CHECKING:
    from xlakit.memory import ResetResult

__all__ = ["AllocatorPanel"]

# Column order puts the Reset peak button next to the device, so it is on screen in a narrow window. Each cell
# carries its own label and a row wraps onto more lines where the output is narrower than its cells (a header
# row above rows that scrolled sideways as a whole ran 1,350 px wide, its last columns off screen with no hint).
_WIDTHS = {"device": "120px", "reset": "100px", "in_use": "170px", "peak": "230px", "limit": "100px",
           "largest": "110px", "count": "100px", "spark": "140px", "method": "240px"}
_HEAD = {"device": "device", "in_use": "in use", "peak": "peak", "limit": "limit", "largest": "largest alloc.",
         "count": "allocations", "spark": "in use over time", "reset": "", "method": "last reset"}
#: Row keys of the columns left out while no device reports them (CPU: limit, largest allocation and count;
#: the panel's note says so).
_OPTIONAL = {"limit": "limit", "largest": "largest_alloc", "count": "num_allocs"}


def _bytes_html(n: int | None) -> str:
    return bytes_span(n)


def _cell_layout(column: str) -> widgets.Layout:
    """Fixed-width cells that neither grow nor shrink, so the cells of every row line up."""
    return widgets.Layout(flex="0 0 auto", width=_WIDTHS[column], margin="0 8px 4px 0")


class _Row:
    """The widgets of one device's row: per column a box of its label over its value."""

    def __init__(self, index: int, device: Any, on_reset: Any) -> None:
        self.device = device
        self.cells = {k: widgets.HTML() for k in _WIDTHS if k != "reset"}
        self.cells["device"].value = f"<b>{html_text(device)}</b>"
        self.cells["peak"].add_class("xlakit-peak")
        self.cells["peak"].add_class(f"xlakit-peak-{index}")
        self.cells["in_use"].add_class(f"xlakit-in-use-{index}")
        self.cells["method"].add_class(f"xlakit-reset-method-{index}")
        self.button = widgets.Button(description="Reset peak", tooltip=_reset_tooltip(device),
                                     layout=widgets.Layout(width="100%"))
        self.button.add_class("xlakit-reset-peak")
        self.button.add_class(f"xlakit-reset-peak-{index}")
        self.button.on_click(on_reset)
        self.labels = {k: widgets.HTML(f"<span class='xlakit-note'>{_HEAD[k] or '&nbsp;'}</span>") for k in _WIDTHS}
        self.columns = {k: widgets.VBox([self.labels[k], self.cells[k] if k != "reset" else self.button],
                                        layout=_cell_layout(k)) for k in _WIDTHS}
        self.box = widgets.HBox(list(self.columns.values()),
                                layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start", width="100%"))
        self.box.add_class("xlakit-allocator-row")

    def show_columns(self, hidden: set[str]) -> None:
        for k, column in self.columns.items():
            column.layout.display = "none" if k in hidden else None

    def widgets(self) -> list[widgets.Widget]:
        return [*self.cells.values(), *self.labels.values(), *self.columns.values(), self.button, self.box]


class AllocatorPanel(View, widgets.VBox):
    """One row per device: bytes in use, peak since reset, limit, largest allocation, allocation count, a
    sparkline of bytes in use over time, and a **Reset peak** button (plus one for all devices).

    A view over :func:`xlakit.memory.allocator_stats` and :func:`xlakit.memory.reset_peak`. Each reset shows
    the method that ran (``native``, ``clear_refs`` — the process high-water mark on CPU — or ``baseline``)
    and its detail. The peak shown is the peak since the last reset when there was one (exact, or "at most"
    after a baseline reset whose peak did not rise), else the lifetime peak. On CPU, where XLA keeps no
    allocator statistics, "in use" is the exact sum of live JAX arrays and the peak is the process resident
    high-water mark (``VmHWM``); limit, largest allocation and count are not reported.

    Auto-refresh runs on a daemon thread (never the kernel's) and stops on :meth:`close`.

    Args:
      devices: ``jax.Device`` objects or device ids (or objects with ``memory_stats()``, ``id`` and
        ``platform``); None for every local device (``jax.local_devices()``). Default None.
      refresh_s: initial :attr:`refresh_s` (float seconds, default 1.0).
      auto_refresh: initial :attr:`auto_refresh` (bool, default True).
      history_len: initial :attr:`history_len` (int samples, default 120).
      layout: an ``ipywidgets.Layout`` for the box.

    Raises:
      TypeError: an unknown keyword argument, or a device that is not one.
      ValueError: no device with a given id; ``refresh_s`` <= 0.
    """

    _title = "xlakit allocator"

    #: Re-read the numbers every :attr:`refresh_s` seconds on a background thread (bool, default True).
    auto_refresh = traitlets.Bool(True)
    #: Seconds between automatic refreshes (float > 0, default 1.0 s).
    refresh_s = traitlets.Float(1.0)
    #: Samples of bytes in use kept per device for the sparkline (int > 0, default 120 samples).
    history_len = traitlets.Int(120)

    def __init__(self, devices: Any = None, refresh_s: float = 1.0, *, auto_refresh: bool = True,
                 history_len: int = 120, layout: widgets.Layout | None = None) -> None:
        from xlakit._units import check_seconds
        from xlakit.widgets._base import checked_count

        refresh_s = check_seconds(refresh_s, "refresh_s", positive=True)  # NaN spun the thread, "1" a bare error
        history_len = checked_count(history_len, "history_len", "samples kept per device")
        self._setup_view()
        self.devices = _resolve_devices(devices)
        #: the latest readings, one :class:`~xlakit.memory.AllocatorStats` per device (tuple).
        self.stats: tuple[Any, ...] = ()
        self._history: dict[str, collections.deque] = {str(d): collections.deque(maxlen=history_len)
                                                       for d in self.devices}
        #: device name -> the :class:`~xlakit.memory.ResetResult` of its last reset from this panel.
        self.last_reset: dict[str, Any] = {}
        #: the :class:`~xlakit.memory.ResetResult` of the last "Reset all" (or None).
        self.reset_all_result: ResetResult | None = None
        self._worker: Worker | None = None

        self._rows = [_Row(i, d, self._guard(lambda _b, d=d: self.reset(d), f"reset {d}"))
                      for i, d in enumerate(self.devices)]
        self.reset_all_button = widgets.Button(description="Reset all peaks", button_style="warning",
                                               tooltip="reset the memory peak of every device")
        self.reset_all_button.add_class("xlakit-reset-all")
        self.reset_all_button.on_click(self._guard(lambda _b: self.reset(None), "reset all"))
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(self._guard(lambda _b: self.refresh(), "refresh"))
        self._auto_box = widgets.Checkbox(value=auto_refresh, description="auto-refresh", indent=False,
                                          layout=widgets.Layout(width="120px"))
        self._auto_box.add_class("xlakit-auto-refresh")
        self._interval = widgets.BoundedFloatText(value=refresh_s, min=0.05, max=3600, step=0.5,
                                                  description="every (s)", layout=widgets.Layout(width="160px"))
        self.reset_all_label = widgets.HTML()
        self.reset_all_label.add_class("xlakit-reset-all-method")
        self.notes = widgets.HTML()
        self.updated = widgets.HTML()
        self.updated.add_class("xlakit-updated")
        controls = widgets.HBox([self.reset_all_button, self.refresh_button, self._auto_box, self._interval,
                                 self.updated], layout=widgets.Layout(flex_flow="row wrap"))
        self._rows_box = widgets.VBox([r.box for r in self._rows], layout=widgets.Layout(width="100%"))
        self._rows_box.add_class("xlakit-allocator-rows")
        self._owned = [*(w for r in self._rows for w in r.widgets()), self.reset_all_button,
                       self.refresh_button, self._auto_box, self._interval, self.reset_all_label, self.notes,
                       self.updated, controls, self.error_area, self._style, self._rows_box]
        super().__init__(children=[self._style, controls, self.reset_all_label, self.error_area, self._rows_box,
                                   self.notes],
                         refresh_s=refresh_s, auto_refresh=auto_refresh, history_len=history_len,
                         layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-allocator-panel")
        widgets.link((self._auto_box, "value"), (self, "auto_refresh"))
        widgets.link((self._interval, "value"), (self, "refresh_s"))
        self.observe(self._guard(self._on_auto, "auto-refresh"), names=["auto_refresh", "refresh_s"])
        self.observe(self._guard(self._on_history_len, "history"), names=["history_len"])
        self.refresh()
        self._on_auto(None)

    # -- state ------------------------------------------------------------------------------------------
    @traitlets.validate("history_len")
    def _check_history(self, proposal: Any) -> int:
        from xlakit.widgets._base import checked_count

        return checked_count(proposal["value"], "history_len", "samples kept per device")

    @traitlets.validate("refresh_s")
    def _check_interval(self, proposal: Any) -> float:
        from xlakit._units import check_seconds

        try:
            return check_seconds(proposal["value"], "refresh_s", positive=True)
        except (TypeError, ValueError) as e:
            raise traitlets.TraitError(str(e)) from None

    @property
    def history(self) -> dict[str, list[tuple[float, int | None]]]:
        """device name -> [(time.time(), bytes in use), ...], oldest first."""
        return {k: list(v) for k, v in self._history.items()}

    @property
    def rows(self) -> list[dict[str, Any]]:
        """What the table shows, one dict per device (see :func:`xlakit.widgets._data.allocator_rows`)."""
        return _data.allocator_rows(self.stats)

    @property
    def reset_buttons(self) -> dict[str, widgets.Button]:
        """device name -> its **Reset peak** button."""
        return {str(r.device): r.button for r in self._rows}

    @property
    def cells(self) -> dict[str, dict[str, widgets.HTML]]:
        """device name -> column -> the ``HTML`` widget showing it (device, in_use, peak, limit, largest, count,
        spark, method)."""
        return {str(r.device): dict(r.cells) for r in self._rows}

    def peaks(self) -> dict[str, int | None]:
        """device name -> the peak shown (bytes, or None when not reported)."""
        return {r["device"]: r["peak"] for r in self.rows}

    # -- actions ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read every device's numbers now and update the rows (called by the auto-refresh thread too)."""
        from xlakit.memory import allocator_stats

        with self._lock:
            if self._closed:
                return
            self.stats = tuple(allocator_stats(d) for d in self.devices)
            now = time.time()
            for s, row in zip(self.stats, self._rows, strict=True):
                self._history.setdefault(str(row.device), collections.deque(maxlen=self.history_len)).append(
                    (now, s.bytes_in_use))
            rows = self.rows
            for r, row in zip(rows, self._rows, strict=True):
                c = row.cells
                c["in_use"].value = _bytes_html(r["in_use"]) + (
                    "" if r["process_rss"] is None else
                    f" <small class='xlakit-note' title='resident set of the whole process (VmRSS)'>process "
                    f"{fmt_bytes(r['process_rss'])}</small>")
                c["peak"].value = _snapshots.peak_cell(r)
                c["limit"].value = _bytes_html(r["limit"])
                c["largest"].value = _bytes_html(r["largest_alloc"])
                c["count"].value = (_bytes_html(None) if r["num_allocs"] is None
                                    else f"<span data-count='{int(r['num_allocs'])}'>{int(r['num_allocs']):,}</span>")
                c["spark"].value = _data.sparkline_svg([b for _, b in self._history[str(row.device)]])
                c["method"].value = _reset_cell(_latest_reset(self.last_reset.get(str(row.device)), row.device))
            hidden = {k for k, key in _OPTIONAL.items() if all(r[key] is None for r in rows)}
            for row in self._rows:
                row.show_columns(hidden)
            self.updated.value = f"<small>updated {time.strftime('%H:%M:%S')}</small>"
            self.notes.value = self._notes_html()

    def reset(self, device: Any = None) -> Any:
        """Reset the peak of ``device`` (None: every device of this panel, as "Reset all peaks") with
        :func:`xlakit.memory.reset_peak`, show which method ran, and refresh. Returns the ResetResult."""
        from xlakit.memory import reset_peak

        with self._lock:
            if device is None:
                results = [reset_peak(d) for d in self.devices] if self._custom_devices() else [reset_peak(None)]
                result = results[-1] if len(results) == 1 else _merge(results)
                self.reset_all_result = result
                for d in self.devices:
                    self.last_reset[str(d)] = result
                self.reset_all_label.value = f"<small>Reset all: {_snapshots.reset_text(result)}</small>"
            else:
                result = reset_peak(device)
                self.last_reset[str(device)] = result
            self.refresh()
            return result

    def _custom_devices(self) -> bool:
        import jax

        return [str(d) for d in self.devices] != [str(d) for d in jax.local_devices()]

    # -- auto refresh -----------------------------------------------------------------------------------
    def _on_auto(self, _change: Any) -> None:
        self._stop_worker(self._worker)
        self._worker = None
        if self.auto_refresh and not self._closed:
            self._worker = self._start_worker(self.refresh, self.refresh_s, where="auto-refresh")

    def _on_history_len(self, change: Any) -> None:
        for k, old in list(self._history.items()):
            self._history[k] = collections.deque(old, maxlen=change["new"])

    # -- display ----------------------------------------------------------------------------------------
    def _notes_html(self) -> str:
        return "".join(f"<p class='xlakit-note'>{html_text(n)}</p>" for n in self._notes())

    def _notes(self) -> list[str]:
        """What "in use" and the peak count on this platform and, after a reset, what the reset set the peak to
        and what the peak shown means (:mod:`xlakit.memory.reset_meaning`), then where "in use" comes from."""
        from xlakit.view.allocator import peak_notes

        if not self.stats:
            return []
        s = self.stats[0]
        reset = self.reset_all_result or self.last_reset.get(s.device)
        return [*peak_notes(s, reset), f"in use: {s.sources.get('bytes_in_use', '')}"]

    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: one table row per device (exact bytes) with its sparkline and last reset."""
        histories = {k: [b for _, b in v] for k, v in self._history.items()}
        return _snapshots.allocator_html(self.rows, histories, self.last_reset, self.reset_all_result,
                                         notes=self._notes())

    def __repr__(self) -> str:
        peaks = ", ".join(f"{k}: peak {fmt_bytes(v)}" for k, v in self.peaks().items())
        return f"AllocatorPanel({peaks or 'no devices'}; auto_refresh={self.auto_refresh}, every {self.refresh_s} s)"


def _latest_reset(mine: Any, device: Any) -> Any:
    """The reset the peak column measures from: this panel's, or a later one made elsewhere in the process
    (``reset_peak()``, a probe): the peak read 'since reset: +114 MiB' while this column was empty."""
    from xlakit.memory.allocator import last_reset

    recorded = last_reset(device)
    if recorded is None or (mine is not None and mine.time >= recorded.time - 0.5):
        return mine
    return recorded


def _reset_cell(result: Any) -> str:
    """The last reset of a row: what kind, when, what the peak starts from; the call made in its tooltip (and,
    for a reset made outside the panel, in the text)."""
    from xlakit.memory.allocator import RECORDED_RESET

    if result is None:
        return ""
    text = _snapshots.reset_text(result)
    if result.detail == RECORDED_RESET:
        text += ", by reset_peak() outside this panel (memory.probe resets it too)"
    return f"<span title='{html_text(result.detail)}'>{html_text(text)}</span>"


def _reset_tooltip(device: Any) -> str:
    """What the button will do for ``device``, before it is pressed: the reset this platform gets."""
    from xlakit.memory.reset_meaning import reset_meaning

    method = "clear_refs" if str(getattr(device, "platform", "")) == "cpu" else None
    meaning = reset_meaning(method)
    if meaning is None:
        return f"reset the memory peak of {device}: the allocator's own reset where the device has one, else a baseline"
    return f"reset the memory peak of {device} to what the whole process holds now (not zero): {meaning.mechanism}"


def _merge(results: list[Any]) -> Any:
    """One ResetResult for several (devices of a panel that is not all local devices)."""
    import dataclasses

    methods = sorted({r.method for r in results})
    method = methods[0] if len(methods) == 1 else "mixed:" + ",".join(methods)
    details = list(dict.fromkeys(r.detail for r in results))
    peaks = {k: v for r in results for k, v in r.peak_at_reset.items()}
    devices = tuple(d for r in results for d in r.devices)
    return dataclasses.replace(results[-1], method=method, devices=devices, detail="; ".join(details),
                               peak_at_reset=peaks)


def _resolve_devices(devices: Any) -> list[Any]:
    import jax

    if devices is None:
        return list(jax.local_devices())
    if isinstance(devices, (int, str)) or hasattr(devices, "memory_stats"):
        devices = [devices]
    out = []
    for d in devices:
        if isinstance(d, int) and not isinstance(d, bool):
            match = [x for x in jax.devices() if x.id == d]
            if not match:
                raise ValueError(f"no device with id {d}; devices: {[x.id for x in jax.devices()]}")
            out.append(match[0])
        elif hasattr(d, "memory_stats") and hasattr(d, "id"):
            out.append(d)
        else:
            raise TypeError(f"expected jax.Device objects or device ids, got {type(d).__name__}")
    return out
