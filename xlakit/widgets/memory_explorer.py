""":class:`MemoryExplorer`: a batch-size slider and remat/donation choices that recompile a function in the
background and redraw what holds its peak."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import traitlets

from xlakit._text.format import fmt_bytes, fmt_seconds
from xlakit._text.table import Column, Table
from xlakit._text.untrusted import html_text, html_wrappable
from xlakit.view.html import note
from xlakit.widgets._base import View, Worker
from xlakit.widgets._chart import Chart

__all__ = ["MemoryExplorer", "ExplorerResult", "DEFAULT_REMAT", "DEFAULT_DONATIONS"]

_NO_REMAT = "none"
#: Remat choices: label -> the ``jax.checkpoint_policies`` name (None: ``jax.checkpoint`` with no policy, which
#: saves nothing and recomputes everything). ``"none"`` compiles ``fn`` as given.
DEFAULT_REMAT: dict[str, str | None] = {_NO_REMAT: None, "checkpoint (save nothing)": None,
                                        "checkpoint (save dots)": "dots_saveable",
                                        "checkpoint (save dots without batch dims)": "dots_with_no_batch_dims_saveable"}
#: Donation choices: label -> ``donate_argnums``.
DEFAULT_DONATIONS: dict[str, tuple[int, ...]] = {"none": (), "argument 0": (0,)}


@dataclasses.dataclass(frozen=True)
class ExplorerResult:
    """One compiled variant: batch size, remat and donation labels, and what its peak is (or the error).

    Attributes:
      peak: :func:`xlakit.memory.peak` of the compiled program (None on error).
      compile_s: seconds to build the arguments, lower and compile (or load from the cache).
      decision: how the program was obtained: ``"compiled"`` (no cache), or the cache's decision kind
        (``"hit"``, ``"store"``, ``"skip"``...).
      error: ``"ExcType: message"`` when the variant failed (None otherwise).
    """

    batch: int
    remat: str
    donate: str
    peak: Any = dataclasses.field(default=None, repr=False)
    compile_s: float | None = None
    decision: str | None = None
    error: str | None = None

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.batch, self.remat, self.donate)

    @property
    def peak_bytes(self) -> int | None:
        return None if self.peak is None else int(self.peak.total_bytes)

    @property
    def footprint_bytes(self) -> int | None:
        """XLA's footprint of the variant's program (argument + output − alias + temp, from
        ``memory_analysis()``): what one run reserves, the number to budget with. Donation can raise the
        logical peak a little (a donated argument's buffer is reused in place) while it lowers this."""
        memory = getattr(getattr(self.peak, "attribution", None), "memory", None)
        value = getattr(memory, "footprint_bytes", None)
        return None if value is None else int(value)

    def __repr__(self) -> str:
        # readable numbers (it printed compile_s=0.19855613100025948 in notebook 02)
        head = f"ExplorerResult(batch={self.batch}, remat={self.remat!r}, donate={self.donate!r}"
        if self.error is not None:
            return f"{head}: failed: {self.error})"
        took = f"{self.decision or 'compiled'} in {fmt_seconds(self.compile_s)}"
        return (f"{head}: peak {fmt_bytes(self.peak_bytes)}, footprint {fmt_bytes(self.footprint_bytes)}; "
                f"{took})")


def _checkpointed(fn: Callable, remat: str, policies: Mapping[str, str | None],
                  per_block: Mapping[str, Any]) -> Callable:
    """``fn`` as the remat choice makes it: unchanged, wrapped whole in ``jax.checkpoint``, or with each call of
    the explorer's ``block`` checkpointed (:func:`xlakit.memory.remat.checkpoint_each`)."""
    import jax

    if remat == _NO_REMAT:
        return fn
    name = policies[remat]
    if remat in per_block:
        from xlakit.memory.remat import checkpoint_each

        return checkpoint_each(fn, per_block[remat], policy=name)
    policy = None if name is None else getattr(jax.checkpoint_policies, name)
    return jax.checkpoint(fn, policy=policy)


def _per_block_choices(policies: Mapping[str, str | None], block: Any) -> dict[str, str | None]:
    """``"each Block: checkpoint (save nothing)"`` -> policy, for every remat choice but ``"none"``."""
    name = getattr(block, "__name__", str(block))
    return {f"each {name}: {label}": policy for label, policy in policies.items() if label != _NO_REMAT}


class MemoryExplorer(View, widgets.VBox):
    """What holds the peak of ``step(remat(fn))`` at a batch size, recompiled in the background on each change.

    Moving the batch-size slider or picking a remat policy (``jax.checkpoint(fn, policy=...)`` around ``fn``, or,
    with ``block``, around each call of that layer: what people do) or a donation
    (``jax.jit(..., donate_argnums=...)``) compiles that variant on a background thread — through ``cache``
    (an :class:`xlakit.ExecutableCache`) when given, so a variant compiled before, in this or an earlier
    session, is a cache hit — then redraws: the peak's summary (:func:`xlakit.memory.peak`), live bytes over
    program order with the peak marked, buffer lifetimes by role, the peak treemap by scope and source, and a
    table of every variant tried (peak bytes, compile seconds, hit or compile). Callbacks only queue work, so
    the kernel stays responsive during a compile; the newest choice wins (a variant asked for while another
    compiles is compiled next, intermediate ones are skipped). Variants are remembered: going back redraws at
    once. A failure (in ``make_args``, tracing or XLA) is shown in the widget and in :attr:`errors`.

    Args:
      fn: the function remat wraps (e.g. the loss or a model's forward pass).
      make_args: ``make_args(batch) -> tuple`` of arguments (arrays or ``jax.ShapeDtypeStruct``; nothing runs).
      batch_sizes: the slider's batch sizes (ints >= 1, default 8 … 256). batch: the initial one (default the
        first).
      step: builds the compiled function from the (rematerialised) ``fn``, e.g. ``jax.grad`` or a train step
        factory; default ``fn`` itself.
      remat: label -> ``jax.checkpoint_policies`` name or None (default :data:`DEFAULT_REMAT`; ``"none"``
        compiles ``fn`` unwrapped). donations: label -> ``donate_argnums`` (default :data:`DEFAULT_DONATIONS`).
      block: the layer to checkpoint one at a time (a flax.nnx ``Module`` class, another class, or a module-level
        function ``fn`` calls; :func:`xlakit.memory.remat.checkpoint_each`): every remat choice is offered a
        second time as ``"each <block>: <choice>"``. A variant with remat shows, once the same batch without
        remat is compiled, what remat changed at the peak and why (:func:`xlakit.memory.compare`).
      cache: an ``ExecutableCache`` to compile through (None: compile with JAX directly).
      start: compile the initial variant now (default True); :meth:`wait` waits for it.

    Raises:
      ValueError: empty or non-positive ``batch_sizes``, ``batch`` not among them, a remat policy name
        ``jax.checkpoint_policies`` lacks, or empty choices.
      TypeError: ``fn`` or ``make_args`` not callable.
    """

    _title = "xlakit memory explorer"

    batch = traitlets.Int()
    remat = traitlets.Unicode(_NO_REMAT)
    donate = traitlets.Unicode("none")

    def __init__(self, fn: Callable, make_args: Callable[[int], Sequence[Any]], *,
                 batch_sizes: Sequence[int] = (8, 16, 32, 64, 128, 256), batch: int | None = None,
                 step: Callable[[Callable], Callable] | None = None, remat: Mapping[str, str | None] | None = None,
                 donations: Mapping[str, Sequence[int]] | None = None, cache: Any = None, start: bool = True,
                 block: Any = None, layout: widgets.Layout | None = None) -> None:
        import jax

        if not callable(fn) or not callable(make_args):
            raise TypeError("MemoryExplorer(fn, make_args): both must be callable; make_args(batch) returns the "
                            "arguments of fn for that batch size")
        from xlakit._units import check_int

        # 1.5 became 1, "8" and True were counts: each must be a positive integer
        sizes = [check_int(b, "batch_sizes", minimum=1, what="batch size") for b in batch_sizes]
        if not sizes or any(b < 1 for b in sizes):
            raise ValueError(f"batch_sizes must be batch sizes >= 1, got {list(batch_sizes)}")
        batch = sizes[0] if batch is None else check_int(batch, "batch", minimum=1, what="batch size")
        if batch not in sizes:
            raise ValueError(f"batch {batch} is not one of batch_sizes {sizes}")
        self._policies = dict(DEFAULT_REMAT if remat is None else remat)
        self._donations = {k: tuple(int(a) for a in v)
                           for k, v in (DEFAULT_DONATIONS if donations is None else donations).items()}
        if not self._policies or not self._donations:
            raise ValueError("remat and donations need at least one choice each")
        for label, name in self._policies.items():
            if name is not None and not hasattr(jax.checkpoint_policies, name):
                raise ValueError(f"remat {label!r}: jax.checkpoint_policies has no {name!r}")
        #: remat label -> the block it checkpoints one call at a time (the ``"each <block>: ..."`` choices).
        self._per_block: dict[str, Any] = {}
        if block is not None:
            each = _per_block_choices(self._policies, block)
            self._per_block = dict.fromkeys(each, block)
            self._policies.update(each)
        self._setup_view()
        self.fn, self.make_args, self.step, self.cache = fn, make_args, step, cache
        #: every variant compiled so far, (batch, remat, donation) -> :class:`ExplorerResult`.
        self.results: dict[tuple[int, str, str], ExplorerResult] = {}
        self._jitted: dict[tuple[str, str], Any] = {}
        self._wanted: tuple[int, str, str] | None = None
        self._drawn: ExplorerResult | None = None
        self._idle = threading.Event()
        self._idle.set()

        self._batch_slider = widgets.SelectionSlider(options=sizes, value=batch, description="batch",
                                                     continuous_update=False, layout=widgets.Layout(width="360px"))
        self._remat_menu = widgets.Dropdown(options=list(self._policies), description="remat",
                                            layout=widgets.Layout(width="360px"))
        self._donate_menu = widgets.Dropdown(options=list(self._donations), description="donate",
                                             layout=widgets.Layout(width="240px"))
        self.status = widgets.HTML()
        self.summary = widgets.HTML()
        self.history = widgets.HTML()
        #: live bytes over program order, the peak marked; buffer lifetimes; the peak treemap.
        self.liveness_chart, self.lifetime_chart, self.treemap_chart = Chart(), Chart(), Chart()
        #: peak against batch size for every variant tried (one line per remat and donation choice).
        self.variants_chart = Chart()
        controls = widgets.HBox([self._batch_slider, self._remat_menu, self._donate_menu],
                                layout=widgets.Layout(flex_flow="row wrap"))
        self._owned = [self._batch_slider, self._remat_menu, self._donate_menu, self.status, self.summary,
                       self.history, self.liveness_chart, self.lifetime_chart, self.treemap_chart, self.variants_chart,
                       controls, self.error_area, self._style]
        super().__init__(children=[self._style, controls, self.error_area, self.status, self.summary,
                                   self.liveness_chart, self.lifetime_chart, self.treemap_chart, self.variants_chart,
                                   self.history],
                         batch=batch, remat=next(iter(self._policies)), donate=next(iter(self._donations)),
                         layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-memory-explorer")
        widgets.link((self._batch_slider, "value"), (self, "batch"))
        widgets.link((self._remat_menu, "value"), (self, "remat"))
        widgets.link((self._donate_menu, "value"), (self, "donate"))
        self._worker = Worker(self._guard(self._work, "compile"), None, throttle_s=0.02,
                              name="xlakit-MemoryExplorer-compile")
        self._workers.append(self._worker)
        self.observe(self._guard(lambda _c: self._request(), "choice"), names=["batch", "remat", "donate"])
        if start:
            self._request()

    # -- state ------------------------------------------------------------------------------------------
    @property
    def key(self) -> tuple[int, str, str]:
        """The variant chosen now: (batch, remat label, donation label)."""
        return (int(self.batch), str(self.remat), str(self.donate))

    @property
    def current(self) -> ExplorerResult | None:
        """The result of the variant chosen now, or None while it compiles."""
        return self.results.get(self.key)

    @property
    def busy(self) -> bool:
        """True while a compile is queued or running."""
        return not self._idle.is_set()

    @traitlets.validate("batch")
    def _check_batch(self, proposal: Any) -> Any:
        if proposal["value"] not in self._batch_slider.options:
            raise traitlets.TraitError(f"batch {proposal['value']} is not one of {list(self._batch_slider.options)}")
        return proposal["value"]

    def wait(self, timeout: float = 120.0) -> ExplorerResult | None:
        """Block until the chosen variant is compiled and drawn; returns its result. For scripts, tests and a
        notebook cell that wants the picture in its saved output; interactive use never needs it.

        Raises:
          TimeoutError: still compiling after ``timeout`` seconds.
        """
        # As xlakit._units.wait_timeout (a view imports no private module): NaN read as "still compiling after nan
        # s", and threading raised OverflowError for inf or 1e10; inf waits for ever.
        forever = timeout == float("inf")
        if not forever and not 0 <= timeout <= 1e9:
            raise ValueError(f"timeout must be a finite number of seconds >= 0 and at most 1e+09 (inf waits for "
                             f"ever), got {timeout!r}")
        if not self._idle.wait(None if forever else timeout):
            raise TimeoutError(f"MemoryExplorer: variant {self.key} still compiling after {timeout} s")
        if threading.current_thread() is threading.main_thread():
            self._draw()  # the kernel's queued redraw runs only after this cell; draw now
        return self.current

    # -- work (background thread) -----------------------------------------------------------------------
    def _request(self) -> None:
        """Ask for the chosen variant (kernel thread: never blocks)."""
        if self._closed:
            return
        key = self.key
        with self._lock:
            self._wanted = key
            known = key in self.results
            if not known:
                self._idle.clear()
        if known:
            self._draw()
            return
        self.status.value = (f"<small>compiling batch {key[0]}, remat {html_text(key[1])}, donate {html_text(key[2])}"
                             f"{' through the cache' if self.cache is not None else ''}…</small>")
        self._worker.poke()

    def _work(self) -> None:
        while True:
            with self._lock:
                key = self._wanted
                if key is None or key in self.results:
                    self._idle.set()
                    break
            result = self._compile(key)
            with self._lock:
                self.results[key] = result
            if result.error is not None:
                exc = RuntimeError(f"batch {key[0]}, remat {key[1]!r}, donate {key[2]!r}: {result.error}")
                self._on_kernel(functools.partial(self._show_error, "compile", exc), "compile")
        self._on_kernel(self._draw, "redraw")

    def _program(self, remat: str, donate: str) -> Any:
        import jax

        jitted = self._jitted.get((remat, donate))
        if jitted is None:
            fn = _checkpointed(self.fn, remat, self._policies, self._per_block)
            fn = self.step(fn) if self.step is not None else fn
            jitted = self._jitted[(remat, donate)] = jax.jit(fn, donate_argnums=self._donations[donate])
        return jitted

    def _compile(self, key: tuple[int, str, str]) -> ExplorerResult:
        from xlakit.memory.sweep import own_retraces

        batch, remat, donate = key
        t0 = time.perf_counter()
        try:
            with own_retraces():  # the explorer's variants are not the user's recompiles
                return self._measure(key, t0)
        except Exception as exc:  # noqa: BLE001 - shown in the widget; the next choice still works
            return ExplorerResult(batch, remat, donate, compile_s=time.perf_counter() - t0,
                                  error=f"{type(exc).__name__}: {exc}")

    def _measure(self, key: tuple[int, str, str], t0: float) -> ExplorerResult:
        from xlakit import memory

        batch, remat, donate = key
        args = tuple(self.make_args(batch))
        jitted = self._program(remat, donate)
        if self.cache is not None:
            compiled, decision = self.cache.compile(jitted, *args)
            kind = str(getattr(decision, "kind", decision))
        else:
            from xlakit.memory.sweep import lower_batch

            compiled, kind = lower_batch(jitted, args, batch).compile(), "compiled"
        seconds = time.perf_counter() - t0
        try:
            peak = memory.peak(compiled)
        except ValueError:  # no buffer assignment in memory_analysis() (TPU): from the Lowered, with XLA's dump
            from xlakit.memory.sweep import lower_batch

            peak = memory.peak(lower_batch(jitted, args, batch))
        return ExplorerResult(batch, remat, donate, peak=peak, compile_s=seconds, decision=kind)

    # -- drawing (kernel thread) ------------------------------------------------------------------------
    def _draw(self) -> None:
        """Show the chosen variant (idempotent; the whole redraw holds the lock, so a :meth:`wait` on another
        thread returns only once the charts are in place)."""
        with self._lock:
            if self._closed:  # a compile that finished after close(): nothing to draw into
                return
            result = self.results.get(self.key)
            self.history.value = self._history_html()
            self.variants_chart.show(self._variants())
            if result is None or result is self._drawn:
                return
            self._drawn = result
            self._show(result)
        self.refresh_snapshot()  # a notebook saved from now on records this variant, not "compiling…"

    def _show(self, result: ExplorerResult) -> None:
        from xlakit.view.memory_charts import lifetime_chart, liveness_chart
        from xlakit.view.peak import peak_caption, peak_treemap_figure, peak_treemap_nodes

        if result.error is not None:
            self.status.value = f"<small>{html_text(self._label(result))}: failed</small>"
            self.summary.value = f"<div class='xlakit-error'>{html_text(result.error)}</div>"
            return
        pk = result.peak
        self.status.value = f"<small>{html_text(self._label(result))}</small>"
        # Wrapped at spaces and separators, never inside a name or between a number and its unit.
        self.summary.value = f"<div class='xlakit-peak-summary'>{html_wrappable(self._summary_text(result))}</div>"
        attribution = getattr(pk, "attribution", None)
        self.liveness_chart.show(liveness_chart(getattr(attribution, "liveness", None), peak_step=pk.step,
                                                caption=peak_caption(pk.buffers), steps=pk.steps))
        self.lifetime_chart.show(lifetime_chart(getattr(attribution, "buffers", None), peak_step=pk.step))
        self.treemap_chart.show(peak_treemap_figure(peak_treemap_nodes(pk.buffers)))

    def _summary_text(self, result: ExplorerResult) -> str:
        """The peak, and for a remat variant what remat changed at the peak against the same batch and donation
        without remat (when that one is compiled), and why (:attr:`Comparison.why <xlakit.memory.Comparison>`)."""
        from xlakit.memory import compare

        text = repr(result.peak)
        base = self.results.get((result.batch, _NO_REMAT, result.donate))
        if result.remat != _NO_REMAT and base is not None and base.peak is not None:
            text += f"\nagainst remat none: {compare(base.peak, result.peak)!r}"
        return text

    def _variants(self) -> Any:
        from xlakit.view.peak import variants_figure

        return variants_figure([{"batch": r.batch, "variant": f"remat {r.remat}, donate {r.donate}",
                                 "peak": r.peak_bytes} for r in list(self.results.values())])

    @staticmethod
    def _label(r: ExplorerResult) -> str:
        how = "" if r.decision is None else f", {r.decision}"
        return (f"batch {r.batch}, remat {r.remat}, donate {r.donate}: "
                f"{fmt_seconds(r.compile_s)} to compile or load{how}")

    def _history_html(self) -> str:
        rows = [{"batch": r.batch, "remat": r.remat, "donate": r.donate, "peak": r.peak_bytes,
                 "footprint": r.footprint_bytes, "compile_s": r.compile_s, "decision": r.decision or "",
                 "error": r.error or ""}
                for r in sorted(self.results.values(), key=lambda r: r.key)]
        if not rows:
            return note("Nothing compiled yet.")
        cols = [Column("batch", "batch", "count"), Column("remat", "remat", nowrap=False), Column("donate", "donate"),
                Column("peak", "peak (logical buffers)", "bytes"),
                Column("footprint", "XLA footprint (budget with this)", "bytes"),
                Column("compile_s", "compile or load", "seconds"),
                Column("decision", "how"), Column("error", "error", nowrap=False)]
        return Table(cols, rows, caption="Variants tried", css_class="xlakit-explorer-history",
                     drop_empty=True).to_html()  # the error column only once a variant failed

    # -- display ----------------------------------------------------------------------------------------
    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: the chosen variant's peak (summary, liveness, lifetimes, treemap, tables) and the
        table of every variant tried."""
        from xlakit.view.html import snapshot
        from xlakit.view.memory_charts import lifetime_chart, liveness_chart
        from xlakit.view.peak import peak_caption, peak_html, peak_treemap_figure, peak_treemap_nodes

        r = self.current
        if r is None or r.peak is None:
            why = "compiling…" if r is None else f"failed: {r.error}"
            return snapshot(f"Memory explorer: batch {self.batch}", note(why) + self._history_html())
        pk, attribution = r.peak, getattr(r.peak, "attribution", None)
        figures = [liveness_chart(getattr(attribution, "liveness", None), peak_step=pk.step,
                                  caption=peak_caption(pk.buffers), steps=pk.steps),
                   lifetime_chart(getattr(attribution, "buffers", None), peak_step=pk.step),
                   peak_treemap_figure(peak_treemap_nodes(pk.buffers)), self._variants()]
        body = peak_html(f"Memory explorer: {self._label(r)}", summary=self._summary_text(r), figures=figures,
                         buffers=pk.buffers,
                         include_plotlyjs=include_plotlyjs)
        return body + self._history_html()

    def __repr__(self) -> str:
        r = self.current
        state = "compiling" if r is None else (f"failed: {r.error}" if r.error else f"peak {fmt_bytes(r.peak_bytes)}")
        return f"MemoryExplorer(batch={self.batch}, remat={self.remat!r}, donate={self.donate!r}: {state})"
