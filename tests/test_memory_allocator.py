"""allocator_stats / reset_peak: recorded GPU dicts, exact CPU accounting, a real VmHWM reset, baseline resets,
and per-device stats with 4 host devices (in a subprocess: the device count is fixed when JAX starts)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import worker_env

from xlakit.memory import AllocatorStats, allocator_stats, parse_memory_stats, process_memory, reset_peak

RECORDED = json.loads((Path(__file__).parent / "data" / "gpu_memory_stats.json").read_text())


def test_recorded_public_gpu_stats_parse_exactly():
    s = parse_memory_stats(RECORDED["public_gpu_after_alloc"], device="cuda:0")
    assert (s.bytes_in_use, s.peak_bytes_in_use, s.bytes_limit, s.num_allocs) == (76288, 76800, 33014415360, 3)
    assert s.largest_free_block_bytes == 33014338560 and s.bytes_reserved == 0
    assert s.pool_bytes is None and "absent" in s.sources["pool_bytes"]
    assert s.sources["bytes_in_use"] == "Device.memory_stats()['bytes_in_use']"


def test_minus_one_and_missing_keys_are_none_with_the_source_named():
    s = parse_memory_stats(RECORDED["synthetic_unavailable_fields"])
    assert (s.bytes_in_use, s.peak_bytes_in_use, s.num_allocs, s.largest_alloc_size) == (1048576, 4194304, 12, 2097152)
    for key in ("bytes_reserved", "peak_bytes_reserved", "largest_free_block_bytes"):
        assert getattr(s, key) is None
        assert s.sources[key] == f"Device.memory_stats()[{key!r}] = -1 (unavailable)"
    for key in ("bytes_limit", "pool_bytes", "peak_pool_bytes"):
        assert getattr(s, key) is None and s.sources[key] == f"Device.memory_stats(): key {key!r} absent (not tracked)"
    pool = parse_memory_stats(RECORDED["synthetic_with_pool"])
    assert (pool.pool_bytes, pool.peak_pool_bytes, pool.bytes_reserved) == (151397597184, 151397597184, 0)
    odd = parse_memory_stats({"bytes_in_use": 5, "vendor_counter": 7, "peak_bytes_in_use": True})
    assert odd.extra == {"vendor_counter": 7} and odd.peak_bytes_in_use is None
    with pytest.raises(TypeError, match="CPU"):
        parse_memory_stats(None)


def test_cpu_bytes_in_use_changes_by_exactly_the_bytes_of_a_new_array():
    gc.collect()
    before = allocator_stats(0)
    assert before.platform == "cpu" and before.peak_bytes_in_use is None and before.bytes_limit is None
    x = jnp.ones((123, 45), jnp.float32)
    after = allocator_stats(jax.devices()[0])
    assert after.bytes_in_use - before.bytes_in_use == 123 * 45 * 4
    assert "live jax.Array" in after.sources["bytes_in_use"]
    assert after.sources["process_hwm_bytes"].startswith("VmHWM from /proc/self/status")
    assert after.process_rss_bytes > 0 and after.process_hwm_bytes >= after.process_rss_bytes
    assert "not reported on cpu" in after.sources["bytes_limit"]
    del x


def _touch_and_free(nbytes: int) -> int:
    block = np.ones(nbytes // 8)  # written, so every page is resident
    hwm = process_memory().hwm_bytes
    del block
    return hwm


def test_the_cpu_reset_really_lowers_the_high_water_mark():
    hwm_with_block = _touch_and_free(300 * 2**20)
    rss = process_memory().rss_bytes
    assert hwm_with_block - rss >= 250 * 2**20  # the block was resident and is gone again
    result = reset_peak()
    assert result.method == "clear_refs" and result.exact and "clear_refs" in result.detail
    after = process_memory()
    assert hwm_with_block - after.hwm_bytes >= 250 * 2**20, (hwm_with_block, after)
    stats = allocator_stats(0)
    assert stats.reset_method == "clear_refs" and stats.peak_since_reset_exact is True
    assert stats.peak_since_reset_bytes == stats.process_hwm_bytes < hwm_with_block


class FakeGpu:
    """A device with a recorded memory_stats() dict, optionally with a native reset."""

    platform = "gpu"

    def __init__(self, stats: dict, device_id: int = 7, native: bool = False) -> None:
        self.stats, self.id = dict(stats), device_id
        self.cleared = 0
        if native:
            self.clear_memory_stats = self._clear

    def _clear(self) -> None:
        self.cleared += 1
        self.stats["peak_bytes_in_use"] = self.stats["bytes_in_use"]

    def memory_stats(self) -> dict:
        return dict(self.stats)

    def __str__(self) -> str:
        return f"gpu:{self.id}"


def test_baseline_reset_reports_exact_when_the_peak_rose_and_an_upper_bound_when_not():
    dev = FakeGpu(RECORDED["public_gpu_after_alloc"])  # peak 76800
    assert allocator_stats(dev).peak_since_reset_bytes is None
    result = reset_peak(dev)
    assert result.method == "baseline" and not result.exact and result.peak_at_reset == {"gpu:7": 76800}
    same = allocator_stats(dev)
    assert (same.peak_since_reset_bytes, same.peak_since_reset_exact) == (76800, False)
    assert "at most" in same.sources["peak_since_reset_bytes"]
    dev.stats["peak_bytes_in_use"] = 90000
    rose = allocator_stats(dev)
    assert (rose.peak_since_reset_bytes, rose.peak_since_reset_exact, rose.reset_method) == (90000, True, "baseline")
    assert "upper bound" in repr(same) and "exact" in repr(rose)


def test_a_native_reset_is_used_when_the_device_offers_one():
    dev = FakeGpu(RECORDED["public_gpu_after_alloc"], device_id=8, native=True)
    result = reset_peak(dev)
    assert result.method == "native" and result.exact and dev.cleared == 1
    assert "Device.clear_memory_stats()" in result.detail
    s = allocator_stats(dev)
    assert (s.peak_since_reset_bytes, s.peak_since_reset_exact) == (76288, True)


def test_a_device_without_a_peak_gets_no_fake_reset():
    dev = FakeGpu({"bytes_in_use": 10}, device_id=9)
    assert reset_peak(dev).method == "none"
    assert allocator_stats(dev).peak_since_reset_bytes is None


def test_bad_devices_raise():
    with pytest.raises(ValueError, match="no device with id 99"):
        allocator_stats(99)
    with pytest.raises(TypeError, match="jax.Device"):
        allocator_stats("cpu:0")


def test_display_forms():
    s = allocator_stats(0)
    assert isinstance(s, AllocatorStats)
    frame = s.to_frame()
    assert frame.loc["bytes_in_use", "bytes"] == s.bytes_in_use
    assert frame.loc["bytes_limit", "source"].startswith("not reported")
    assert "Allocator stats" in s._repr_html_() and "in use" in repr(s)
    table = allocator_stats()
    assert list(table.to_frame()["device"]) == [str(d) for d in jax.local_devices()]


FOUR_DEVICES = r"""
import json, jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import xlakit.memory as xm
devs = jax.devices()
a = jax.device_put(np.ones(1000, np.float32), devs[1])                    # 4000 B on device 1
mesh = jax.make_mesh((4,), ("x",))
b = jax.device_put(np.ones((8, 100), np.float32), NamedSharding(mesh, P("x")))  # 8 x 100 x 4 B / 4 = 800 B per device
c = jax.device_put(np.ones(10, np.float32), jax.sharding.SingleDeviceSharding(devs[3], memory_kind="pinned_host"))
stats = xm.allocator_stats()
reset = xm.reset_peak()
totals = xm.live_arrays(group_by=("device_id", "memory_kind"))
print(json.dumps({"devices": [s.device for s in stats], "in_use": [s.bytes_in_use for s in stats],
                  "process_wide": all("whole process" in s.sources["process_hwm_bytes"] for s in stats),
                  "method": reset.method,
                  "reset_devices": list(reset.devices),
                  "totals": {f"{k[0]}/{k[1]}": int(v) for k, v in totals["bytes"].items()}}))
"""


def test_four_host_devices_report_per_device_stats():
    env = worker_env({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    proc = subprocess.run([sys.executable, "-c", FOUR_DEVICES], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert out["in_use"] == [800, 4800, 800, 800]  # f32[8,100] sharded 4 ways = 2 rows x 100 x 4 B each
    assert out["process_wide"]
    assert out["method"] == "clear_refs" and len(out["reset_devices"]) == 4
    assert out["totals"] == {"0/device": 800, "1/device": 4800, "2/device": 800, "3/device": 800,
                             "3/pinned_host": 40}
