"""runtime/ray/allocator.py: after keep_freed_memory a large tensor comes from the heap, not
from a fresh mmap, and stays in the process when freed; SYNCSWITCH_MALLOC=system opts out.
Each case runs in a subprocess, so this test process keeps glibc's defaults."""

import os
import subprocess
import sys

import pytest

from syncswitch.runtime.ray.allocator import OPT_OUT_ENV, OPT_OUT_VALUE

PROBE = """
import ctypes, sys, torch
from syncswitch.runtime.ray.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
kept = keep_freed_memory()
big = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB: mmapped by glibc's default
mapped = libc.mallinfo2().hblkhd
del big
after_free = libc.mallinfo2().arena
print(kept, mapped >= 64 << 20, after_free >= 64 << 20)
"""


def probe(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_large_tensors_come_from_the_heap_and_stay_after_keep_freed_memory() -> None:
    env = {k: v for k, v in os.environ.items() if k != OPT_OUT_ENV}
    try:
        kept, mmapped, kept_after_free = probe(env)
    except AssertionError as error:
        if "mallinfo2" in str(error):
            pytest.skip("not glibc 2.33 or later")
        raise
    assert (kept, mmapped, kept_after_free) == ("True", "False", "True")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_opt_out_leaves_glibcs_defaults() -> None:
    try:
        kept, mmapped, _ = probe({**os.environ, OPT_OUT_ENV: OPT_OUT_VALUE})
    except AssertionError as error:
        if "mallinfo2" in str(error):
            pytest.skip("not glibc 2.33 or later")
        raise
    assert (kept, mmapped) == ("False", "True")
