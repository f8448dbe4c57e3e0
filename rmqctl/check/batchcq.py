"""verify: batch consume queues (batchconsumequeue/, 5.x BatchCQ topics), see rmqctl.store.batchcq."""
from __future__ import annotations

import os
import struct

from rmqctl.check.consumequeue import check_queue_files
from rmqctl.check.findings import ERROR, Finding
from rmqctl.config.topics import queue_types
from rmqctl.store import batchcq as B
from rmqctl.store.files import open_read

# a commitlog record's head up to PHYSICALOFFSET: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET,
# PHYSICALOFFSET (formats.commitlog)
_HEAD = struct.Struct(">iiiiiqq")


def check_batch_queue(store, topic: str, qid: int, track, cl_end: int, findings: list,
                      commitlog_scanned: bool = True) -> None:
    """File names/sizes (mapperFileSizeBatchConsumeQueue, names = unit index x 46), units that point past the
    commitlog end, msgBaseOffset ranges that do not continue each other, and a queue behind the commitlog
    (track: the commitlog pass's QueueTrack of this queue, whose next_q counts inner messages)."""
    bq = B.BatchQueue(store, topic, qid)
    check_queue_files(bq.fq, bq.file_size, findings, "bcq")
    if bq.file_size % B.UNIT_SIZE:
        findings.append(Finding(ERROR, "bcq.file_size", str(bq.directory), None, f"a multiple of {B.UNIT_SIZE}",
                                bq.file_size, "mapperFileSizeBatchConsumeQueue is not a whole number of 46-byte "
                                "units: the broker cannot append the unit that crosses a file's end"))
    next_base = None
    heads = _Heads(store)
    bad = 0
    try:
        for f in bq.files:
            for u in bq.file_units(f):
                at = u.pos - f.start
                if commitlog_scanned and u.phys >= cl_end:
                    findings.append(Finding(ERROR, "bcq.ahead", str(f.path), at, f"< {cl_end}", u.phys,
                                            "batch CQ unit points past the commitlog end"))
                    return
                if commitlog_scanned:
                    h = heads.at(u.phys)
                    if h is None or (h[0], h[3], h[5], h[6]) != (u.size, qid, u.base, u.phys):
                        bad += 1
                        if bad == 1:
                            got = "no record" if h is None else \
                                f"record size {h[0]}, queue {h[3]}, queue offset {h[5]}, physical offset {h[6]}"
                            first = (str(f.path), at, f"size {u.size}, queue {qid}, queue offset {u.base}", got)
                if next_base is not None and u.base != next_base:
                    findings.append(Finding(ERROR, "bcq.base_offset", str(f.path), at, next_base, u.base,
                                            "msgBaseOffset does not continue the previous unit's range"))
                    return
                next_base = u.end_offset
            if len(bq.file_units(f)) * B.UNIT_SIZE < bq.file_size and f is not bq.files[-1]:
                break      # the broker's reading of this queue ends here
    finally:
        heads.close()
        if bad:
            findings.append(Finding(ERROR, "bcq.unit_mismatch", first[0], first[1], first[2], first[3],
                                    f"{bad} batch CQ unit(s) of {topic}:{qid} do not point at their record: the "
                                    "broker serves another record (or none) for their offsets"))
    if track is not None and commitlog_scanned:
        have = bq.max_offset()
        if have < track.next_q:
            findings.append(Finding(ERROR, "cq.behind", str(bq.directory), None,
                                    f"queue offsets up to {track.next_q}", f"max offset {have}",
                                    f"messages of {topic}:{qid} in the commitlog are not in this batch consume queue "
                                    "(undispatched tail): the broker re-dispatches them only in abnormal recovery"))


def check_queue_types(store, findings: list) -> None:
    """ConsumeQueueStore.load (5.x) refuses to start when a queue directory's kind disagrees with the topic's
    queue.type in topics.json: batchconsumequeue/<topic> for a topic that is not BatchCQ (absent topics
    included), consumequeue/<topic> for a BatchCQ topic."""
    types = queue_types(store.root)
    if types is None:
        return
    why = "the broker refuses to start (5.x ConsumeQueueStore.load: the queue directory's kind must match " \
          "the topic's queue.type in config/topics.json)"
    for topic in sorted({t for t, _ in store.queues(B.DIR)}):
        if types.get(topic) != "BatchCQ":
            have = "topic absent" if topic not in types else f"queue.type {types[topic] or 'not set (SimpleCQ)'}"
            findings.append(Finding(ERROR, "bcq.queue_type", str(store.root / B.DIR / topic), None,
                                    "queue.type=BatchCQ", have, why))
    for topic in sorted({t for t, _ in store.queues()}):
        if types.get(topic) == "BatchCQ":
            findings.append(Finding(ERROR, "cq.queue_type", str(store.root / "consumequeue" / topic), None,
                                    "queue.type SimpleCQ (or none)", "queue.type=BatchCQ", why))


class _Heads:
    """Record heads read from the commitlog by offset (one small pread each, fds kept open)."""

    def __init__(self, store):
        self.store, self.fds = store, {}
        self.fs = store.config.commitlog_file_size

    def at(self, offset: int):
        f = self.store.commitlog.file_for(offset, self.fs)
        if f is None:
            return None
        fd = self.fds.get(f.path)
        if fd is None:
            fd = self.fds[f.path] = open_read(f.path, self.store.root)
        data = os.pread(fd, _HEAD.size, offset - f.start)
        return _HEAD.unpack(data) if len(data) == _HEAD.size else None

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
