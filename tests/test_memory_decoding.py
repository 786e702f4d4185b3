"""What keeps ``peak()`` cheap gives the same answers as the plain way: the per-step charging sweep equals charging
every step from scratch, the fast readers of the buffer assignment equal the general protobuf reader field for
field, a module decoded on demand equals one decoded in full, a program is decoded once, and the search for code
XLA does not count equals a regular expression over the whole text. (The cost itself is measured in
``benchmarks/memory_attribution.py``.)"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import pytest
from test_memory_proto import varint  # the tests' protobuf varint encoder

from xlakit.memory import buffer_assignment
from xlakit.memory._charging import charge, step_totals
from xlakit.memory._hlo_module import decode_module
from xlakit.memory._proto import parse
from xlakit.memory._xla_fields import _F

F32 = jnp.float32


def _bytewise(sizes, allocs, offsets, priority):
    """The charging rule by brute force: every byte of every allocation goes to the first-ranked live buffer."""
    out = [0] * len(sizes)
    owner: dict[tuple[int, int], int] = {}
    for i in sorted(range(len(sizes)), key=lambda j: (not priority[j], -sizes[j], j)):
        if allocs[i] is None:
            out[i] = sizes[i]
            continue
        for byte in range(offsets[i], offsets[i] + sizes[i]):
            if (allocs[i], byte) not in owner:
                owner[allocs[i], byte] = i
                out[i] += 1
    return out


def _random_program(seed, n=60, steps=40):
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 4, 8, 16, 24, 40]) for _ in range(n)]
    allocs = [rng.choice([None, 0, 0, 0, 1, 2]) for _ in range(n)]
    offsets = [None if a is None else rng.randrange(0, 64) for a in allocs]
    ranges = []
    for _ in range(n):
        a = rng.randrange(-2, steps)
        ranges.append(None if a < 0 else (a, rng.randrange(a, steps)))
    labels = [rng.randrange(3) for _ in range(n)]
    priority = [rng.random() < 0.2 for _ in range(n)]
    return sizes, allocs, offsets, ranges, labels, priority, steps


@pytest.mark.parametrize("seed", range(6))
def test_the_sweep_charges_every_step_as_charging_it_from_scratch(seed):
    sizes, allocs, offsets, ranges, labels, priority, steps = _random_program(seed)
    cols = step_totals(steps, ranges, sizes, allocs, offsets, labels, 3, priority)
    for step in range(steps):
        live = [i for i, r in enumerate(ranges) if r is not None and r[0] <= step <= r[1]]
        charged = charge([sizes[i] for i in live], [allocs[i] for i in live], [offsets[i] for i in live],
                         [priority[i] for i in live])
        assert charged == _bytewise([sizes[i] for i in live], [allocs[i] for i in live],
                                    [offsets[i] for i in live], [priority[i] for i in live])
        expected = [0, 0, 0]
        for i, c in zip(live, charged, strict=True):
            expected[labels[i]] += c
        assert [col[step] for col in cols] == expected, step


@pytest.mark.parametrize("seed", range(6))
def test_the_numpy_sums_charge_as_the_sweep(seed):
    """step_array sweeps only buffers that may share live bytes (big allocations; in small ones, pairs that overlap
    in bytes and in steps) and adds up the others at once: the same numbers as sweeping them all."""
    import numpy as np

    from xlakit.memory._charging import step_array

    rng = random.Random(seed)
    sizes, allocs, offsets, ranges, labels, priority, steps = _random_program(seed)
    allocs = [None if a is None else rng.randrange(12) if seed % 2 else a for a in allocs]  # small allocations too
    expected = step_totals(steps, ranges, sizes, allocs, offsets, labels, 3, priority)
    got = step_array(steps, [r[0] if r else -1 for r in ranges], [r[1] if r else -1 for r in ranges], sizes,
                     [-1 if a is None else a for a in allocs], [-1 if o is None else o for o in offsets], labels, 3,
                     np.array(priority))
    assert got.tolist() == expected


def _mlp_loss(ws, x):
    for w in ws:
        x = jnp.tanh(x @ w)
    return (x ** 2).sum()


def _scan_loss(ws, x):
    y, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
    return (y ** 2).sum()


@pytest.fixture(scope="module")
def programs():
    spec = jax.ShapeDtypeStruct
    return [jax.jit(jax.grad(_mlp_loss)).lower([spec((64, 64), F32)] * 3, spec((8, 64), F32)).compile(),
            jax.jit(jax.grad(_scan_loss)).lower(spec((4, 32, 32), F32), spec((8, 32), F32)).compile()]


def test_the_fast_readers_equal_the_general_protobuf_reader(programs):
    for compiled in programs:
        data = compiled.memory_analysis().serialized_buffer_assignment_proto
        ba = buffer_assignment(compiled)
        by_id = {b.id: b for b in ba.logical_buffers}
        for lb in parse(data).messages(_F.BA_LOGICAL_BUFFERS):
            b = by_id[lb.int(_F.LB_ID)]
            loc = lb.message(_F.LB_DEFINED_AT)
            assert (b.size, b.color) == (lb.int(_F.LB_SIZE), lb.int(_F.LB_COLOR))
            assert b.instruction_id == loc.int(_F.LOC_INSTRUCTION_ID)
            assert b.shape_index == tuple(loc.ints(_F.LOC_SHAPE_INDEX))
        allocations = {a.index: a for a in ba.allocations}
        for al in parse(data).messages(_F.BA_ALLOCATIONS):
            a = allocations[al.int(_F.AL_INDEX)]
            assert a.size == al.int(_F.AL_SIZE) and a.is_parameter == al.bool(_F.AL_PARAMETER)
            assert a.parameter_number == (al.int(_F.AL_PARAMETER_NUMBER) if a.is_parameter else None)
            assert [(s.buffer.id, s.offset, s.size) for s in a.slices] == [
                (s.int(_F.AS_BUFFER), s.int(_F.AS_OFFSET), s.int(_F.AS_SIZE)) for s in al.messages(_F.AL_ASSIGNED)]
        peaks = {pk.int(_F.PEAK_INDEX): tuple(pk.ints(_F.PEAK_IDS)) for pk in parse(data).messages(_F.BA_PEAK_BUFFERS)}
        assert {a.index: a.peak_buffer_ids for a in ba.allocations if a.peak_buffer_ids} == peaks


def test_records_read_at_once_are_read_as_one_by_one_even_when_damaged(programs):
    """The numpy reader of logical buffers and allocations reads each record as the per-field reader does, and
    leaves to it any record it cannot read whole: a few bytes changed at random in a record give the same answer,
    or the same error, either way."""
    from xlakit.memory import _assignment_decode as decode
    from xlakit.memory._proto import ProtoDecodeError, scan

    def one_by_one(data, field, spans):
        if field == _F.BA_LOGICAL_BUFFERS:
            return [(*lb[:3], *decode._location(data, lb[3]))
                    for lb in (decode._logical_buffer(data, *span) for span in spans)]
        return [decode._allocation_fields(data, *span) or decode._allocation_table(data, span) for span in spans]

    def outcome(read, *args):
        try:
            return read(*args)
        except ProtoDecodeError as exc:
            return type(exc)

    rng = random.Random(0)
    at_once = {_F.BA_LOGICAL_BUFFERS: decode._logical_buffers_at_once, _F.BA_ALLOCATIONS: decode._allocations_at_once}
    for compiled in programs:
        data = compiled.memory_analysis().serialized_buffer_assignment_proto
        spans = scan(data, 0, len(data), tuple(at_once))
        for field, read in at_once.items():
            assert read(data, spans[field]) == one_by_one(data, field, spans[field])
            for _ in range(60):
                damaged = bytearray(data)
                start, end = rng.choice(spans[field])
                for _ in range(rng.randint(1, 3)):
                    damaged[rng.randrange(start, end)] = rng.randrange(256)
                assert outcome(read, bytes(damaged), spans[field]) == outcome(one_by_one, bytes(damaged), field,
                                                                               spans[field])


def test_instructions_read_at_once_are_read_as_one_by_one_even_when_damaged(programs, monkeypatch):
    """The numpy reader of a computation's instruction records gives each instruction the per-record reader gives
    (fields, metadata, shape span), and leaves it any record it cannot read exactly so: a few bytes changed at
    random give the same instructions, or the same error, either way."""
    from xlakit.memory import _hlo_module
    from xlakit.memory._computation_heads import _INSTRUCTION_KEY
    from xlakit.memory._proto import ProtoDecodeError, spans

    def seen(pairs):
        return [(iid, ins.name, ins.opcode, ins.computation_id, ins.operands, ins.called, ins.parameter_number,
                 ins.tuple_index, ins._raw[1:], ins.op_name, ins.frame_id) for iid, ins in pairs]

    def outcome(read, data, records):
        try:
            return seen(read(data, records))
        except (ProtoDecodeError, IndexError) as exc:
            return type(exc)

    def one_by_one(data, records):
        return [_hlo_module._instruction(data, *r, 7) for r in records]

    def at_once(data, records):
        return list(zip(*_hlo_module._instructions(data, records, 7), strict=True))

    monkeypatch.setattr(_hlo_module, "_AT_ONCE", 1)  # numpy for every computation, not only large ones
    rng = random.Random(0)
    for compiled in programs:
        data = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
        module = decode_module(data)
        _name, start, end, _root, _last = module.instructions._index.comps[module.entry_id]
        records = spans(data, start, end, _INSTRUCTION_KEY)
        assert outcome(at_once, data, records) == outcome(one_by_one, data, records)
        for _ in range(300):
            damaged = bytearray(data)
            first, last = rng.choice(records)
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(first, last)] = rng.randrange(256)
            assert outcome(at_once, bytes(damaged), records) == outcome(one_by_one, bytes(damaged), records)


def test_packed_ids_valued_at_once_equal_the_packed_reader(monkeypatch):
    """A schedule's instruction ids are valued with numpy (packed_ints): the same ints as the reader's, also for
    negative, 64-bit and damaged payloads (the same error)."""
    from xlakit.memory import _varint_records
    from xlakit.memory._proto import ProtoDecodeError, packed
    from xlakit.memory._varint_records import packed_ints

    monkeypatch.setattr(_varint_records, "_SHORT", 0)  # numpy for every payload, not only long ones

    def outcome(read, data):
        try:
            return read(data, 2, len(data) - 2)
        except ProtoDecodeError:
            return ProtoDecodeError

    rng = random.Random(0)
    for _ in range(400):
        values = [rng.choice([rng.randrange(128), rng.randrange(1 << 40), -rng.randrange(1 << 30),
                              rng.randrange(1 << 64)]) for _ in range(rng.randint(0, 12))]
        body = bytearray(b"".join(varint(v) for v in values))
        if body and rng.random() < 0.3:
            body[rng.randrange(len(body))] = rng.randrange(256)
        data = b"xx" + bytes(body) + b"yy"
        assert outcome(packed_ints, data) == outcome(packed, data)


def test_packed_payloads_valued_together_equal_the_packed_reader(monkeypatch):
    """All of a schedule's sequences are valued in one numpy pass (packed_many): each the same ints as the reader's,
    also for negative, 64-bit and damaged payloads (the same error)."""
    from xlakit.memory import _varint_records
    from xlakit.memory._proto import ProtoDecodeError, packed
    from xlakit.memory._varint_records import packed_many

    monkeypatch.setattr(_varint_records, "_SHORT", 0)  # numpy for every schedule, not only long ones

    def outcome(read, *args):
        try:
            return read(*args)
        except ProtoDecodeError:
            return ProtoDecodeError

    rng = random.Random(1)
    for _ in range(300):
        body, spans = bytearray(b"xx"), []
        for _ in range(rng.randint(1, 5)):
            start = len(body)
            body += b"".join(varint(rng.choice([rng.randrange(128), rng.randrange(1 << 40), -rng.randrange(1 << 30),
                                                rng.randrange(1 << 64)])) for _ in range(rng.randint(0, 8)))
            spans.append((start, len(body)))
            body += b"\x07"  # a byte between payloads, as a key or length would be
        if rng.random() < 0.4:
            body[rng.randrange(2, len(body))] = rng.choice([rng.randrange(256), 0x80, 0xFF, 0x02])
        data = bytes(body)
        assert outcome(packed_many, data, spans) == outcome(lambda d, s: [packed(d, *span) for span in s], data, spans)


def test_records_found_inline_are_found_as_by_the_general_readers(programs):
    """The buffer assignment's records (``_top_level``) and the schedule's entries (``_schedule``) read inline are
    those the general reader finds, field for field, also when bytes are damaged (the same error either way)."""
    import numpy as np

    from xlakit.memory._assignment_decode import _TOP_FIELDS, _top_level
    from xlakit.memory._module_tables import _schedule
    from xlakit.memory._proto import ProtoDecodeError, last, scan
    from xlakit.memory._varint_records import packed_ints

    def top_by_scan(data):
        found = scan(data, 0, len(data), _TOP_FIELDS)
        return {f: [tuple(span) for span in found.get(f, ())] for f in _TOP_FIELDS}

    def top_inline(data):
        return {f: [tuple(span) for span in spans.tolist()] for f, spans in _top_level(data).items()}

    def schedule_by_scan(data, span):
        out = {}
        for start, end in scan(data, span[0], span[1], (_F.SCHED_SEQUENCES,)).get(_F.SCHED_SEQUENCES, ()):
            entry = scan(data, start, end, (_F.SCHED_KEY, _F.SCHED_VALUE))
            ids = []
            for seq in entry.get(_F.SCHED_VALUE, [])[-1:]:
                for value in scan(data, seq[0], seq[1], (_F.SEQ_IDS,)).get(_F.SEQ_IDS, ()):
                    ids += packed_ints(data, *value) if isinstance(value, tuple) else [value]
            out[last(entry, _F.SCHED_KEY)] = tuple(ids)
        return out

    def outcome(read, *args):
        try:
            return read(*args)
        except (ProtoDecodeError, TypeError, IndexError) as exc:  # scan gives a scalar field as an int
            return ProtoDecodeError if isinstance(exc, ProtoDecodeError) else "not read"

    rng = random.Random(2)
    for compiled in programs:
        ba = compiled.memory_analysis().serialized_buffer_assignment_proto
        module = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
        span = scan(module, 0, len(module), (_F.MOD_SCHEDULE,))[_F.MOD_SCHEDULE][-1]
        assert top_inline(ba) == top_by_scan(ba) and all(isinstance(v, np.ndarray) for v in _top_level(ba).values())
        assert _schedule(module, span) == schedule_by_scan(module, span) and _schedule(module, span)
        for _ in range(150):
            damaged_ba, damaged_module = bytearray(ba), bytearray(module)
            for _ in range(rng.randint(1, 3)):
                damaged_ba[rng.randrange(len(ba))] = rng.choice([rng.randrange(256), 0x80, 0x08, 0x0A, 0x1A])
                damaged_module[rng.randrange(*span)] = rng.choice([rng.randrange(256), 0x80, 0x08, 0x0A, 0x12])
            expected = outcome(top_by_scan, bytes(damaged_ba))
            assert outcome(top_inline, bytes(damaged_ba)) in (expected, ProtoDecodeError if expected == "not read"
                                                              else expected)
            assert outcome(_schedule, bytes(damaged_module), span) == outcome(schedule_by_scan, bytes(damaged_module),
                                                                              span)


def test_a_module_decoded_on_demand_equals_one_decoded_in_full(programs):
    for compiled in programs:
        data = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
        full = decode_module(data)
        everything = dict(full.instructions.items())  # iterating decodes every computation
        lazy = decode_module(data)
        assert len(lazy.instructions._index.instructions) < len(everything)  # only the entry was read
        for cid in full.computations:
            root = full.instructions[full.computations[cid][2]]
            assert lazy.root_opcode(cid) == root.opcode
        for iid in sorted(everything, reverse=True):  # fusion bodies first: read from their last record
            a, b = everything[iid], lazy.instructions[iid]
            assert (a.name, a.opcode, a.computation_id, a.operands, a.called, a.parameter_number, a.tuple_index,
                    a.op_name, a.frame_id) == (b.name, b.opcode, b.computation_id, b.operands, b.called,
                                               b.parameter_number, b.tuple_index, b.op_name, b.frame_id)
        assert {c: lazy.computations[c] for c in lazy.computations} == dict(full.computations.items())
        assert lazy.sequential_computations() == full.sequential_computations()


def test_computation_heads_read_at_once_equal_those_read_one_by_one(programs):
    """The id, root id and name of every computation of a module, read from their tails with numpy
    (``_quick_heads``), equal the per-computation reader's, also when bytes near a tail are damaged (a computation
    the numpy reader cannot read is left to the per-computation one)."""
    from xlakit.memory._computation_heads import _quick_head, _quick_heads
    from xlakit.memory._proto import scan

    rng = random.Random(0)
    for compiled in programs:
        data = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
        spans = scan(data, 0, len(data), (_F.MOD_COMPUTATIONS,))[_F.MOD_COMPUTATIONS]
        heads = _quick_heads(data, spans)
        assert heads == [_quick_head(data, *span) for span in spans]
        assert all(head is not None for head in heads)  # current XLA's numbering: every one read at once
        for _ in range(150):
            damaged = bytearray(data)
            start, end = rng.choice(spans)
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(max(start, end - 12), end)] = rng.choice(
                    [rng.randrange(256), 0x38, 0x30, 0x28, 0x80, 0x01, 0xFF])
            assert _quick_heads(bytes(damaged), spans) == [_quick_head(bytes(damaged), *span) for span in spans]


def test_a_compiled_program_is_decoded_once(programs):
    assert buffer_assignment(programs[0]) is buffer_assignment(programs[0])
    assert buffer_assignment(programs[0]) is not buffer_assignment(programs[1])


def test_code_outside_the_buffer_assignment_is_found_as_a_full_search_finds_it():
    from xlakit.memory._probe_accounting import _CUSTOM_CALL, _ENTRY_OP, _FUSION_KIND, _findall, runtime_calls

    text = "\n".join([
        "ENTRY %main (p: f32[8]) -> f32[8] {",
        '  %a = f32[8,8]{1,0} dot(%p, %p), metadata={op_name="dot"}',
        '  %f = f32[8] fusion(%a), kind=kCustom, calls=%lib, backend_config={"kind":"__ynn_fusion"}',
        '  %c = f32[8] custom-call(%f), custom_call_target="my_target"',
        "  %conv = f32[8] convolution(%c, %c), dim_labels=b0f_0io->b0f",
        "}",
        "%lib (x: f32[8]) -> f32[8] {",
        "  ROOT %d = f32[8] dot(%x, %x)",
        "}"])
    for literals, pattern in ((('"kind"',), _FUSION_KIND), (("custom_call_target=",), _CUSTOM_CALL),
                              (("dot(", "convolution("), _ENTRY_OP)):
        assert sorted(_findall(text, literals, pattern)) == sorted(pattern.findall(text))
    assert runtime_calls(text, "cpu") == ("1 convolution run by Eigen", "1 custom call to my_target",
                                          "1 fused operation run by YNNPACK (__ynn_fusion)",
                                          "1 matrix product run by Eigen")  # not the dot inside the fusion
