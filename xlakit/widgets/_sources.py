"""Old home of :func:`collect_programs`; it lives in :mod:`xlakit.view.programs` now. Kept for existing imports."""

from __future__ import annotations

from xlakit.view.programs import AOT_SUFFIX, Programs, cache_store, collect_programs

__all__ = ["Programs", "collect_programs", "cache_store", "AOT_SUFFIX"]
