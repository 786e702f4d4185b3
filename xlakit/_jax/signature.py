"""Readable parts of a StableHLO module: its text without debug locations and its entry signature.

The entry function ``@main`` carries, per argument, the tensor type (shape and dtype) and attributes that
record sharding (``mhlo.sharding`` / ``sdy.sharding``) and donation (``tf.aliasing_output`` /
``jax.buffer_donor``). Explanations compare these per argument to say *which* kind of part changed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["module_text", "main_signature", "Argument"]

_TENSOR = re.compile(r"tensor<(?P<body>[^>]*)>")


def module_text(module: Any) -> str | None:
    """The module's MLIR text without debug locations (``Operation.get_asm(enable_debug_info=False)``)."""
    try:
        return module.operation.get_asm(enable_debug_info=False)
    except Exception:  # noqa: BLE001 - a module we cannot print is simply not explained in detail
        return None


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "<{([":
            depth += 1
        elif not quoted and ch in ">})]":
            depth -= 1
        elif not quoted and depth == 0 and ch == sep:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return parts + [tail] if tail else parts


def _balanced(text: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at``."""
    depth, quoted = 0, False
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def Argument(text: str) -> dict[str, str | None]:  # noqa: N802 - a record constructor, named like one
    """``%arg0: tensor<8x4xf32> {jax.buffer_donor = true}`` -> shape, dtype, sharding, donation, raw."""
    _, _, rest = text.partition(":")
    match = _TENSOR.search(rest)
    shape, dtype = None, None
    if match:
        dims = match.group("body").split(",")[0].split("x")
        dtype, shape = dims[-1], "x".join(dims[:-1]) or "scalar"
    attrs = rest[rest.find("{") + 1: rest.rfind("}")] if "{" in rest else ""
    sharding = donation = None
    for attr in _split_top_level(attrs):
        name, _, value = attr.partition("=")
        name = name.strip()
        if "sharding" in name:
            sharding = value.strip()
        elif name in ("tf.aliasing_output", "jax.buffer_donor"):
            donation = f"{name} = {value.strip()}"
    return {"shape": shape, "dtype": dtype, "sharding": sharding, "donation": donation, "raw": text.strip()}


def main_signature(text: str | None) -> list[dict[str, str | None]] | None:
    """Per-argument records of ``@main``'s signature, or None when the text has no ``@main``."""
    if not text:
        return None
    at = text.find("@main(")
    if at < 0:
        return None
    open_at = at + len("@main")
    close_at = _balanced(text, open_at)
    return [Argument(arg) for arg in _split_top_level(text[open_at + 1: close_at]) if arg]
