"""verify's index-file item checks (rmqctl.check.index) compiled by numba: one pass over a batch of items
instead of a dozen numpy passes and a gather per check. They answer with item positions only; the findings
are built in Python, as on the numpy path. Used when the numba kernel is in use; proven equal to the numpy
path in tests/test_index_kernel.py."""
from __future__ import annotations

import numpy as np
from numba import njit

CYCLE, BUCKET, TIME, PHY = 1, 2, 4, 8       # the checks still to report (each reports its first offender)
ITEM = 20                                   # keyHash i32, phyOffset i64, timeDiff i32, prevIndex i32 (big-endian)


# the big-endian readers are walk_nb's, repeated: numba stamps each file's compile cache by that file alone, so a
# kernel file holds every function it compiles (a helper imported from another file could change under a cache)
@njit(cache=True, nogil=True, inline="always")
def _i32(b, p):
    v = (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _i64(b, p):
    lo = (np.int64(b[p + 4]) << 24) | (np.int64(b[p + 5]) << 16) | (np.int64(b[p + 6]) << 8) | np.int64(b[p + 7])
    return (_i32(b, p) << 32) | lo


@njit(cache=True, nogil=True)
def items(b, k, n, slots, slot_of, limit, last_phy, has_last, todo, out, bits):
    """Items n .. n+k-1 (their bytes in b): each item's slot (keyHash mod `slots`, Python's sign rule) into
    slot_of, and the first item of the batch failing each check in `todo`: out[0] a prevIndex that is not older
    than the item, out[1] a prevIndex into another bucket, out[2] a timeDiff outside [0, limit] (items 2 on),
    out[3] a phyOffset below the one before (out[4]: that one). out[5]: the batch's last phyOffset. -1: none.
    bits > 0: the bucket check reads slot_of by blocks of 2^bits items (_first_stray) instead of at random."""
    for c in range(4):
        out[c] = -1
    prev = last_phy if has_last else _i64(b, 4)
    by_blocks = bits > 0 and todo & BUCKET
    m = 0
    pi = np.empty(k if by_blocks else 0, np.int32)
    pp = np.empty(k if by_blocks else 0, np.int32)
    ps = np.empty(k if by_blocks else 0, np.int32)
    for i in range(k):
        p = i * ITEM
        num = n + i
        s = _i32(b, p) % slots
        slot_of[num] = s
        pre = _i32(b, p + 16)
        if pre < 0 or pre >= num:
            if todo & CYCLE and out[0] < 0:
                out[0] = i
        elif pre > 0 and todo & BUCKET and out[1] < 0:
            if by_blocks:
                pi[m], pp[m], ps[m] = i, pre, s
                m += 1
            elif slot_of[pre] != s:
                out[1] = i
        if num >= 2 and todo & TIME and out[2] < 0:
            td = _i32(b, p + 12)
            if td < 0 or td > limit:
                out[2] = i
        phy = _i64(b, p + 4)
        if todo & PHY and out[3] < 0 and phy < prev:
            out[3] = i
            out[4] = prev
        prev = phy
    out[5] = prev
    if m:
        out[1] = _first_stray(slot_of, pi[:m], pp[:m], ps[:m], bits, n + k)[0]


@njit(cache=True, nogil=True)
def _first_stray(slot_of, pi, pp, ps, bits, end):
    """The least pi[j] with slot_of[pp[j]] != ps[j] (-1: none), reading slot_of (items 0 .. end-1) one block of
    2^bits items at a time: the pairs are placed by block, and a block with many is read through once in address
    order first (the hardware fetches ahead on that read; the random reads then hit the cache)."""
    m = len(pi)
    nbk = ((end - 1) >> bits) + 1
    start = np.zeros(nbk + 1, np.int64)
    for j in range(m):
        start[(pp[j] >> bits) + 1] += 1
    for c in range(nbk):
        start[c + 1] += start[c]
    pos = start[:nbk].copy()
    oi = np.empty(m, np.int32)
    op = np.empty(m, np.int32)
    os_ = np.empty(m, np.int32)
    for j in range(m):
        c = pp[j] >> bits
        q = pos[c]
        oi[q], op[q], os_[q] = pi[j], pp[j], ps[j]
        pos[c] = q + 1
    first = -1
    touched = 0
    dense = (1 << bits) >> 7      # a cache line holds 16 slot numbers
    for c in range(nbk):
        if start[c + 1] - start[c] >= dense:
            for q in range(c << bits, min(end, (c + 1) << bits), 16):
                touched += slot_of[q]
        for j in range(start[c], start[c + 1]):
            if slot_of[op[j]] != os_[j] and (first < 0 or oi[j] < first):
                first = oi[j]
    return first, touched         # the sum read keeps the read-through from being compiled away


@njit(cache=True, nogil=True)
def slot_heads(b, count, slot_of):
    """(how many slots, the first slot) whose head item (big-endian int32s in b, one per slot; 1 .. count-1)
    hashes to another slot."""
    wrong, first = 0, -1
    for s in range(len(b) // 4):
        v = _i32(b, 4 * s)
        if 0 < v < count and slot_of[v] != s:
            if first < 0:
                first = s
            wrong += 1
    return wrong, first


def warm() -> None:
    """Load both kernels (from the compile cache) with the argument types verify passes: before verify's
    workers fork, so that they inherit them."""
    b, out = np.frombuffer(bytes(ITEM), np.uint8), np.zeros(6, np.int64)    # read-only, as pread's bytes
    slot_of = np.zeros(2, np.int32)
    items(b, 1, 1, 1, slot_of, 0, 0, False, 0, out, 0)
    slot_heads(b[:4], 2, slot_of)
