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
def items(b, k, n, slots, last, limit, last_phy, has_last, todo, out, cand):
    """Items n .. n+k-1 (their bytes in b): each becomes its slot's last item in `last` (the slot table as
    IndexFile.putKey leaves it after that item; keyHash mod `slots`, Python's sign rule), and the first item of
    the batch failing each check in `todo`: out[0] a prevIndex that is not older than the item, out[1] a
    prevIndex into another bucket, out[2] a timeDiff outside [0, limit] (items 2 on), out[3] a phyOffset below
    the one before (out[4]: that one). out[5]: the batch's last phyOffset. -1: none.
    The bucket check: a prevIndex that is its slot's last item before it (as putKey links them) is in the bucket,
    one inside the batch is looked up here; any other goes to the caller, who reads its slot from the file:
    (batch position, prevIndex, slot) in rows 0 .. out[6]-1 of cand."""
    for c in range(4):
        out[c] = -1
    prev = last_phy if has_last else _i64(b, 4)
    m = 0
    for i in range(k):
        p = i * ITEM
        num = n + i
        s = _i32(b, p) % slots
        pre = _i32(b, p + 16)
        if pre < 0 or pre >= num:
            if todo & CYCLE and out[0] < 0:
                out[0] = i
        elif pre > 0 and todo & BUCKET and out[1] < 0 and pre != last[s]:
            if pre >= n:
                if _i32(b, (pre - n) * ITEM) % slots != s:
                    out[1] = i
            else:
                cand[m, 0], cand[m, 1], cand[m, 2] = i, pre, s
                m += 1
        last[s] = num
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
    out[6] = m


@njit(cache=True, nogil=True)
def slot_heads(b, first, count, last, cand):
    """Slots first .. first + len(b)//4 - 1 (big-endian int32 item numbers in b): a head that is its slot's last
    item is in the slot; any other head in 1 .. count-1 goes to the caller, who reads its slot from the file:
    (slot, head) in rows 0 .. m-1 of cand. Returns m."""
    m = 0
    for j in range(len(b) // 4):
        v = _i32(b, 4 * j)
        if 0 < v < count and v != last[first + j]:
            cand[m, 0], cand[m, 1] = first + j, v
            m += 1
    return m


def warm() -> None:
    """Load both kernels (from the compile cache) with the argument types verify passes: before verify's
    workers fork, so that they inherit them."""
    b, out = np.frombuffer(bytes(ITEM), np.uint8), np.zeros(7, np.int64)    # read-only, as pread's bytes
    last, cand = np.zeros(2, np.int32), np.zeros((1, 3), np.int64)
    items(b, 1, 1, 1, last, 0, 0, False, 0, out, cand)
    slot_heads(b[:4], 0, 2, last, cand)
