"""query --offset on a 5.x compaction topic (cleanup.policy=COMPACTION): what a consumer pulling the queue is
served. The broker answers such pulls from the compaction store, not the consume queue
(DefaultMessageStore.getMessage -> CompactionLog.getMessage): the sparse compaction CQ gives the first unit at or
after the requested offset (getBatchMsgIndexOrNextBuffer, BoundaryType.LOWER) and the message comes from the
compaction log, so an offset whose key was compacted away is answered by the next one kept. When the broker would
not load the queue from the compaction store, the consume queue answers and a note says why."""
from __future__ import annotations

import os
import zlib

from rmqctl.scan import FileWalk
from rmqctl.store import compaction as C
from rmqctl.store.files import open_read


def served_queue(store, topic: str, qid: int):
    """(queue, sizes, verdict) of the compaction queue the broker serves (topic, qid) from, or None when the
    topic is not a compaction topic or has no compaction queue."""
    from rmqctl.config.topics import compaction_topics

    if topic not in (compaction_topics(store.root) or ()):
        return None
    q = next((x for x in C.queues(store.root) if (x.topic, x.queue_id) == (topic, qid)), None)
    if q is None:
        return None
    sz = C.sizes(store.root, store.config)
    return q, sz, C.verdict(q, sz)


def _units(q, sz, v):
    for f in q.cq_files:
        if f.size <= 0:
            continue
        n = v.cq_ends.get(f.start, 0) // C.UNIT_SIZE
        yield from q.read_cq(f, sz.cq)[:n]


def _read(eng, q, sz, pos: int, size: int):
    f = next((x for x in q.log_files if x.start <= pos < x.start + sz.log), None)
    if f is None:
        return None, f"no compaction log file holds position {pos}"
    fd = open_read(f.path, eng.store.root)
    try:
        rel = pos - f.start
        eng.stats.commitlog_reads += 1
        w = FileWalk(fd, f.start, f.size, rel, min(f.size, rel + max(size, 8)), check_crc=False, check_phys=False,
                     check_prop_crc=False, path=str(f.path), window=max(size, 8))
        for r in w:
            if r.offset != pos:
                break
            r.crc_ok = (zlib.crc32(r.body) & 0x7FFFFFFF) == r.body_crc
            return r, None
        return None, f"no message starts at compaction log position {pos}"
    finally:
        os.close(fd)


def by_queue_offset(eng, served, topic: str, qid: int, offset: int, count: int = 1):
    q, sz, v = served
    eng.note(f"{topic}/{qid} is a compaction topic: consumers are served from the compaction log (the first kept "
             "offset at or after the one asked; compacted offsets are skipped; positions are in the compaction log)")
    n = 0
    for u in _units(q, sz, v):
        if u[4] + u[5] <= offset:
            continue
        eng.stats.cq_unit_reads += 1
        r, bad = _read(eng, q, sz, u[0], u[1])
        if r is None:
            eng.problem(f"compaction CQ {topic}/{qid} offset {u[4]} points at log position {u[0]} size {u[1]}: {bad}")
        else:
            if n == 0 and r.queue_offset != offset:
                eng.note(f"{topic}/{qid} offset {offset} was compacted away: the broker serves {r.queue_offset}")
            yield r
        n += 1
        if n >= count:
            return
