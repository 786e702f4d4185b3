"""Loading a bundle's programs in worker threads, most wanted first: :class:`ProgramLoader`.

:func:`~xlakit.bundle.loader.load_bundle` hands every exported module to a ProgramLoader and, with
``background=True``, returns once the weights are placed. The loader runs ``max_workers`` threads; each takes
the *pending* module with the best rank at the moment it starts (not the order of submission), so a call that
needs a program still queued moves it to the front (:meth:`ProgramLoader.result` bumps it) and waits only for
that one.

Ranks, best first: a program a caller is waiting for; then ``order`` (the loader's choice: the order the last
process first called the programs, recorded in ``.cache/usage.json`` by :mod:`xlakit.bundle.usage`, else the
default variant's smallest batch first; or, when the caller waits for everything, the largest module first so
the last worker is not left with the biggest program).

Nothing here raises into a worker or loses an error: :meth:`Context.load_module` turns every failure into an
``error`` report, and an exception it should never raise is turned into one here. Results are
``concurrent.futures.Future`` objects resolved with ``(ModuleReport, Compiled | None)``.

With ``warmup=True`` a worker runs each program it loaded once on zeros (:func:`xlakit._jax.warmup.warm_up`)
after marking it ready, unless a call has already used it; the outcome goes into the program's report
(``warmup_s``, ``warmup_error``). A failed warm-up never fails the load.

The workers are non-daemon threads that end when no module is pending: at interpreter exit, the programs not yet
loaded still load before the process ends (a script that loads a bundle to fill ``.cache`` and exits leaves it filled) —
unless the script is ending on a ``KeyboardInterrupt``: then the modules not yet started are cancelled and the
process exits once the ones loading finish (waiting for every queued compile invited a second Ctrl-C, and XLA
aborts the process when interrupted mid-compile during interpreter shutdown).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.manifest import ModuleSpec
from xlakit.bundle.reports import ModuleReport

__all__ = ["ProgramLoader"]


#: Seconds the head-start worker waits, after the first program loaded, for a first call before it loads the
#: others anyway (a notebook's next cell comes later than this; a script's first call comes sooner).
HEAD_YIELD_S = 0.25

#: Seconds the calling thread waits at most for the head-start worker to hand its work to XLA (see
#: :meth:`ProgramLoader.wait_head_handoff`): an ordering, never a dependency, so a slow read (a remote store) costs
#: the caller no more than this.
HEAD_HANDOFF_S = 0.05


class ProgramLoader:
    """Loads ``specs`` with ``ctx.load_module`` in ``workers`` threads, best rank first.

    Args:
      ctx: a :class:`~xlakit.bundle.programs.Context`.
      specs: the exported modules to load.
      blobs, current: module file -> bytes (or the ``BundleError`` reading it), and -> SHA-256 hex (or None).
      order: module files, most wanted first (files not listed come after, in ``specs`` order).
      workers: threads (>= 1).
      on_done: called as ``on_done(report)`` on the worker after each program resolves (the progress bar).
      warmup: run each loaded program once on zeros, in the worker, after it is ready.
      head_start: load the best-ranked program alone, then the others ``workers`` at a time. For a background
        load whose first call is most likely that program: on a 2-core machine, loading others beside it (and
        the weights placed meanwhile) slowed its first result ~2x (GIL and cores shared; docs/restart-measurements.md).
      caller_works: the caller will load programs itself (:meth:`work_here`) as one of the ``workers``, so one
        thread fewer is started (none for ``workers=1``): a caller that waits for every program anyway would
        only sleep while a thread it started does the same work.
    """

    def __init__(self, ctx: Any, specs: Sequence[ModuleSpec], blobs: dict, current: dict, order: Sequence[str],
                 workers: int, on_done: Callable[[ModuleReport], None] | None = None, warmup: bool = False,
                 head_start: bool = False, caller_works: bool = False) -> None:
        self._ctx = ctx
        self._blobs, self._current = blobs, current
        self._on_done = on_done
        self._warmup = warmup
        self._lock = threading.Lock()
        self._bumps = itertools.count(-1, -1)
        ranks = {f: i for i, f in enumerate(order)}
        self._rank = {s.file: ranks.get(s.file, len(ranks) + i) for i, s in enumerate(specs)}
        self._pending: dict[str, ModuleSpec] = {s.file: s for s in specs}
        self.futures: dict[str, concurrent.futures.Future] = {s.file: concurrent.futures.Future() for s in specs}
        self.warmups: dict[str, Any] = {}  # module file -> WarmupResult
        self._used: set[str] = set()
        self._left = len(specs)
        self._all_done = threading.Event()
        self.finished_at: float | None = None  # time.perf_counter() when the last module was done (warm-up too)
        # Head start: after the best-ranked program loads, the others wait for its first call to finish (or for a
        # call that needs another program, wait(), a cancel, or HEAD_YIELD_S without any call).
        self._head_start = head_start
        self._released = threading.Event()
        self._handoff = threading.Event()  # set when the head's work goes to XLA, or its load ends
        self._first_outputs: list[Any] = []
        # A module that could not even be read (missing, FIFO, too large) fails here, on the caller's thread, so
        # load_bundle can name it before returning instead of on some later call.
        for s in specs:
            if isinstance(blobs[s.file], BundleError):
                del self._pending[s.file]
                self._resolve(*ctx.load_module(s, blobs[s.file], current[s.file]))
        if not self._pending:
            if not specs:
                self.finished_at = time.perf_counter()
                self._all_done.set()
            return
        # Workers are plain non-daemon threads that take modules until none is pending, then end: the interpreter
        # joins them at exit, so a script that exits right after load_bundle still sees every program load.
        # Nothing ever waits on a queue or an event that a thread which never started would have fed: a Ctrl-C
        # landing anywhere here (even inside Thread.start) leaves threads that end by themselves.
        self._workers = max(1, min(workers, len(self._pending)))  # counted before the first worker takes one
        if head_start:
            ctx.on_xla = self._handoff.set
        _watch_exit()
        self._spawn(1 if head_start else self._workers - (1 if caller_works else 0), head=head_start)

    def _spawn(self, n: int, head: bool = False) -> None:
        for _ in range(n):
            worker = threading.Thread(target=self._work, args=(head,), name="xlakit-bundle")
            try:
                worker.start()
            except RuntimeError:  # the interpreter is shutting down: the running workers take the rest
                return

    # -- callers ----------------------------------------------------------------------------------------
    def result(self, file: str, timeout: float | None = None) -> tuple[ModuleReport, Any]:
        """``(report, compiled or None)`` of one module, moving it to the front of the queue if it has not
        started. Raises ``TimeoutError`` after ``timeout`` seconds (None: wait as long as it takes)."""
        future = self.futures[file]
        if not future.done():
            with self._lock:
                if file in self._pending:
                    self._rank[file] = next(self._bumps)
                    self._released.set()  # a call needs a program not loaded yet: load on, now
        return future.result(timeout)

    def first_run(self, outputs: Any) -> None:
        """A call dispatched the first program run of this load (``outputs``: its output arrays, maybe still
        computing): the other programs load once they are ready. Only the first call counts."""
        if self._head_start and not self._released.is_set():
            with self._lock:
                if not self._released.is_set():  # else the head worker stopped waiting: keep no reference
                    self._first_outputs.append(outputs)
                    self._released.set()

    def wait_head_handoff(self) -> None:
        """With a head start: wait (at most :data:`HEAD_HANDOFF_S`) until the head worker hands its program to XLA
        (a verified entry to load, or the module to compile), or is done with it. Its reads and checks (Python,
        under the GIL) then ran without the caller's work interleaved, and the caller's next work (imports,
        weights: Python too) overlaps XLA's load or compile, which release the GIL: on 2 cores the first program
        was ready ~4 ms sooner (benchmarks/first_result.py). Without a head start (or nothing pending) it returns
        at once."""
        if self._head_start and self._left:
            self._handoff.wait(HEAD_HANDOFF_S)

    def work_here(self) -> None:
        """Load modules on the calling thread, best rank first, until none is pending (with ``caller_works``).
        Whatever interrupts it (a Ctrl-C) cancels the modules not started, so nothing waits for them, and is
        raised."""
        try:
            while self._take_next():
                pass
        except BaseException:
            self.cancel("cancelled: the load was interrupted before this module was loaded")
            raise

    def mark_used(self, file: str) -> None:
        """A call is about to run this program: a warm-up that has not started is no longer needed."""
        self._used.add(file)

    def done(self, file: str) -> bool:
        return self.futures[file].done()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every module resolved and, with ``warmup``, was warmed up; False if ``timeout`` seconds
        passed first."""
        self._released.set()
        return self._all_done.wait(timeout)

    def cancel(self, reason: str = "cancelled: the load failed before this module was loaded") -> None:
        """Load nothing more (modules already loading finish; the rest resolve as ``error`` reports)."""
        self._released.set()
        with self._lock:
            cancelled = list(self._pending.values())
            self._pending.clear()
        for spec in cancelled:
            self._resolve(ModuleReport(spec.file, spec.variant, spec.batch_size, "error", 0.0,
                                       reason=reason), None)

    # -- workers ----------------------------------------------------------------------------------------
    def _work(self, head: bool) -> None:
        """A worker: load modules, best rank first, until none is pending. The head-start worker starts the
        others once its first module is loaded."""
        first = True
        while self._take_next():
            if first and head:
                self._yield_to_first_run()
                if self._workers > 1 and not _interrupted_exit():
                    self._spawn(self._workers - 1)
            first = False

    def _yield_to_first_run(self) -> None:
        """Let the first call's run have the cores: XLA:CPU's first run of a program costs ~5x a later one, and
        loading the other programs beside it (GIL, 2 cores) slowed the first result by ~15 ms of ~50 (measured
        with benchmarks/first_result.py). Waits at most HEAD_YIELD_S for a call; none: load on."""
        self._released.wait(HEAD_YIELD_S)
        with self._lock:
            self._released.set()  # from now on a first call hands over nothing
            outputs = self._first_outputs.pop() if self._first_outputs else None
        if outputs is None:
            return
        try:
            import jax

            jax.block_until_ready(outputs)  # releases the GIL while the run computes
        except Exception:  # noqa: BLE001, S110 - the caller sees its own run's errors; loading goes on
            pass

    def _take_next(self) -> bool:
        """Load the best-ranked pending module; False when none was pending (all taken, or cancelled)."""
        if _interrupted_exit():
            self.cancel("cancelled: the program was interrupted (Ctrl-C) and is exiting")
        with self._lock:
            if not self._pending:
                return False
            file = min(self._pending, key=self._rank.__getitem__)
            spec = self._pending.pop(file)
        start = time.perf_counter()
        try:
            report, compiled = self._ctx.load_module(spec, self._blobs[file], self._current[file])
        except (KeyboardInterrupt, SystemExit):
            # On the main thread (a call loading its own program) a Ctrl-C must end the script, not become
            # this module's error; the module goes back to pending for whoever continues.
            with self._lock:
                self._pending[file] = spec
            raise
        except BaseException as e:  # noqa: BLE001 - load_module never raises; if it does, the module fails alone
            err = e if isinstance(e, BundleError) else ModuleError(self._ctx.path / file, None,
                                                                   f"{type(e).__name__}: {e}")
            with self._ctx._lock:
                self._ctx.errors[file] = err
            report, compiled = ModuleReport(spec.file, spec.variant, spec.batch_size, "error",
                                            time.perf_counter() - start, reason=str(err)), None
        self._handoff.set()  # a head start's caller waits for this or for the entry's handoff to XLA
        self._resolve(report, compiled, finished=False)  # a call may use it now; wait() also awaits its warm-up
        try:
            if self._warmup and compiled is not None and file not in self._used:
                from xlakit._jax.warmup import warm_up

                self.warmups[file] = warm_up(compiled)  # never raises
        finally:
            self._finish_one()
        return True

    def _resolve(self, report: ModuleReport, compiled: Any, finished: bool = True) -> None:
        self.futures[report.module].set_result((report, compiled))
        if self._on_done is not None:
            try:
                self._on_done(report)
            except Exception:  # noqa: BLE001, S110 - a progress bar never fails a load
                pass
        if finished:
            self._finish_one()

    def _finish_one(self) -> None:
        """One module done with everything this load does for it (its warm-up included)."""
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self.finished_at = time.perf_counter()
                self._all_done.set()

    def report(self, file: str, report: ModuleReport) -> ModuleReport:
        """``report`` with this module's warm-up outcome, if it was warmed up."""
        w = self.warmups.get(file)
        if w is None:
            return report
        return report.replace(warmup_s=w.seconds, warmup_error=None if w.ok else w.reason)


_exiting = threading.Event()
_watching_exit = False


def _watch_exit() -> None:
    """Set :data:`_exiting` when the interpreter starts to exit, before it waits for the loading threads.
    ``threading._register_atexit`` (Python >= 3.9; what ``concurrent.futures`` itself uses) hooks run in
    ``threading._shutdown`` before it joins the non-daemon threads. Without it (another Python), an
    interrupted script waits for the programs not yet loaded, as a normal exit does."""
    global _watching_exit
    if _watching_exit:
        return
    _watching_exit = True

    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_exiting.set)
        except RuntimeError:  # already shutting down
            _exiting.set()


def _interrupted_exit() -> bool:
    """True while the interpreter is exiting after an uncaught ``KeyboardInterrupt`` (Python records it in
    ``sys.last_value`` before it joins the remaining threads). A notebook's interrupted cell also sets
    ``sys.last_value``, but the interpreter is not exiting then: loads go on."""
    return _exiting.is_set() and isinstance(getattr(sys, "last_value", None), KeyboardInterrupt)
