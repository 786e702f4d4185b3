"""xlakit._record.Record behaves as typing.NamedTuple does for the same declaration (it replaced NamedTuple on the
first result's path to cut its class-creation cost); each case compares the two."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest

from xlakit._record import Record


class Fast(Record):
    name: str
    shape: tuple = ()
    dtype: str = "float32"

    def size(self) -> int:
        return len(self.shape)


class Slow(NamedTuple):
    name: str
    shape: tuple = ()
    dtype: str = "float32"


def test_fields_defaults_access_and_tuple_behaviour_match_namedtuple():
    for args, kwargs in [(("w",), {}), (("w", (2, 3)), {}), ((), {"name": "w", "dtype": "int8"}),
                         (("w",), {"dtype": "bfloat16", "shape": (4,)})]:
        fast, slow = Fast(*args, **kwargs), Slow(*args, **kwargs)
        assert tuple(fast) == tuple(slow) and fast == slow and hash(fast) == hash(slow)
        assert (fast.name, fast.shape, fast.dtype) == (slow.name, slow.shape, slow.dtype)
        assert repr(fast).removeprefix("Fast") == repr(slow).removeprefix("Slow")
        assert fast._asdict() == slow._asdict()
        assert tuple(fast._replace(dtype="x")) == tuple(slow._replace(dtype="x"))
    assert Fast._fields == Slow._fields and Fast._field_defaults == Slow._field_defaults
    assert Fast.__match_args__ == Slow.__match_args__
    assert tuple(Fast._make(["a", (1,), "b"])) == ("a", (1,), "b") and Fast("w", (1, 2)).size() == 2
    match Fast("w", (5,)):
        case Fast(name, shape):
            assert (name, shape) == ("w", (5,))
    assert isinstance(Fast("w"), tuple) and pickle.loads(pickle.dumps(Fast("w", (1,)))) == Fast("w", (1,))


def test_bad_arguments_raise_as_namedtuple_does():
    for call in (lambda cls: cls(), lambda cls: cls("w", (), "x", "extra"), lambda cls: cls("w", nope=1),
                 lambda cls: cls("w", name="v")):
        with pytest.raises(TypeError):
            call(Slow)
        with pytest.raises(TypeError):
            call(Fast)
    with pytest.raises(ValueError):
        Fast("w")._replace(nope=1)
    with pytest.raises(AttributeError):
        Fast("w").name = "v"  # type: ignore[misc]
    with pytest.raises(TypeError):
        class Bad(Record):  # a field without a default after one with a default
            a: int = 0
            b: int
