"""Old home of :func:`collect_programs`; it lives in :mod:`xlakit.view.programs` now. Kept for existing imports."""

from __future__ import annotations

from xlakit.view.programs import Programs, cache_folder, collect_programs

__all__ = ["Programs", "collect_programs", "cache_folder"]
