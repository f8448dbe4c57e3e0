"""Dispatch helpers of rmqctl.repair.vecdispatch compiled by numba (used when the numba kernel is selected):
the same results as the numpy versions, proven equal in tests/test_kernel_numba.py and tests/test_rebuild_vec.py."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _hash_ranges(buf, starts, lens, h, ascii_ok):
    for i in range(len(starts)):
        a = starts[i]
        v = np.uint64(0)
        hi = 0
        for j in range(a, a + lens[i]):
            c = buf[j]
            v = (v * np.uint64(31) + np.uint64(c)) & np.uint64(0xFFFFFFFF)
            if c > hi:
                hi = c
        h[i] = v
        ascii_ok[i] = hi < 128


def hash_ranges(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray):
    """Java String.hashCode (mod 2^32, as uint64) of each byte range, and whether it is ASCII
    (rmqctl.repair.vecdispatch.hash_ranges)."""
    n = len(starts)
    h = np.zeros(n, np.uint64)
    ascii_ok = np.ones(n, bool)
    if n:
        _hash_ranges(buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(lens, np.int64), h, ascii_ok)
    return h, ascii_ok


@njit(cache=True, nogil=True)
def _any_in_ranges(b, rel, lens, pat):
    m = len(pat)
    for i in range(len(rel)):
        j, last = rel[i], rel[i] + lens[i] - m
        while j <= last:
            k = 0
            while k < m and b[j + k] == pat[k]:
                k += 1
            if k == m:
                return True
            j += 1
    return False


def any_in_ranges(b: np.ndarray, rel: np.ndarray, lens: np.ndarray, pattern: bytes) -> bool:
    """Whether `pattern` occurs inside any of the byte ranges b[rel[i]:rel[i] + lens[i]]."""
    if not len(rel) or not pattern:
        return bool(len(rel)) and not pattern
    return bool(_any_in_ranges(b, np.ascontiguousarray(rel, np.int64), np.ascontiguousarray(lens, np.int64),
                               np.frombuffer(pattern, np.uint8).copy()))

