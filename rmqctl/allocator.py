"""The C allocator's settings for the whole-store passes (verify, rebuild, recover).

glibc serves an allocation of more than 128 KiB by mmap, and gives it back at free, so each of the walk's
window-sized arrays lands on fresh pages, faulted in and zeroed one at a time, until its own dynamic threshold has
risen. One long-lived process gets there after its first windows; a process that never walked (the parent of
`-j N`, which merges and checks the queues after the walk) or a fresh worker pays the faults for most of its
arrays. Measured on 6.4 GB, 32 queues, 2 cores: the parent's queue checks after `verify -j 2` 0.09-0.11 s against
0.04 s with these settings (as in `-j 1`), `recover -j 2` 2.01 -> 1.69 s, `-j 1` 2.37-2.59 -> 2.22-2.31 s; peak RSS
the same. Anything but glibc on Linux is left as it is.
"""
from __future__ import annotations

import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20     # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD = 128 << 20
_done = [False]


def for_long_passes() -> bool:
    """Serve arrays under 32 MiB from the heap and keep up to 128 MiB of freed heap (inherited by forked workers).
    True when set."""
    if _done[0] or not sys.platform.startswith("linux"):
        return _done[0]
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        glibc = hasattr(libc, "gnu_get_libc_version")    # its mallopt takes these parameter numbers
    except (OSError, AttributeError):
        return False
    if not glibc:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done[0] = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done[0]
