"""query --offset / --time on a batch consume queue (5.x BatchCQ topic): the broker's unit lookup
(rmqctl.store.batchcq), then the inner message a 5.x client unwraps from the served record
(MessageDecoder.decodeMessage: queue offset = the record's QUEUEOFFSET + index, the inner flag, body and
properties, the record's hosts, times and sysflag). The inner encoding has no body CRC (written as 0): the
record's own BODYCRC covers the whole batch body, so body_crc_ok is the record's."""
from __future__ import annotations

import struct

from rmqctl.errors import UsageError
from rmqctl.formats import batch_consumequeue as bcqf
from rmqctl.formats._derive import struct_format
from rmqctl.formats.commitlog import NEED_UNWRAP_FLAG
from rmqctl.formats.properties import parse_properties
from rmqctl.store import batchcq as B

HEAD = struct.Struct(struct_format(bcqf.InnerMessageHead))


class InnerMessage:
    """An inner message with the attributes rmqctl.render reads from a commitlog Record."""

    def __init__(self, r, index: int, flag: int, body: bytes, props: dict):
        for k in ("offset", "total_size", "version", "topic", "queue_id", "sys_flag", "born_timestamp",
                  "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
                  "store_host_raw", "store_port", "physical_offset", "crc_ok", "prop_crc"):
            setattr(self, k, getattr(r, k))
        self.queue_offset = r.queue_offset + index
        self.flag, self.body, self.properties = flag, body, props
        self.body_crc, self.body_length = 0, len(body)
        self.record = r


def unwrap(r) -> list | None:
    """The inner messages of an inner-batch record (None when the body does not parse)."""
    body = r.body
    out, p = [], 0
    while p < len(body):
        if p + HEAD.size > len(body):
            return None
        size, _, _, flag, blen = HEAD.unpack_from(body, p)
        q = p + HEAD.size
        if size < HEAD.size + 2 or blen < 0 or q + blen + 2 > len(body):
            return None
        b = body[q:q + blen]
        plen = struct.unpack_from(">h", body, q + blen)[0]
        if plen < 0 or q + blen + 2 + plen > len(body):
            return None
        props = parse_properties(body[q + blen + 2:q + blen + 2 + plen])
        out.append(InnerMessage(r, len(out), flag, b, props))
        p += size
    return out


def _record(q, topic, qid, u, n):
    """The commitlog record a unit points at, checked (None when it cannot be read)."""
    q.stats.cq_unit_reads += 1
    r, bad = q.read_at(u.phys, u.size)
    if r is None:
        q.problem(f"batch consume queue {topic}/{qid} offset {n} points at commitlog offset {u.phys} size {u.size}: "
                  f"{bad}")
        return None
    if r.total_size != u.size or r.topic != topic or r.queue_id != qid:
        q.problem(f"batch consume queue {topic}/{qid} offset {n} points at commitlog offset {u.phys} size {u.size}, "
                  f"but the message there is {r.topic}/{r.queue_id} size {r.total_size}")
    return q._checked(r, bad, u.phys)


def _message(q, bq, topic, qid, n):
    u = bq.unit_for(n)
    if u is None:
        q.note(f"{topic}/{qid} offset {n}: no batch consume queue unit holds it")
        return None
    r = _record(q, topic, qid, u, n)
    if r is None:
        return None
    if not r.sys_flag & NEED_UNWRAP_FLAG:
        return r if r.queue_offset == n else None
    inner = unwrap(r)
    if inner is None:
        q.problem(f"commitlog offset {u.phys}: the inner-batch body of {topic}/{qid} does not parse")
        return None
    for m in inner:
        if m.queue_offset == n:
            q.note(f"{topic}/{qid} offset {n}: inner message {n - r.queue_offset + 1} of {len(inner)} of the batch "
                   f"record at commitlog offset {r.offset} (unit [{u.base}, {u.end_offset}))")
            return m
    q.note(f"{topic}/{qid} offset {n}: the batch record at commitlog offset {r.offset} holds offsets "
           f"[{r.queue_offset}, {r.queue_offset + len(inner)})")
    return None


def by_queue_offset(q, topic: str, qid: int, offset: int, count: int = 1):
    bq = B.BatchQueue(q.store, topic, qid)
    lo, hi = bq.min_offset(), bq.max_offset()
    if not lo <= offset < hi:
        raise UsageError(f"queue offset {offset} is outside {topic}/{qid}'s range [{lo}, {hi}) "
                         "(batch consume queue)")
    for n in range(offset, min(hi, offset + count)):
        m = _message(q, bq, topic, qid, n)
        if m is not None:
            yield m


def by_time(q, topic: str, qid: int, timestamp: int, count: int = 1):
    bq = B.BatchQueue(q.store, topic, qid)
    lo, hi = bq.min_offset(), bq.max_offset()
    off = bq.offset_by_time(timestamp)
    q.stats.queue_offset = off
    q.note(f"{topic}/{qid}: offset the broker's batch consume queue search returns for {timestamp}: {off} "
           f"(queue holds [{lo}, {hi}); a time between two files resolves to the last unit of the earlier file)")
    for n in range(max(off, lo), min(hi, off + count)):
        m = _message(q, bq, topic, qid, n)
        if m is not None:
            yield m


def by_time_range(q, topic: str, qid: int, begin: int, end: int):
    """The messages of one batch consume queue stored in [begin, end], inner messages one by one, in queue
    order: every unit whose store time is in the window (a batch is stored at one time)."""
    bq = B.BatchQueue(q.store, topic, qid)
    for u in bq.units():
        if not begin <= u.store_ts <= end:
            continue
        r = _record(q, topic, qid, u, u.base)
        if r is None or not begin <= r.store_timestamp <= end:
            continue
        if not r.sys_flag & NEED_UNWRAP_FLAG:
            yield r
            continue
        inner = unwrap(r)
        if inner is None:
            q.problem(f"commitlog offset {u.phys}: the inner-batch body of {topic}/{qid} does not parse")
            continue
        yield from inner
