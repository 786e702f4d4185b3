"""XLA's ``memory_analysis()`` of a ``jax.stages.Compiled``, asked once while the program lives — and, for the
decoders of the buffer assignment, the optimized module produced while XLA computes it.

Why the two together: on CPU ``memory_analysis()`` serializes the whole buffer assignment and computes XLA's
peak (4-5 % of the compile of a narrow 150-layer train step), and XLA runs it without holding Python's GIL
(measured with jaxlib 0.10.2: a Python loop kept its full rate during it); the module's serialization
(``as_serialized_hlo_module_proto()``) holds the GIL, and decoding it is Python. So :func:`analysis_and_module`
asks for the analysis in a second thread and serializes and decodes the module in this one meanwhile: where a
second core is free the two overlap (the wall time of ``peak()``'s first call drops by the shorter of them);
where none is, they take turns as before. Both calls only read the executable.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["memory_analysis", "analysis_and_module", "take_module"]

_ANALYSES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
# compiled -> (serialized HloModuleProto, its decoded module or None): made while the analysis ran, taken once by
# the buffer assignment's decoder (so the 2 MB of a 150-layer step are not kept beside the decoded assignment)
_MODULES: weakref.WeakKeyDictionary[Any, tuple[bytes, Any]] = weakref.WeakKeyDictionary()


def memory_analysis(compiled: Any) -> Any:
    """``compiled.memory_analysis()`` (XLA's ``CompiledMemoryStats``), asked of XLA once per ``Compiled`` while it
    lives: asking whether a program carries its buffer assignment, then decoding it, needs it twice. Errors of
    the call pass through (and are not remembered)."""
    try:
        known = _ANALYSES.get(compiled)
    except TypeError:  # not weakly referenceable: asked every time
        return compiled.memory_analysis()
    if known is None:
        known = compiled.memory_analysis()
        if known is not None:
            _ANALYSES[compiled] = known
    return known


def analysis_and_module(compiled: Any, with_module: bool = True) -> Any:
    """:func:`memory_analysis` of ``compiled``; when XLA is asked for it here and ``with_module``, the program's
    optimized module is serialized (``runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()``)
    and decoded (:func:`xlakit.memory._hlo_module.decode_module`) in this thread while XLA computes the analysis
    in another; :func:`take_module` hands them over. Errors of the analysis pass through; a module that cannot
    be had or decoded is left to the decoder (it asks again and says what failed)."""
    try:
        if not with_module or compiled in _ANALYSES:
            return memory_analysis(compiled)
        weakref.ref(compiled)
    except TypeError:  # not weakly referenceable: nothing to hand over
        return memory_analysis(compiled)
    outcome: dict[str, Any] = {}
    asking = threading.Event()

    def ask() -> None:
        asking.set()
        try:
            outcome["stats"] = memory_analysis(compiled)  # the module's name: tests stand in for XLA's answer
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=ask, name="xlakit-memory-analysis", daemon=True)
    worker.start()
    asking.wait()  # lets the worker take the GIL into XLA's call before this thread holds it for the module
    _prepare_module(compiled)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["stats"]


def _prepare_module(compiled: Any) -> None:
    from xlakit.memory._hlo_module import decode_module

    try:
        data = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:  # noqa: BLE001 - the decoder asks again and goes on without names when it fails
        return
    try:
        decoded = decode_module(bytes(data))
    except Exception:  # noqa: BLE001 - malformed: the decoder decodes it again and reports what failed
        decoded = None
    _MODULES[compiled] = (data, decoded)


def take_module(compiled: Any) -> tuple[bytes, Any] | None:
    """``(serialized module, decoded module or None)`` made by :func:`analysis_and_module` for ``compiled``, once;
    None when none was made."""
    try:
        return _MODULES.pop(compiled, None)
    except TypeError:
        return None
