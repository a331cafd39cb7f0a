"""Keep freed memory in the process: glibc's malloc, told once, in each actor we start.

By default glibc serves every allocation over 32 MiB (and, after its threshold adapts, most
over 128 KiB) with a fresh mmap and hands it back to the kernel when freed. PyTorch's CPU
allocator asks malloc for every tensor, so a model of millions of parameters pays for fresh
pages again on every step: autograd's weight gradients before they are added into `.grad`,
a barrier's sum, an optimizer's temporaries. Each first touch of a page is a page fault.
Measured on the 16.9M-parameter MLP of benchmarks/wide_models.py (one thread, batch 32,
2-core machine): forward, backward and a flat gradient copy took a median 206-235 ms per
step with the default and 89-107 ms with freed memory kept (resident memory 496 MB against
718 MB, flat over 40 steps); a BSP round's server work fell about threefold. jemalloc and
tcmalloc, which PyTorch's CPU tuning guide recommends, do the same by design; this needs no
preloaded library.

`keep_freed_memory` turns glibc's mmap of large chunks off (M_MMAP_MAX 0) and raises the
threshold above which freed heap memory is returned (M_TRIM_THRESHOLD), so a process keeps its
peak steady-state footprint instead of faulting it in again each step. It changes allocation
only, never a value: the same bits come out. Our actor processes call it when they start
(workers, parameter servers, the evaluator); the driver and the simulator, which run in the
user's own process, are left as they are. Elsewhere than glibc (musl, macOS) it does nothing,
and `SYNCSWITCH_MALLOC=system` in the actors' environment leaves glibc's defaults in place
(for a machine short of memory, or to measure the difference).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
OPT_OUT_ENV = "SYNCSWITCH_MALLOC"
OPT_OUT_VALUE = "system"
# Freed memory beyond this at the top of the heap is returned: above any step's temporaries.
TRIM_THRESHOLD_BYTES = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Tell this process's glibc malloc to keep freed memory; True when it took effect.
    Idempotent: a second call (an actor restarted in the same process) changes nothing."""
    if os.environ.get(OPT_OUT_ENV, "").strip().lower() == OPT_OUT_VALUE:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
