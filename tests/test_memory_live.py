"""live_arrays / live_bytes / move: exact bytes, memory kinds, creation sites, offload and back."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.memory import live_arrays, live_bytes, move


def test_accounting_changes_by_exactly_the_bytes_of_a_new_array():
    gc.collect()
    before = live_bytes()
    x = jnp.zeros((37, 11), jnp.bfloat16)
    assert live_bytes() - before == 37 * 11 * 2
    rows = live_arrays()
    mine = rows[rows["array"] == id(x)]
    assert len(mine) == 1
    row = mine.iloc[0]
    assert (row["shape"], row["dtype"], row["bytes"], row["memory_kind"]) == ((37, 11), "bfloat16", 814, "device")
    assert row["device"] == str(jax.devices()[0]) and row["devices"] == 1
    assert row["created_at"].startswith(__file__ + ":") and "test_accounting" in row["created_at"]
    del x
    gc.collect()
    assert live_bytes() == before


def test_totals_by_device_and_memory_kind_and_offload_round_trip():
    gc.collect()
    x = jnp.ones((256, 256), jnp.float32)  # 262144 B
    base = live_arrays(group_by=("device", "memory_kind"))
    dev = str(jax.devices()[0])
    pinned_before = int(base["bytes"].get((dev, "pinned_host"), 0))

    off = move({"w": x, "n": np.arange(3)}, memory_kind="pinned_host")
    assert (off.bytes_moved, off.moved, off.unchanged) == (262144, 1, 1)
    assert off.arrays["w"].sharding.memory_kind == "pinned_host" and isinstance(off.arrays["n"], np.ndarray)
    totals = live_arrays(group_by=("device", "memory_kind"))
    assert int(totals.loc[(dev, "pinned_host"), "bytes"]) == pinned_before + 262144

    back = move(off.arrays, memory_kind="device")
    assert back.bytes_moved == 262144 and back.arrays["w"].sharding.memory_kind == "device"
    np.testing.assert_array_equal(np.asarray(back.arrays["w"]), np.ones((256, 256), np.float32))
    again = move(back.arrays, memory_kind="device")
    assert (again.bytes_moved, again.moved) == (0, 0)
    assert "262144" not in repr(off) and "256.0 KiB" in repr(off)


def test_donating_move_frees_the_source():
    x = jnp.ones((64,), jnp.float32)
    out = move(x, memory_kind="pinned_host", donate=True)
    assert out.bytes_moved == 256 and x.is_deleted()


def test_unknown_memory_kind_and_column_raise_before_any_transfer():
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="offers"):
        move(x, memory_kind="hbm")
    assert not x.is_deleted()
    with pytest.raises(KeyError, match="unknown group_by"):
        live_arrays(group_by="colour")
