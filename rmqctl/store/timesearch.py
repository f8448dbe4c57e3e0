"""The broker's search of a consume queue by store time (ConsumeQueue.getOffsetInQueueByTime,
BoundaryType.LOWER): the first logical offset whose message was stored at or after `timestamp`."""
from __future__ import annotations

from rmqctl.store.commitlog import CommitLog


def offset_in_queue_by_time(cq, timestamp: int) -> int:
    lo, hi = cq.min_offset(), cq.max_offset()
    if hi <= lo:
        return lo
    cl = CommitLog(cq.store)

    def ts(i):
        u = cq.unit(i)
        return cl.store_timestamp(u[0], u[1]) if u else -1

    if ts(hi - 1) < timestamp:
        return hi
    # binary search for the first offset with store time >= timestamp
    a, b = lo, hi - 1
    while a < b:
        mid = (a + b) // 2
        if ts(mid) < timestamp:
            a = mid + 1
        else:
            b = mid
    return a
