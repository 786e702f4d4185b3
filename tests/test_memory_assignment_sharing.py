"""A decoded buffer assignment shared the way a notebook shares it: ``dataclasses.replace`` with other contents
is read from what it holds (not from the original's columns or cached liveness), and two threads reading one
assignment, or attributing one program, get the same objects and no error. Found by a user trial on CPU
(2026-12-06): a replaced assignment reported the original's live bytes, two threads could each make their own
``LogicalBuffer`` objects, and two ``peak()`` calls at once could raise ``KeyError`` from the lazily read module."""

from __future__ import annotations

import dataclasses
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.memory import peak
from xlakit.memory.buffer_assignment import buffer_assignment, decode_buffer_assignment

W = np.ones((256, 256), np.float32)


@pytest.fixture(scope="module")
def program():
    return jax.jit(lambda x: jnp.tanh(jnp.tanh(x @ W) @ W.T)).lower(jnp.ones((64, 256))).compile()


def _decode(program):
    return decode_buffer_assignment(program.memory_analysis().serialized_buffer_assignment_proto,
                                    program.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto(),
                                    platform="cpu")


@pytest.fixture
def fast_switching():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave at almost every bytecode: a race shows within a few rounds
    yield
    sys.setswitchinterval(before)


def test_a_replaced_assignment_is_read_from_what_it_holds(program):
    whole = _decode(program).live_bytes_by_step()["live_bytes"].max()
    fresh = _decode(program)
    temporaries = [a for a in fresh.allocations if a.kind == "temporary"]
    assert temporaries
    gone = {s.buffer.id for a in temporaries for s in a.slices}
    kept = dataclasses.replace(fresh, allocations=tuple(a for a in fresh.allocations if a.kind != "temporary"),
                               logical_buffers=tuple(b for b in fresh.logical_buffers if b.id not in gone))
    assert kept._memo is not fresh._memo
    assert kept._rows().ids == [b.id for b in kept.logical_buffers]
    without = kept.live_bytes_by_step()["live_bytes"].max()
    assert without == whole - sum(a.size for a in temporaries) and without < whole
    assert fresh.live_bytes_by_step()["live_bytes"].max() == whole  # the original keeps its own answer


def test_two_threads_reading_a_fresh_assignment_get_the_same_objects(program, fast_switching):
    for _ in range(20):
        ba = _decode(program)
        got: list = [None, None]
        start = threading.Barrier(2)

        def read(i, ba=ba, got=got, start=start):
            start.wait()
            got[i] = (ba.logical_buffers, ba.allocations)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got[0][0] is got[1][0] and got[0][1] is got[1][1]
        mine = {id(b) for b in ba.logical_buffers}
        assert all(id(s.buffer) in mine for a in ba.allocations for s in a.slices)


def test_two_peaks_of_one_program_at_once_raise_nothing(fast_switching):
    def loss(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
        return (h ** 2).mean()

    lowered = jax.jit(lambda ws, x: ws - 0.01 * jax.grad(loss)(ws, x)).lower(jnp.ones((4, 64, 64)), jnp.ones((8, 64)))
    for _ in range(15):
        compiled = lowered.compile()
        buffer_assignment(compiled)  # decoded once: both threads then read its lazily decoded module
        errors: list[BaseException] = []
        totals: list[int] = []

        def work(compiled=compiled, errors=errors, totals=totals):
            try:
                totals.append(peak(compiled).total_bytes)
            except BaseException as exc:  # noqa: BLE001 - collected and reported by the assertion
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(totals) == 2 and totals[0] == totals[1] > 0
