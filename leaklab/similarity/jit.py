"""numba's `njit` where numba is installed; elsewhere the same Python function, slower but equal."""

from __future__ import annotations

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a dependency; this keeps a broken install usable
    njit = None

COMPILED = njit is not None


def jit(function):
    """Compile `function` (cached on disk, so a new process loads it instead of compiling again)."""
    return function if njit is None else njit(cache=True, nogil=True)(function)
