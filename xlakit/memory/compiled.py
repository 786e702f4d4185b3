"""Compiled memory: how many bytes one compiled XLA program needs, by category.

Source: ``jax.stages.Compiled.memory_analysis()`` (XLA's ``CompiledMemoryStats``), or for a cache entry the
same numbers recorded at compile time (``LoadedExecutable.get_compiled_memory_stats()``, stored in the entry
header), so a cached program's breakdown needs no load.

Which numbers are *not reported* (``None``) rather than a real 0, as checked on jaxlib 0.10.2:

* ``generated_code_bytes`` = 0: every compiled program has code; XLA:CPU does not count its JIT code
  (``memory_analysis()`` and ``LoadedExecutable.size_of_generated_code_in_bytes()`` both return 0), so 0
  means "not counted" on any backend.
* ``host_*`` on CPU: XLA:CPU has one memory space. A ``pinned_host`` argument or output is counted in the
  device fields and the host fields stay 0 (checked with ``in_shardings``/``out_shardings`` on
  ``pinned_host``), so on CPU they are not reported. On GPU/TPU host zeros are real (color-5 buffers).
* Everything 0 and no buffer assignment: the backend implements no analysis at all.

``temp_bytes`` is what XLA's buffer assignment reserves. Code XLA hands work to allocates its own memory on top
(XLA:CPU: YNNPACK fusions, Eigen dots and convolutions; any custom call): a note names such code, and
:func:`xlakit.memory.probe` measures what it really takes.

``peak_bytes`` is XLA's ``peak_memory_in_bytes`` as given. On XLA:CPU it counts arguments + outputs -
aliased + constants but **not temporaries** (a program with a 400 MB temporary reports a peak of 40 KB); a
note says so. :attr:`CompiledMemory.footprint_bytes` is what one run occupies in device memory: arguments,
outputs, temporaries, constants and, where code lives in device memory, the code
(:mod:`xlakit.memory._footprint` says which terms count on which platform and where the constants come from).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from xlakit._jax.platforms import rules
from xlakit.memory._display import fmt_bytes

__all__ = ["CompiledMemory", "compiled_memory", "program_stage", "XLA_FIELDS"]

# (our field, XLA's CompiledMemoryStats attribute)
XLA_FIELDS: tuple[tuple[str, str], ...] = (
    ("argument_bytes", "argument_size_in_bytes"),
    ("output_bytes", "output_size_in_bytes"),
    ("alias_bytes", "alias_size_in_bytes"),
    ("temp_bytes", "temp_size_in_bytes"),
    ("generated_code_bytes", "generated_code_size_in_bytes"),
    ("host_argument_bytes", "host_argument_size_in_bytes"),
    ("host_output_bytes", "host_output_size_in_bytes"),
    ("host_alias_bytes", "host_alias_size_in_bytes"),
    ("host_temp_bytes", "host_temp_size_in_bytes"),
    ("host_generated_code_bytes", "host_generated_code_size_in_bytes"),
    ("peak_bytes", "peak_memory_in_bytes"),
)
_HOST = tuple(ours for ours, _ in XLA_FIELDS if ours.startswith("host_"))
_CATEGORIES = ("argument", "output", "alias", "temp", "generated_code")


class _Notes:
    """The ``notes`` field of :class:`CompiledMemory`: a tuple of strings, to which notes whose evidence is costly
    to read are added when the field is first read. The note naming code XLA does not count needs the optimized
    HLO text (~2 % of a compile to print on XLA:CPU), which ``peak()`` and most callers never show; so
    :func:`compiled_memory` leaves it to be found on first read (:func:`_defer_notes`), and equality, ``replace``,
    pickling and every view see the same notes as if it had been read at once."""

    def __get__(self, obj: Any, owner: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ()  # the dataclass field's default
        state = obj.__dict__
        later = state.get("_notes_later")
        if later is not None:
            try:
                extra = tuple(later())
            except Exception:  # noqa: BLE001 - a note is an explanation; the numbers stand without it
                extra = ()
            if state.pop("_notes_later", None) is later:  # another thread may have added them meanwhile
                state["notes"] = state.get("notes", ()) + extra
        return state.get("notes", ())  # kept under its own name (this data descriptor comes first on lookup)

    def __set__(self, obj: Any, value: tuple[str, ...]) -> None:
        obj.__dict__["notes"] = tuple(value)


@dataclasses.dataclass(frozen=True)
class CompiledMemory:
    """Bytes one compiled program needs, by category; ``None`` where the backend does not report a field.

    Counts are per device: for a program sharded over N devices they describe one device's share (checked
    with 4 host devices: a f32[1024,256] argument sharded 4 ways counts 256 KiB).

    Attributes (all bytes, ``int`` or ``None``; XLA field in brackets):
      argument_bytes: parameters in device memory [argument_size_in_bytes].
      output_bytes: results, including the output tuple's index table [output_size_in_bytes].
      alias_bytes: parameters whose buffers are reused as outputs (donation) [alias_size_in_bytes]; counted
        in both ``argument_bytes`` and ``output_bytes``.
      temp_bytes: scratch XLA preallocates for one run [temp_size_in_bytes].
      generated_code_bytes: compiled code [generated_code_size_in_bytes]; None on CPU.
      host_*: the same five in host memory space (``pinned_host``); None on CPU.
      peak_bytes: XLA's own peak [peak_memory_in_bytes]; see the module docstring for CPU.
      constant_bytes: literals compiled into the program (a closed-over numpy array or ``jax.Array``) that XLA
        keeps in buffers of their own [no XLA field: see :mod:`xlakit.memory._footprint`]; None when not known.
      name: HLO module name (``"jit_f"``), or None.
      platform: ``"cpu"``, ``"gpu"``, ``"tpu"``..., or None when unknown (a bare dict).
      source: where the numbers come from (which call, or the cache entry).
      notes: why a field is None or needs care (from a ``Compiled``, the note naming code XLA does not count
        is found when ``notes`` is first read: it needs the optimized HLO text).
      serialized_buffer_assignment: XLA's ``BufferAssignmentProto`` bytes (not shown; for
        :func:`xlakit.memory.buffer_assignment`), or None (cache entries do not store it).
    """

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    host_argument_bytes: int | None = None
    host_output_bytes: int | None = None
    host_alias_bytes: int | None = None
    host_temp_bytes: int | None = None
    host_generated_code_bytes: int | None = None
    peak_bytes: int | None = None
    constant_bytes: int | None = None
    name: str | None = None
    platform: str | None = None
    source: str = ""
    notes: tuple[str, ...] = _Notes()  # type: ignore[assignment]
    serialized_buffer_assignment: bytes | None = dataclasses.field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        _ = self.notes  # notes not yet found are found now: a pickle carries no closure
        return dict(self.__dict__)

    @property
    def footprint_bytes(self) -> int | None:
        """Device bytes one run occupies: argument + output - alias + temp + constant, + generated code where
        code lives in device memory (TPU, GPU; not CPU; less the constants, which XLA counts in its code figure
        there) — None if argument, output, alias or temp is None.

        XLA allocates all of these before the program starts (constants and code when it is loaded), so this
        bounds what one run holds on the device; it is what :func:`~xlakit.memory.max_batch` budgets with. A
        constant or code term that is not known counts 0 and a note says so. Terms per platform:
        :mod:`xlakit.memory._footprint`."""
        from xlakit.memory._footprint import footprint_terms

        terms = footprint_terms(self)
        return None if terms is None else sum(terms.values())

    @property
    def reported(self) -> bool:
        """True when at least one byte count is reported."""
        return any(getattr(self, ours) is not None for ours, _ in XLA_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        """Flat dict: name, platform, every byte field, footprint_bytes, source, notes (joined)."""
        out: dict[str, Any] = {"name": self.name, "platform": self.platform}
        out.update({ours: getattr(self, ours) for ours, _ in XLA_FIELDS})
        out["constant_bytes"] = self.constant_bytes
        out["footprint_bytes"] = self.footprint_bytes
        out["source"] = self.source
        out["notes"] = "; ".join(self.notes)
        return out

    def to_frame(self):
        """``pandas.DataFrame`` indexed by category (argument, output, alias, temp, generated_code, constant,
        peak) with columns ``device_bytes`` and ``host_bytes`` (nullable Int64; <NA> = not reported) and ``note``:
        why a value is <NA> or needs care (from :attr:`notes`), ``""`` otherwise."""
        import pandas as pd

        rows = [(c, getattr(self, f"{c}_bytes"), getattr(self, f"host_{c}_bytes")) for c in _CATEGORIES]
        rows += [("constant", self.constant_bytes, None), ("peak", self.peak_bytes, None)]
        frame = pd.DataFrame(rows, columns=["category", "device_bytes", "host_bytes"]).set_index("category")
        frame = frame.astype("Int64")
        frame["note"] = [self._row_note(c, d, h) for c, d, h in rows]
        return frame

    def _row_note(self, category: str, device: int | None, host: int | None) -> str:
        """Why a to_frame row has <NA> (or what XLA's peak leaves out), in short; :attr:`notes` say it in full."""
        said = {n.split(":", 1)[0] for n in self.notes if ":" in n}
        out = []
        if category == "generated_code" and device is None and "generated code" in said:
            out.append("device <NA>: XLA does not count its code here (it reported 0)")
        if category == "constant" and device is None:
            out.append("device <NA>: not known for this program (no buffer assignment)")
        if category == "peak" and "peak" in said:
            out.append(f"XLA's peak, without temporaries on XLA:CPU; footprint_bytes "
                       f"({fmt_bytes(self.footprint_bytes)}) includes them")
        if category == "peak" and "peak (XLA)" in said:
            out.append("XLA's figure, not what the chip holds: memory.peak() gives that")
        if category in ("peak", "constant"):
            out.append(f"host <NA>: XLA reports no host {category}")
        elif host is None and "host fields" in said:
            out.append("host <NA>: XLA:CPU has one memory space (pinned_host is counted on the device)")
        return "; ".join(out)

    def __repr__(self) -> str:
        shown = ", ".join(f"{c}={fmt_bytes(getattr(self, f'{c}_bytes'))}"  # the footprint's terms, constants included
                          for c in ("argument", "output", "alias", "temp", "constant"))
        # XLA:CPU's peak leaves temporaries out: printed bare, "peak=4.8 MiB" read as the run's peak beside
        # temp=4.7 MiB (a chart of the same program stacks 9.6 MiB); it is named for what it is.
        no_temps = any(n.startswith("peak:") for n in self.notes)
        peak = "XLA:CPU peak (no temporaries)" if no_temps else "peak"
        return (f"CompiledMemory({self.name or '?'} on {self.platform or '?'}: {shown}, "
                f"footprint={fmt_bytes(self.footprint_bytes)}, {peak}={fmt_bytes(self.peak_bytes)}; "
                f"from {self.source})")

    def _repr_html_(self) -> str:
        from xlakit.memory._compiled_view import compiled_html

        return compiled_html(self)


def _from_values(values: Mapping[str, Any], *, name: str | None, platform: str | None, source: str,
                 proto: bytes | None = None) -> CompiledMemory:
    """Build from XLA-named values (missing key = not reported), applying the not-reported rules; the
    constant bytes as :func:`_constants` finds them."""
    fields: dict[str, int | None] = {}
    for ours, xla in XLA_FIELDS:
        v = values.get(xla)
        fields[ours] = int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    notes: list[str] = []
    if all(v in (None, 0) for v in fields.values()) and not proto:
        return CompiledMemory(name=name, platform=platform, source=source,
                              notes=("the backend reported no memory analysis (all zeros or absent)",))
    if fields["generated_code_bytes"] == 0:
        fields["generated_code_bytes"] = None
        notes.append("generated code: XLA reported 0, i.e. it does not count its code here (not a real 0)")
    if platform == "cpu":
        for ours in _HOST:
            fields[ours] = None
        notes.append("host fields: XLA:CPU has one memory space; pinned_host bytes are counted in the device "
                     "fields, so host fields are not reported")
        if fields["peak_bytes"] is not None:
            notes.append("peak: XLA:CPU's peak_memory_in_bytes counts arguments, outputs and constants but not "
                         "temporaries; footprint_bytes includes them")
    elif platform is None:
        notes.append("platform unknown: host zeros are shown as reported")
    elif fields["peak_bytes"] is not None and rules(platform).scratch_in_reserved_region:
        notes.append("peak (XLA): not what the chip holds (on a TPU v5e 3.7x it): memory.peak() gives that")
    missing = [xla for ours, xla in XLA_FIELDS if xla not in values]
    if missing:
        notes.append("absent from the source: " + ", ".join(missing))
    constants = _constants(fields, platform, proto)
    if constants is None:
        notes.append(_CONSTANTS_UNKNOWN)
    return CompiledMemory(**fields, constant_bytes=constants, name=name, platform=platform, source=source,
                          notes=tuple(notes), serialized_buffer_assignment=proto or None)


_CONSTANTS_UNKNOWN = ("constants: not known from this source (no buffer assignment, no HLO); footprint_bytes "
                      "leaves them out")


def _constants(fields: Mapping[str, int | None], platform: str | None, proto: bytes | None) -> int | None:
    """Bytes of the program's constants: on XLA:CPU its peak less arguments and outputs (its peak is exactly
    those plus the constants: checked equal to the buffer assignment's constant allocations, and free where
    decoding the proto is not); else the buffer assignment's constant allocations; else None."""
    from xlakit.memory._footprint import constant_bytes_of_assignment
    from xlakit.memory._proto import ProtoDecodeError

    peak, arg, out, alias = (fields[k] for k in ("peak_bytes", "argument_bytes", "output_bytes", "alias_bytes"))
    if platform == "cpu" and None not in (peak, arg, out, alias):
        derived = peak - (arg + out - alias)  # type: ignore[operator]
        if derived >= 0:
            return derived
    if proto:
        try:
            return constant_bytes_of_assignment(proto)
        except ProtoDecodeError:
            return None
    return None


def _from_header(header: Mapping[str, Any], *, name: str | None = None, source: str) -> CompiledMemory:
    if "error" in header and "memory" not in header:
        raise ValueError(f"this cache entry is unreadable ({header['error']}); run `xlakit verify` or recompile")
    env = header.get("environment")
    platform = env.get("platform") if isinstance(env, Mapping) else None
    name = header.get("name") if isinstance(header.get("name"), str) else name
    memory = header.get("memory")
    if memory is None:
        return CompiledMemory(name=name, platform=platform, source=source,
                              notes=("no memory stats were recorded for this entry at compile time",))
    if not isinstance(memory, Mapping):
        raise ValueError(f"header['memory'] must be a dict of byte counts, got {type(memory).__name__}")
    return _from_values(memory, name=name, platform=platform, source=source)


def _is_memory_dict(d: Mapping[str, Any]) -> bool:
    return any(xla in d for _, xla in XLA_FIELDS)


def from_stats(stats: Any, *, name: str | None, platform: str | None, source: str) -> CompiledMemory:
    """Build from an XLA ``CompiledMemoryStats`` object (attributes named as in :data:`XLA_FIELDS`)."""
    if stats is None:
        return CompiledMemory(name=name, platform=platform, source=source,
                              notes=("memory_analysis() returned None on this backend",))
    values = {xla: getattr(stats, xla) for _, xla in XLA_FIELDS if isinstance(getattr(stats, xla, None), int)}
    proto = getattr(stats, "serialized_buffer_assignment_proto", None)
    return _from_values(values, name=name, platform=platform, source=source,
                        proto=proto if isinstance(proto, bytes) else None)


def _runtime_info(compiled: Any) -> tuple[str | None, str | None]:
    """(module name, platform) of a ``jax.stages.Compiled``, best effort."""
    name, platform, _module = _runtime_module(compiled)
    return name, platform


def _runtime_module(compiled: Any) -> tuple[str | None, str | None, Any]:
    """(module name, platform, XLA's ``HloModule`` of the optimized program or None) of a ``jax.stages.Compiled``,
    best effort."""
    name = platform = module = None
    try:
        rt = compiled.runtime_executable()
        platform = rt.client.platform
        module = rt.hlo_modules()[0]
        name = module.name
    except Exception:  # noqa: BLE001 - names are decoration; the byte counts do not depend on them
        pass
    return name, platform, module


def program_stage(x: Any) -> Any:
    """JAX's ``Compiled`` / ``Lowered`` that ``x`` is or holds (a flax.nnx stage holds one as ``.compiled`` /
    ``.lowered``), else None. Never imports JAX: without it loaded, nothing is a program."""
    if "jax" not in sys.modules:
        return None
    import jax

    from xlakit._jax.stages import jax_stage

    stage = jax_stage(x)
    return stage if isinstance(stage, (jax.stages.Compiled, jax.stages.Lowered)) else None


def _compile(x: Any, args: tuple, kwargs: dict) -> Any:
    """A ``jax.stages.Compiled`` from a Compiled, Lowered (JAX's, or flax.nnx's holding one), jitted
    function (``jax.jit``, ``nnx.jit``) or plain function + arguments."""
    import jax

    from xlakit._jax.stages import jax_stage

    x = jax_stage(x)
    if isinstance(x, jax.stages.Compiled):
        if args or kwargs:
            raise TypeError("pass example arguments only with a function; a Compiled program already has them")
        return x
    if isinstance(x, jax.stages.Lowered):
        return x.compile()
    if callable(x):
        fn = x if hasattr(x, "lower") else jax.jit(x)
        try:
            from xlakit._jax import extents

            lowered = extents.lower(fn, args, kwargs, own=True)
        except TypeError as exc:
            if args or kwargs:
                raise
            # "f() missing 1 required positional argument" in the user's words: say what is needed instead
            raise TypeError(f"got the function {getattr(x, '__name__', x)!r} without example arguments and could "
                            "not lower it; pass a jax.stages.Compiled (jax.jit(f).lower(x).compile()) or Lowered, or "
                            f"the function followed by example arguments (arrays or jax.ShapeDtypeStruct). JAX said: "
                            f"{exc}") from exc
        return jax_stage(jax_stage(lowered).compile())
    raise TypeError(f"expected a jax.stages.Compiled, a Lowered, a function with example arguments, a cache "
                    f"entry (EntryInfo) or its header dict; got {type(x).__name__}")


def compiled_memory(x: Any, /, *args: Any, **kwargs: Any) -> CompiledMemory:
    """The memory breakdown of one compiled program.

    Args:
      x: one of
        * a ``jax.stages.Compiled`` (``jax.jit(f).lower(...).compile()``) or a ``Lowered`` (compiled here);
        * a jitted (or plain) function, followed by example arguments (arrays or ``jax.ShapeDtypeStruct``):
          it is lowered and compiled here (or taken from JAX's in-memory cache);
        * a cache entry (``xlakit.store.LocalStore.entries()`` item) or its header dict: the stats stored at
          compile time, no load; or a dict of XLA-named fields (``argument_size_in_bytes``...);
        * a ``CompiledMemory`` (returned as is).

        Positional only, so that every keyword is the function's (``compiled_memory(f, w, x=x)``).
      *args, **kwargs: example arguments, only with a function, passed as ``jax.jit(f)(*args, **kwargs)``
        would pass them.

    Returns:
      :class:`CompiledMemory`. Source: ``Compiled.memory_analysis()`` or the entry header.

    Raises:
      TypeError: ``x`` is none of the above, or arguments were given with a compiled program.
      ValueError: the cache entry is unreadable or its ``memory`` field is malformed.
    """
    if isinstance(x, CompiledMemory):
        return x
    if isinstance(x, Mapping):
        if "memory" in x or "environment" in x or "error" in x:
            return _from_header(x, source="cache entry header (recorded at compile time)")
        if _is_memory_dict(x):
            return _from_values(x, name=None, platform=None, source="dict of XLA CompiledMemoryStats fields")
        raise ValueError("the dict is neither a cache entry header (with 'memory') nor a dict of XLA fields "
                         f"such as 'argument_size_in_bytes'; keys: {sorted(x)[:8]}")
    header = getattr(x, "header", None)
    if isinstance(header, Mapping) and hasattr(x, "key"):  # xlakit.store EntryInfo
        return _from_header(header, name=getattr(x, "name", None),
                            source=f"cache entry {str(x.key)[:16]}… header (recorded at compile time)")
    if hasattr(x, "get_compiled_memory_stats") and not hasattr(x, "memory_analysis"):  # a LoadedExecutable
        platform = getattr(getattr(x, "client", None), "platform", None)
        return from_stats(x.get_compiled_memory_stats(), name=None, platform=platform,
                          source="LoadedExecutable.get_compiled_memory_stats()")
    from xlakit.memory._analysis import memory_analysis  # looked up per call: tests stand in for XLA's answer

    compiled = _compile(x, args, kwargs)
    name, platform, module = _runtime_module(compiled)
    analysis = memory_analysis(compiled)
    if isinstance(analysis, (list, tuple)):  # older JAX: one per module
        if len(analysis) != 1:
            raise ValueError(f"this program has {len(analysis)} modules; pass one compiled module")
        analysis = analysis[0]
    result = from_stats(analysis, name=name, platform=platform, source="jax.stages.Compiled.memory_analysis()")
    if module is not None and (result.constant_bytes is not None or not result.reported):
        # The text is needed only for the note on code XLA does not count: printed when the notes are first read
        # (from the module, which holds no executable alive; its text differs from as_text() only in the order of
        # backend_config keys).
        return _defer_notes(result, lambda: _runtime_calls_notes(platform, module.to_string()))
    try:
        text = compiled.as_text() or ""
    except Exception:  # noqa: BLE001 - the text only adds constants (TPU) and a note; the numbers stand
        text = ""
    result = _with_hlo_constants(result, text)
    return dataclasses.replace(result, notes=(*result.notes, *_runtime_calls_notes(result.platform, text)))


def _defer_notes(result: CompiledMemory, later: Any) -> CompiledMemory:
    """``result`` with the notes ``later()`` returns added when its notes are first read (see :class:`_Notes`)."""
    result.__dict__["_notes_later"] = later
    return result


def _with_hlo_constants(result: CompiledMemory, text: str) -> CompiledMemory:
    """Where no buffer assignment gave the constants (TPU ships none), count them in the optimized HLO."""
    from xlakit.memory._footprint import constant_bytes_of_hlo_text

    if result.constant_bytes is not None or not text or not result.reported:
        return result
    notes = tuple(n for n in result.notes if n != _CONSTANTS_UNKNOWN)
    notes += ("constants: counted in the optimized HLO (shape x element size, outside fusions; no buffer "
              "assignment here)",)
    return dataclasses.replace(result, constant_bytes=constant_bytes_of_hlo_text(text), notes=notes)


def _runtime_calls_notes(platform: str | None, text: str) -> tuple[str, ...]:
    """The note naming code in the program (its optimized HLO ``text``) that allocates outside XLA's buffer
    assignment (its working memory is in no field here; :func:`xlakit.memory.probe` measures it), or ``()``."""
    from xlakit.memory._probe_accounting import runtime_calls

    try:
        calls = runtime_calls(text, platform) if text else ()
    except Exception:  # noqa: BLE001 - the note is an explanation; the numbers stand without it
        return ()
    if not calls:
        return ()
    return ("temporaries exclude the working memory of " + ", ".join(calls) + ", which allocate outside XLA's "
            "buffer assignment (e.g. a YNNPACK fusion of jnp.outer(v, v).sum(0), v of 10,000 float32: 0 B "
            "here, 127 MiB measured); probe() measures it",)

