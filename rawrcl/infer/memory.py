"""Host memory of full-size inference: let glibc keep freed large blocks for reuse.

A tiled forward pass allocates and frees activations of 10–200 MB per layer. glibc's malloc serves every
block above its mmap threshold (≤ 32 MB by default) with a fresh ``mmap`` and returns it with ``munmap``,
so each layer's output is page-faulted in and zeroed by the kernel again. On a 12 MP ``rawrcl jdd`` (fp32,
2 threads, 512-pixel tiles in fours) that was 8–10 s of system time and ≈ 4 s of wall time (18.6 → 14.5 s;
peak memory 1.70 → 2.04 GB; ``docs/weights.md``, "Speed"). :func:`keep_freed_memory` raises the mmap
threshold to 1 GiB and the trim threshold to 2 GiB, so freed blocks stay in the heap and are reused by the
next tile.

Process-wide and one-way (glibc offers no undo short of resetting the values), so it is applied only by
the inference entry points (:func:`rawrcl.infer.tiling.tiled_apply` on the CPU, and the file commands of
:mod:`rawrcl.infer.files` before they read a RAW file: its decoding and the noise estimate's full-size
temporaries are reused too, 0.2 s at 12 MP), once per process; set
``RAWRCL_MALLOC=default`` to leave glibc's settings alone (e.g. a long-running host application that
embeds rawrcl). A no-op on other C libraries and platforms.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters, <malloc.h>
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  #: blocks below 1 GiB come from the heap (bytes)
#: free memory kept at the top of the heap, ≈ 2 GiB (bytes; mallopt takes an int)
TRIM_THRESHOLD = (1 << 31) - 1

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`, :data:`TRIM_THRESHOLD`) once per
    process. Returns True when they are in effect; False on non-glibc platforms, when ``mallopt`` refused,
    or with ``RAWRCL_MALLOC=default``."""
    global _applied
    if _applied is None:
        _applied = False
        if sys.platform.startswith("linux") and os.environ.get("RAWRCL_MALLOC", "") != "default":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # musl and others have no mallopt
                return False
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            )
    return _applied
