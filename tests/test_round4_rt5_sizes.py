"""One size parser for the CLI and the API: whole bytes only, ASCII digits, units up to EiB; counts and byte
numbers take NumPy integers, never bools (no JAX).

Faults these tests catch (red team): ``xlakit cache prune --max-bytes 0.4`` read a limit of 0 B and evicted every
entry (``0.0001k`` too; ``1.5`` read as 1) where the API refused "0.4"; ``١٠`` and full-width ``１٠`` read as 10
(Python's int()/float()/Fraction and re's \\d accept them); 9EiB was "invalid" although the overflow message
names 2**63-1 bytes (8 EiB), so no unit could express a size near the limit; a 7 EiB limit printed in TiB;
``check_int``/``check_max_bytes`` refused ``np.int64``; ``check_flag`` refused ``numpy.bool_`` under NumPy 2 (its
type is named "bool" there).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from xlakit._units import MAX_BYTES, check_flag, check_int, check_max_bytes, check_seconds, is_int, parse_size
from xlakit.cli import main
from xlakit.store import LocalStore

PART = "cpu-jaxlib0.0.0-x86_64-avx2-aaaaaaaa"


@pytest.mark.parametrize("text,expected", [
    ("1.5k", 1500), ("1.5 kib", 1536), ("0", 0), ("7EiB", 7 * 2**60), ("2PiB", 2 * 2**50), ("3PB", 3 * 10**15),
    ("9EB", 9 * 10**18), ("0.5KiB", 512), (" 10 ", 10), ("1.000", 1)])
def test_sizes_read_exactly(text, expected):
    assert parse_size(text) == expected and type(parse_size(text)) is int


@pytest.mark.parametrize("text,why", [
    ("0.4", "0.4 bytes, not a whole number of bytes"), ("0.0001k", "0.1 bytes, not a whole number"),
    ("1.5", "1.5 bytes, not a whole number"), ("1.0001KiB", "not a whole number"),
    ("١٠", "in ASCII digits"), ("１０", "in ASCII digits"), ("10\u00a0", "in ASCII digits"),
    ("8EiB", "more than the largest xlakit accepts, 9223372036854775807 bytes"), ("10EB", "give a smaller size")])
def test_fractions_of_a_byte_and_non_ascii_digits_are_refused(text, why):
    with pytest.raises(ValueError, match=why):
        parse_size(text)
    with pytest.raises(ValueError, match="^max_bytes: "):  # the API reads the same
        check_max_bytes(text)


def test_a_cap_of_zero_bytes_is_refused_by_the_api_and_a_minimum_is_named():
    with pytest.raises(ValueError, match="max_bytes must be a positive number of bytes"):
        check_max_bytes("0")
    with pytest.raises(ValueError, match="give at least 1 byte$"):
        parse_size("0k", minimum=1)
    assert check_max_bytes("7EiB") == 7 * 2**60


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    store = LocalStore(tmp_path / "cache")
    for i in range(2):
        header = {"name": f"jit_{i}", "compile_s": 1.0, "created": 1_700_000_000.0 + i, "environment": {},
                  "key_parts": {"module": str(i)}}
        assert store.put(PART, f"key-{i}", header, os.urandom(2000)).stored
    return store


@pytest.mark.parametrize("value", ["0.4", "0.0001k", "1.5", "١٠", "１０", "1e3"])
def test_prune_refuses_a_size_it_would_have_rounded_and_evicts_nothing(folder, capsys, value):
    code = main(["cache", "prune", "--path", str(folder.root), "--max-bytes", value])
    out, err = capsys.readouterr()
    # before: "Evicted 2 entries; ... limit 0 B (0 bytes)" for 0.4 and 0.0001k
    assert code == 2 and out == "" and err.startswith("xlakit: error: --max-bytes: "), err
    assert len(folder.entries()) == 2


def test_a_limit_in_exbibytes_is_accepted_and_shown_in_exbibytes(folder, capsys):
    code = main(["cache", "prune", "--path", str(folder.root), "--max-bytes", "7EiB"])
    out, _ = capsys.readouterr()
    assert code == 0 and f"limit 7.0 EiB ({7 * 2**60} bytes)" in out, out
    assert len(folder.entries()) == 2
    code = main(["cache", "prune", "--path", str(folder.root), "--max-bytes", "9EiB"])
    _, err = capsys.readouterr()
    assert code == 2 and "2**63-1" in err and "7EiB" in err, err


def test_numpy_integers_are_counts_and_bytes_and_numpy_bools_are_flags():
    assert check_int(np.int64(7), "n") == 7 and type(check_int(np.uint8(7), "n")) is int
    assert check_max_bytes(np.int64(4096)) == 4096 and type(check_max_bytes(np.int32(1))) is int
    assert check_seconds(np.float32(0.5), "t") == 0.5 and check_seconds(np.int64(3), "t") == 3.0
    assert is_int(np.int16(1)) and not is_int(True) and not is_int(np.bool_(True)) and not is_int(1.0)
    for bad in (True, np.bool_(False), 2.0, "3"):
        with pytest.raises(TypeError, match="^n must be an int"):
            check_int(bad, "n")
    with pytest.raises(TypeError, match="max_bytes must be an int number of bytes"):
        check_max_bytes(np.bool_(True))
    with pytest.raises(ValueError, match="more than the largest cap"):
        check_max_bytes(np.uint64(MAX_BYTES + 1))
    assert check_flag(np.bool_(True), "probe") is True  # NumPy 2 names its type "bool"
