"""What a transparent-mode warm hit does besides loading the executable: each piece is the same check as before,
done without the per-lookup cost found in profiling (docs/restart-measurements.md, section 8)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from xlakit._jax import hooks, keys
from xlakit._jax.assignment import _stored_compile_options


def test_stored_options_are_read_without_copying_and_equal_the_copying_reader():
    compiled = jax.jit(lambda x: x * 2 + 1).lower(jnp.ones((4,), jnp.float32)).compile()
    exec_bytes = compiled.runtime_executable().serialize()
    fast = [o.SerializeAsString() for o in keys.stored_compile_options(exec_bytes)]
    slow = [o.SerializeAsString() for o in _stored_compile_options(exec_bytes)]
    assert fast == slow and len(fast) >= 1  # the load check still sees the stored assignment
    # the check itself still refuses a caller with another device count
    options = next(iter(keys.stored_compile_options(exec_bytes)))
    keys.check_loadable(exec_bytes, options, jax.devices()[:1])
    try:
        keys.check_loadable(exec_bytes, None, [])
    except keys.PlacementMismatch as e:
        assert "compiled for 1 device(s)" in str(e)
    else:  # pragma: no cover
        raise AssertionError("a caller with no devices was not refused")


def test_hook_frames_are_hidden_from_traced_locations_only_while_installed():
    import pytest
    from jax._src import source_info_util as siu

    if hooks.installed():  # pragma: no cover - another test left a cache enabled
        pytest.skip("xlakit's hooks are already installed")
    assert siu.is_user_filename(hooks.__file__)
    hooks.acquire()
    try:
        # JAX's own files are excluded the same way: the jit wrapper frame adds no location to each op
        assert not siu.is_user_filename(hooks.__file__)
    finally:
        hooks.release()
    assert siu.is_user_filename(hooks.__file__)  # released exactly as acquired


def test_prefetched_build_fingerprint_is_the_same_value_and_used_once(tmp_path, monkeypatch):
    from xlakit._jax import fingerprint as fpmod

    monkeypatch.setattr(fpmod, "_memo_dir", tmp_path)  # a memo of its own: the first computation hashes jaxlib
    monkeypatch.delenv(fpmod.MEMO_DIR_ENV, raising=False)
    fpmod.prefetch_build_fingerprint()
    assert fpmod._prefetched_fingerprint() == fpmod.jaxlib_build_fingerprint()
    assert fpmod._prefetched_fingerprint() is None  # consumed: a later environment computes its own


def test_a_compile_inside_a_hook_when_the_last_user_releases_still_reaches_jax(monkeypatch):
    """``disable_cache()`` on one thread while another thread's compile had just entered a hook made that
    ``jax.jit`` call fail with ``KeyError: 'key_get'`` (the saved JAX functions were cleared). A wrapper called
    after the release must forward to JAX's own function."""
    from jax._src import compiler

    def jax_read(module_name, cache_key, compile_options, backend, executable_devices):  # JAX's own, stood in for
        return ("jax's answer", module_name, cache_key)

    import gc

    import pytest

    gc.collect()  # an ExecutableCache another test dropped releases the hooks when collected
    if hooks.installed():  # pragma: no cover - another test left a cache enabled
        pytest.skip("xlakit's hooks are already installed")
    monkeypatch.setattr(compiler, "_cache_read", jax_read)
    hooks.acquire()
    wrapper = compiler._cache_read
    assert wrapper is not jax_read
    hooks.release()
    assert compiler._cache_read is jax_read               # restored exactly
    assert wrapper("m", "k", None, None, None) == ("jax's answer", "m", "k")
