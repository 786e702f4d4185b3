"""The HMAC secret is strong, private, and outside the cache folder; each weak setting is refused by name."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from xlakit.store import LocalStore, SecretUnavailable, load_secret

PART = "cpu-p"


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch, tmp_path):
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize("inside", ["config_in_cache", "cache_in_config"])
def test_secret_and_cache_must_not_overlap(tmp_path, monkeypatch, inside):
    """Anyone who can read the cache could re-sign entries with a secret stored beside them."""
    if inside == "config_in_cache":
        cache, config = tmp_path / "cache", tmp_path / "cache" / "cfg"
    else:
        config, cache = tmp_path / "cfg", tmp_path / "cfg" / "cache"
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(config))
    store = LocalStore(cache)
    res = store.put(PART, "k", {}, b"x")
    assert not res.stored and "XLAKIT_CONFIG_DIR" in res.reason
    assert str(config.resolve() / "secret") in res.reason and str(cache.resolve()) in res.reason
    assert not (config / "secret").exists()
    with pytest.raises(SecretUnavailable, match="overlap"):
        _ = LocalStore(cache, config_dir=config).secret


def test_overlap_is_checked_on_resolved_paths(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "alias" / "cfg"))
    assert not LocalStore(tmp_path / "real").put(PART, "k", {}, b"x").stored


def test_env_secret_needs_no_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "a-fleet-secret-of-enough-length")
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "cache" / "cfg"))
    assert LocalStore(tmp_path / "cache").put(PART, "k", {}, b"x").stored


def test_world_writable_config_folder_is_refused(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "secret").write_text("a" * 64)
    os.chmod(cfg, 0o777)
    with pytest.raises(SecretUnavailable, match=r"writable by others \(mode 0o777\).*XLAKIT_CONFIG_DIR"):
        load_secret(cfg)


def test_symlinked_secret_is_refused_and_its_target_untouched(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.mkdir(mode=0o700)
    shared = tmp_path / "readme.txt"
    shared.write_text("a public file of more than sixteen bytes\n")
    os.chmod(shared, 0o644)
    os.symlink(shared, cfg / "secret")
    with pytest.raises(SecretUnavailable, match="is a symlink"):
        load_secret(cfg)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644


def test_short_secrets_are_refused(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    cfg.mkdir(mode=0o700)
    (cfg / "secret").write_text("x")
    with pytest.raises(SecretUnavailable, match="holds 1 bytes, fewer than 16"):
        load_secret(cfg)
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "short")
    with pytest.raises(SecretUnavailable, match="XLAKIT_CACHE_SECRET is 5 bytes long, fewer than 16"):
        load_secret()


def test_whitespace_secret_is_refused_alike_from_env_and_file(tmp_path, monkeypatch):
    """16 spaces in XLAKIT_CACHE_SECRET were accepted while a secret file of spaces was refused."""
    cfg = tmp_path / "cfg"
    cfg.mkdir(mode=0o700)
    (cfg / "secret").write_text(" " * 16 + "abc\n")
    with pytest.raises(SecretUnavailable, match="holds 3 bytes, fewer than 16"):
        load_secret(cfg)
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", " " * 16)
    with pytest.raises(SecretUnavailable, match="XLAKIT_CACHE_SECRET is 0 bytes long, fewer than 16"):
        load_secret()
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "  0123456789abcdef\n")
    assert load_secret() == b"0123456789abcdef"  # the same value a file holding it gives


def test_symlinked_secret_beside_the_cache_is_reported_as_a_symlink(tmp_path, monkeypatch):
    """The link is the first thing wrong; it used to be reported as an overlap with the cache."""
    from xlakit.store.secret import check_secret_outside

    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    cache, cfg = tmp_path / "cache", tmp_path / "cfg"
    cache.mkdir()
    cfg.mkdir(mode=0o700)
    (cache / "secret").write_text("0123456789abcdef0123456789abcdef")
    os.symlink(cache / "secret", cfg / "secret")
    with pytest.raises(SecretUnavailable, match="is a symlink") as info:
        check_secret_outside(cache, cfg)
    assert "overlap" not in str(info.value)


def test_non_utf8_env_secret_is_named(tmp_path):
    """A secret with a byte that is not UTF-8 is refused naming the variable: put reports it, verify exits 2."""
    env = dict(os.environb)
    env.update({b"XLAKIT_CACHE_DIR": str(tmp_path / "cache").encode(),
                b"XLAKIT_CONFIG_DIR": str(tmp_path / "cfg").encode(),
                b"XLAKIT_CACHE_SECRET": b"s\xffcret-of-enough-length",
                b"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))).encode()})
    code = "from xlakit.store import LocalStore; print(LocalStore().put('p', 'k', {}, b'x').reason)"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "XLAKIT_CACHE_SECRET is not valid UTF-8" in p.stdout
    (tmp_path / "cache" / "p").mkdir(parents=True)
    p = subprocess.run([sys.executable, "-m", "xlakit.cli", "cache", "verify"], env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 2 and "XLAKIT_CACHE_SECRET" in p.stderr
