"""``Record``: a ``typing.NamedTuple`` made without generated code, for the records a bundle's first result imports.

``class Spec(Record): name: str; size: int = 0`` gives what ``class Spec(NamedTuple)`` gives — a ``tuple``
subclass with named fields, defaults, ``_fields``, ``_field_defaults``, ``_make``, ``_replace``, ``_asdict``,
``__match_args__``, NamedTuple's ``repr``, pickling — and to type checkers it *is* ``typing.NamedTuple`` (the name
is bound to it under ``TYPE_CHECKING``). Why: ``typing.NamedTuple`` compiles a ``__new__`` per class and, with
string annotations, a ``ForwardRef`` per field; the nine records on the load path cost 3.6–4.6 ms to create
that way inside the first result after a restart, and ~0.3 ms this way (measured on Python 3.11, 2-core AMD
EPYC). Instances are built by one shared ``__new__`` (~2 µs each; a load makes a few dozen).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

__all__ = ["Record"]

_MISSING = object()


class _FastRecord(tuple):
    """Runtime base of :data:`Record` (see the module docstring)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        if not own:  # a subclass adding methods only (``class Decision(_DecisionFields)``): same fields
            return
        if getattr(cls.__bases__[0], "_fields", ()):
            raise TypeError(f"{cls.__name__}: a record's fields are declared once, not extended by a subclass")
        fields = tuple(own)
        defaults = {}
        for name in fields:
            value = cls.__dict__.get(name, _MISSING)
            if value is not _MISSING:
                defaults[name] = value
            elif defaults:
                raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
        for i, name in enumerate(fields):
            setattr(cls, name, property(operator.itemgetter(i), doc=f"Alias for field number {i}"))
        cls._fields, cls._field_defaults = fields, defaults
        setattr(cls, "__match_args__", fields)  # noqa: B010 - a class attribute type checkers model as final

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        fields = cls._fields
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__} takes {len(fields)} arguments, got {len(args)}")
        if not kwargs and len(args) == len(fields):
            return tuple.__new__(cls, args)
        values = list(args)
        defaults = cls._field_defaults
        for name in fields[len(args):]:
            if name in kwargs:
                values.append(kwargs.pop(name))
            elif name in defaults:
                values.append(defaults[name])
            else:
                raise TypeError(f"{cls.__name__} missing required argument: {name!r}")
        if kwargs:
            name = next(iter(kwargs))
            raise TypeError(f"{cls.__name__} got an unexpected or repeated argument {name!r}")
        return tuple.__new__(cls, values)

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self, **changes: Any) -> Any:
        values = [changes.pop(name, value) for name, value in zip(self._fields, self, strict=True)]
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return tuple.__new__(type(self), values)

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __getnewargs__(self) -> tuple:
        return tuple(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({shown})"


if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    Record = _FastRecord
