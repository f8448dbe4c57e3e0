"""Consumer offsets (consumerOffset.json): show with lag, set, reset, clone.

``offsetTable`` maps ``"<topic>@<group>"`` to ``{queueId: next offset to consume}``; queue ids are
unquoted integers in broker-written files, quoted strings in some other writers (fastjson converts
both), values may be numeric strings. ``groupTopicMap`` (5.x) is derived from a getter and ignored on
load; when present it is regenerated so the file still reads like the broker's.

Offline reset works like ``mqadmin resetOffsetByTime`` with ``-f true`` (the broker's
``AdminBrokerProcessor.resetOffset``): every queue of the topic gets the consume-queue offset found by
the broker's search by store time; a time after the last message gives the queue's max offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from rmqctl.config.files import as_int, looks_v5, next_version
from rmqctl.errors import UsageError
from rmqctl.fastjson import InlineList

SEP = "@"


@dataclass
class Row:
    topic: str
    group: str
    queue: int
    offset: int
    min: int | None = None
    max: int | None = None

    @property
    def lag(self) -> int | None:
        return None if self.max is None else max(0, self.max - self.offset)

    def as_dict(self) -> dict:
        return {"group": self.group, "topic": self.topic, "queue": self.queue, "offset": self.offset,
                "min": self.min, "max": self.max, "lag": self.lag}


def table(doc: dict) -> dict:
    t = doc.get("offsetTable")
    if t is None:
        t = doc["offsetTable"] = {}
    if not isinstance(t, dict):
        raise UsageError("offsetTable is not an object")
    return t


def split_key(key: str) -> tuple[str, str]:
    topic, _, group = str(key).partition(SEP)
    return topic, group


def rows(doc: dict, *, group: str | None = None, topic: str | None = None) -> list[Row]:
    out = []
    for key, queues in table(doc).items():
        t, g = split_key(key)
        if (group and g != group) or (topic and t != topic) or not isinstance(queues, dict):
            continue
        for q, off in queues.items():
            try:
                out.append(Row(t, g, as_int(q, "queue id"), as_int(off, f"offset of {key} queue {q}")))
            except Exception:  # noqa: BLE001 - a non-numeric entry: the broker would fail to decode it
                continue
    out.sort(key=lambda r: (r.group, r.topic, r.queue))
    return out


def add_lag(rs: list[Row], store) -> None:
    """Fill min/max from the local consume queues (None when the queue has no CQ here)."""
    if store is None:
        return
    have = set(_queues(store))
    cache: dict = {}
    for r in rs:
        k = (r.topic, r.queue)
        if k not in have:
            continue
        if k not in cache:
            cq = store.consume_queue(*k)
            cache[k] = (cq.min_offset(), cq.max_offset())
        r.min, r.max = cache[k]


def _queues(store) -> list:
    """Queues with files here: consume queues and batch consume queues (5.x BatchCQ topics)."""
    return store.queues() + store.queues("batchconsumequeue")


def out_of_range(store, topic: str, qid: int, offset: int) -> str | None:
    """Why `offset` lies outside the queue's [min, max] in this store's consume queue (None when inside,
    or when the queue has no consume queue here to judge by)."""
    if store is None or (topic, qid) not in set(_queues(store)):
        return None
    cq = store.consume_queue(topic, qid)
    lo, hi = cq.min_offset(), cq.max_offset()
    if lo <= offset <= hi:
        return None
    side = "above the max" if offset > hi else "below the min"
    return (f"offset {offset} is {side} of {topic} queue {qid} [{lo}, {hi}] in this store: the broker answers "
            f"the group's next pull with an illegal-offset status and moves it")


def _qkey(queues: dict, qid: int):
    """The key form this entry already uses for a queue (int normally, str for quoted-key writers)."""
    if qid in queues:
        return qid
    if str(qid) in queues:
        return str(qid)
    if queues and all(isinstance(k, str) for k in queues):
        return str(qid)
    return qid


def set_offset(doc: dict, topic: str, group: str, qid: int, offset: int) -> int | None:
    if offset < 0:
        raise UsageError(f"offset must be >= 0, got {offset}")
    t = table(doc)
    key = f"{topic}{SEP}{group}"
    queues = t.get(key)
    if not isinstance(queues, dict):
        queues = t[key] = {}
    k = _qkey(queues, qid)
    old = queues.get(k)
    queues[k] = offset
    return None if old is None else as_int(old)


def topic_queue_ids(topic: str, group: str, doc: dict, store=None, topics_doc: dict | None = None) -> list[int]:
    """Queues to reset: those with a consume queue here, those already in the table, and those the
    topic declares in topics.json (readQueueNums)."""
    ids = set()
    if store is not None:
        ids.update(q for t, q in _queues(store) if t == topic)
    entry = table(doc).get(f"{topic}{SEP}{group}")
    if isinstance(entry, dict):
        for q in entry:
            try:
                ids.add(as_int(q))
            except Exception:  # noqa: BLE001
                pass
    if topics_doc:
        tc = (topics_doc.get("topicConfigTable") or {}).get(topic)
        if isinstance(tc, dict):
            try:
                ids.update(range(as_int(tc.get("readQueueNums", 0))))
            except Exception:  # noqa: BLE001
                pass
    return sorted(ids)


def reset(doc: dict, topic: str, group: str, mode: str, store, *, timestamp: int | None = None,
          topics_doc: dict | None = None, broker_version: int = 5) -> list[tuple[int, int | None, int]]:
    """Set every queue of topic@group to the earliest / latest / by-time offset. Returns
    [(queue, old, new)]. broker_version picks the by-time rule of that broker line (5: first message
    stored at/after the time; 4: the nearest one, as 4.9's getOffsetInQueueByTime)."""
    if store is None:
        raise UsageError("offsets reset needs the store's consume queues; give the store directory")
    qids = topic_queue_ids(topic, group, doc, store, topics_doc)
    if not qids:
        raise UsageError(f"topic {topic!r} has no queues in this store or in topics.json")
    have = set(_queues(store))
    out = []
    for q in qids:
        if (topic, q) in have:
            cq = store.consume_queue(topic, q)
            if mode == "earliest":
                new = cq.min_offset()
            elif mode == "latest":
                new = cq.max_offset()
            else:
                new = cq.offset_by_time(timestamp, version=broker_version)
        else:
            new = 0
        old = set_offset(doc, topic, group, q, new)
        out.append((q, old, new))
    return out


def clone(doc: dict, src: str, dst: str, *, topic: str | None = None) -> list[tuple[str, int, int | None, int]]:
    """Copy every offset of group ``src`` to group ``dst`` (like mqadmin cloneGroupOffset)."""
    out = []
    for r in rows(doc, group=src, topic=topic):
        old = set_offset(doc, r.topic, dst, r.queue, r.offset)
        out.append((r.topic, r.queue, old, r.offset))
    if not out:
        raise UsageError(f"group {src!r} has no offsets" + (f" on topic {topic!r}" if topic else ""))
    return out


def finish(doc: dict) -> None:
    """After an edit: regenerate the derived groupTopicMap (5.x) and bump dataVersion."""
    gtm = doc.get("groupTopicMap")
    if isinstance(gtm, dict) or looks_v5(doc):
        new: dict = {}
        for key in table(doc):
            t, g = split_key(key)
            new.setdefault(g, [])
            if t not in new[g]:
                new[g].append(t)
        ordered = {}
        for g in (gtm or {}):
            if g in new:
                old = gtm[g] if isinstance(gtm[g], list) else []
                ordered[g] = InlineList([t for t in old if t in new[g]] + [t for t in new[g] if t not in old])
        for g, ts in new.items():
            if g not in ordered:
                ordered[g] = InlineList(ts)
        if gtm is not None or ordered:
            # keep the key where it was; a 5.x file without one gets it before offsetTable (sorted getters)
            if gtm is None:
                items = list(doc.items())
                doc.clear()
                for k, v in items:
                    if k == "offsetTable":
                        doc["groupTopicMap"] = ordered
                    doc[k] = v
                if "groupTopicMap" not in doc:
                    doc["groupTopicMap"] = ordered
            else:
                doc["groupTopicMap"] = ordered
    next_version(doc)
