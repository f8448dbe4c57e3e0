"""`config delay show`: per delay level, delayOffset.json beside the SCHEDULE_TOPIC_XXXX queue it drives.

ScheduleMessageService (5.3.3 broker/schedule) delivers level L from queue L-1 of SCHEDULE_TOPIC_XXXX,
starting at offsetTable[L], or 0 when the level is absent from the table (start(): `if (null == offset)
offset = 0L`); the delivery task resets an offset below the queue's min to the min and one beyond its
max to the max. The units from there to the queue's max are the messages still to deliver; each unit's
tagsCode is the message's due time (computeDeliverTimestamp: store time + the level's delay).
"""
from __future__ import annotations

from rmqctl.config.delay import SCHEDULE_TOPIC, table
from rmqctl.config.files import as_int
from rmqctl.errors import RmqError


def _levels_in_table(doc: dict) -> dict:
    out = {}
    for k, v in table(doc).items():
        try:
            level, off = as_int(k, "delay level"), as_int(v, "delay offset")
        except (RmqError, ValueError, TypeError):   # a non-numeric entry: verify reports it (config.delay_offset)
            level = None
        if level is not None:
            out[level] = off
    return out


def _delay_text(ms: int | None) -> str | None:
    if ms is None:
        return None
    for unit, size in (("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def level_rows(doc: dict | None, store, delay_levels) -> list[dict]:
    """One row per delay level (1..len(delay_levels)), plus levels the table or the queues name beyond."""
    offsets = _levels_in_table(doc) if doc is not None else {}
    queues = {q for t, q in store.queues() if t == SCHEDULE_TOPIC} if store is not None else set()
    levels = set(range(1, len(delay_levels) + 1)) | set(offsets) | {q + 1 for q in queues}
    rows = []
    for level in sorted(lv for lv in levels if lv >= 1):
        delay_ms = delay_levels[level - 1] if level <= len(delay_levels) else None
        r = {"level": level, "delay": _delay_text(delay_ms), "delay_ms": delay_ms, "queue": level - 1,
             "offset": offsets.get(level), "min": None, "max": None, "start": None, "pending": 0,
             "earliest_due_ms": None, "latest_due_ms": None}
        if level - 1 in queues:
            cq = store.consume_queue(SCHEDULE_TOPIC, level - 1)
            lo, hi = cq.min_offset(), cq.max_offset()
            start = min(max(offsets.get(level, 0), lo), hi)
            r.update({"min": lo, "max": hi, "start": start, "pending": hi - start})
            due = [tags for _, phys, size, tags in cq.units(start, hi) if size > 0]
            if due:
                r["earliest_due_ms"], r["latest_due_ms"] = min(due), max(due)
        rows.append(r)
    return rows
