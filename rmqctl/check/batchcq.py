"""verify: batch consume queues (batchconsumequeue/, 5.x BatchCQ topics), see rmqctl.store.batchcq."""
from __future__ import annotations

from rmqctl.check.consumequeue import check_queue_files
from rmqctl.check.findings import ERROR, Finding
from rmqctl.store import batchcq as B


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
    for f in bq.files:
        for u in bq.file_units(f):
            at = u.pos - f.start
            if commitlog_scanned and u.phys >= cl_end:
                findings.append(Finding(ERROR, "bcq.ahead", str(f.path), at, f"< {cl_end}", u.phys,
                                        "batch CQ unit points past the commitlog end"))
                return
            if next_base is not None and u.base != next_base:
                findings.append(Finding(ERROR, "bcq.base_offset", str(f.path), at, next_base, u.base,
                                        "msgBaseOffset does not continue the previous unit's range"))
                return
            next_base = u.end_offset
        if len(bq.file_units(f)) * B.UNIT_SIZE < bq.file_size and f is not bq.files[-1]:
            break      # the broker's reading of this queue ends here
    if track is not None and commitlog_scanned:
        have = bq.max_offset()
        if have < track.next_q:
            findings.append(Finding(ERROR, "cq.behind", str(bq.directory), None,
                                    f"queue offsets up to {track.next_q}", f"max offset {have}",
                                    f"messages of {topic}:{qid} in the commitlog are not in this batch consume queue "
                                    "(undispatched tail): the broker re-dispatches them only in abnormal recovery"))
