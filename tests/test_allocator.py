"""rmqctl.allocator: the whole-store passes serve window-sized arrays from the heap (glibc), so a process that has
not walked yet (the parent of -j N, a fresh worker) does not fault in fresh pages for each of them."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# twenty 1 MiB buffers held at once: how many MiB the heap grew by for them (mmap'd buffers leave it as it was)
PROBE = """
import sys
def heap():
    with open('/proc/self/maps') as f:
        for line in f:
            if line.rstrip().endswith('[heap]'):
                lo, hi = line.split()[0].split('-')
                return int(hi, 16) - int(lo, 16)
    return 0
if sys.argv[1] == 'tuned':
    from rmqctl.allocator import for_long_passes
    assert for_long_passes()
before = heap()
held = [bytearray(1 << 20) for _ in range(20)]
print((heap() - before) >> 20)
"""


def _heap_growth_mib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's (elsewhere for_long_passes changes nothing)")
def test_window_sized_buffers_come_from_the_heap():
    assert _heap_growth_mib("plain") < 5       # glibc's default: a mapping of their own each
    assert _heap_growth_mib("tuned") >= 20


def test_for_long_passes_is_idempotent_and_says_whether_it_applied():
    from rmqctl.allocator import for_long_passes

    assert for_long_passes() is GLIBC
    assert for_long_passes() is GLIBC
