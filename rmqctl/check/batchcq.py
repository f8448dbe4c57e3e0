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


def check_queue_types(store, findings: list) -> None:
    """ConsumeQueueStore.load (5.x) refuses to start when a queue directory's kind disagrees with the topic's
    queue.type in topics.json: batchconsumequeue/<topic> for a topic that is not BatchCQ (absent topics
    included), consumequeue/<topic> for a BatchCQ topic."""
    types = B.queue_types(store.root)
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
