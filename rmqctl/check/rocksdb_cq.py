"""verify of a storeType=defaultRocksDB store: the consume-queue RocksDB against the commitlog, the offset column
family against the units, the metadata RocksDBs (codes rocksdb_cq.* and rocksdb_meta.*; docs/rocksdb.md).

The broker's rules (RocketMQ 5.3.3): every message the dispatcher sends to a consume queue (not PREPARED/ROLLBACK)
gets the unit key (topic, queueId, queueOffset) -> (commitlog offset, size, tagsCode, store time); the offset
column family keeps each queue's max unit (and its min once cleaned); CHECKPOINT_TOPIC records the commitlog offset
dispatched so far. The CQ writes skip the WAL: after a kill the RocksDB holds what was flushed, and the broker's
recovery re-dispatches the commitlog from that checkpoint on start (and truncates units beyond the commitlog end).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.dispatch import goes_to_consume_queue, tags_code
from rmqctl.errors import FormatError
from rmqctl.store.commitlog import CommitLog
from rmqctl.store.rocksdb_cq import (
    Bad,
    ConsumeQueues,
    Unit,
    metadata_dirs,
    offsets_table,
    read_metadata_one,
)

MAX_EACH = 20      # findings of one kind per queue before they are summed up


@dataclass
class _Q:
    """One queue's units as seen in one pass in key order (flat memory: counters, not units)."""
    count: int = 0
    first: int | None = None
    last: Unit | None = None
    missing: int = 0
    first_missing: int | None = None
    beyond: int = 0
    matched: int = 0

    def add(self, u: Unit, max_off: int | None):
        if self.last is not None and u.queue_offset > self.last.queue_offset + 1:
            self.missing += u.queue_offset - self.last.queue_offset - 1
            if self.first_missing is None:
                self.first_missing = self.last.queue_offset + 1
        if self.first is None:
            self.first = u.queue_offset
        if max_off is not None and u.queue_offset > max_off:
            self.beyond += 1
        else:
            self.last = u
        self.count += 1


def check_store(store, findings: list, *, cl_min: int, cl_end: int | None) -> tuple[dict, int]:
    """Returns ({(topic, qid): (min, max)} as the broker serves them after its start, dispatch checkpoint or -1)
    for the config and recovery checks. Memory stays flat: one pass over the units in key order (counters per
    queue), one over the commitlog with point lookups, then only the queues that disagree are read again."""
    root = store.root
    path = str(root / "consumequeue")
    ranges: dict = {}
    try:
        cqs = ConsumeQueues.open(root, cl_min)
    except FormatError as e:
        findings.append(Finding(ERROR, "rocksdb_cq.unreadable", path, None, None, None, e.message))
        return ranges, -1
    with cqs:
        for b in cqs.bad:
            findings.append(Finding(ERROR, "rocksdb_cq.malformed", path, None, None, None,
                                    f"{b.cf} column family, key {b.key.hex()}: {b.why}"))
        ckpt = cqs.checkpoint if cqs.checkpoint is not None else -1
        if cqs.checkpoint is None and cqs.queues:
            findings.append(Finding(ERROR, "rocksdb_cq.no_checkpoint", path, None, "a CHECKPOINT_TOPIC entry",
                                    "none", "the offset column family has no dispatch checkpoint; the broker "
                                    "re-dispatches the whole commitlog on start"))
        stats: dict = {}
        for u in cqs.units():
            if isinstance(u, Bad):
                findings.append(Finding(ERROR, "rocksdb_cq.malformed", path, None, None, None,
                                        f"{u.cf} column family, key {u.key.hex()}: {u.why}"))
                continue
            key = (u.topic, u.queue_id)
            info = cqs.queues.get(key)
            mx = info.max_entry.queue_offset if info is not None and info.max_entry is not None else None
            stats.setdefault(key, _Q()).add(u, mx)
        _check_offsets(cqs, stats, findings, path, ranges)
        if cl_end is not None:
            # after the broker's start: the queues as re-dispatched from the checkpoint
            for key, nxt in _against_commitlog(store, cqs, stats, findings, path, ckpt, cl_min, dict(ranges)).items():
                lo, hi = ranges.get(key, (0, 0))
                ranges[key] = (lo, max(hi, nxt))
        if cl_end is not None and ckpt > cl_end:
            findings.append(Finding(ERROR, "rocksdb_cq.checkpoint_ahead", path, ckpt, f"at most {cl_end}", ckpt,
                                    "the dispatch checkpoint is beyond the end of the commitlog; the broker "
                                    "truncates the units beyond the end on start"))
    return ranges, ckpt


def _check_offsets(cqs, stats, findings, path, ranges):
    for key in sorted(set(stats) | set(cqs.queues)):
        t, q = key
        st = stats.get(key, _Q())
        info = cqs.queues.get(key)
        where = f"{path} {t}/{q}"
        if st.count and (info is None or info.max_entry is None):
            findings.append(Finding(ERROR, "rocksdb_cq.no_max", where, None, "a max entry",
                                    "none", f"the queue has {st.count} unit(s) but no max entry: the broker serves "
                                    f"it as empty"))
            continue
        mx = info.max_entry
        base = info.min_entry.queue_offset if info.min_entry is not None else (
            st.first if st.first is not None else 0)
        try:
            lo = cqs.min_offset(t, q)
        except FormatError:          # a malformed unit on the broker's search path (reported as malformed)
            lo = base
        ranges[key] = (lo, mx.queue_offset + 1)
        last = st.last
        if last is None or last.queue_offset != mx.queue_offset:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"a unit at the max entry's queue offset {mx.queue_offset}", "no unit",
                                    f"highest unit up to it: {last.queue_offset if last else 'none'}"))
        elif last.phy_offset != mx.phy_offset:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"commitlog offset {last.phy_offset} (the last unit's)", mx.phy_offset,
                                    "the max entry's commitlog offset differs from the unit's"))
        if st.beyond:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"no unit after the max entry's queue offset {mx.queue_offset}",
                                    f"{st.beyond} unit(s)", "units beyond the max entry are not served"))
        missing, first_missing = st.missing, st.first_missing
        if st.first is not None and st.first > base:
            missing += st.first - base
            first_missing = base
        if last is not None and last.queue_offset < mx.queue_offset:
            missing += mx.queue_offset - last.queue_offset
            first_missing = first_missing if first_missing is not None else last.queue_offset + 1
        if missing:
            served = (f"; the broker serves the queue from offset {lo}, so the {lo - base} unit(s) before are not "
                      f"served either" if lo > base else f"; the broker serves the queue from offset {lo}")
            findings.append(Finding(ERROR, "rocksdb_cq.gap", where, first_missing, "a unit per offset in "
                                    f"[{base}, {mx.queue_offset}]", f"{missing} missing",
                                    f"first missing queue offset {first_missing}{served}"))


def _against_commitlog(store, cqs, stats, findings, path, ckpt, cl_min, ranges):
    """Each dispatchable message below the checkpoint has its unit (a point lookup); each unit points at its
    message (units no message matched are looked for in their queue only)."""
    cfg = store.config
    cl = CommitLog(store)
    nxt: dict = {}
    behind: dict = defaultdict(int)
    per_queue: dict = defaultdict(int)
    first_behind = None
    last_end = cl_min
    for r in cl.records(check_crc=False, check_prop_crc=False):
        last_end = r.end
        if not goes_to_consume_queue(r.sys_flag):
            continue
        key = (r.topic, r.queue_id)
        nxt[key] = r.queue_offset + 1
        u = cqs.unit_or_bad(r.topic, r.queue_id, r.queue_offset) if key in stats else None
        if isinstance(u, Bad):
            u = None
        if ckpt >= 0 and r.offset >= ckpt:
            behind[key] += 1
            first_behind = r.offset if first_behind is None else first_behind
            if u is not None and u.phy_offset == r.offset:
                stats[key].matched += 1
            continue
        lo = ranges.get(key, (0, 0))[0]
        if u is None:
            if r.queue_offset >= lo and per_queue[key] < MAX_EACH:
                per_queue[key] += 1
                findings.append(Finding(ERROR, "rocksdb_cq.missing", f"{path} {key[0]}/{key[1]}", r.queue_offset,
                                        f"a unit for the message at commitlog offset {r.offset}", "no unit",
                                        "the message was dispatched (below the checkpoint) but its queue has no "
                                        "unit: a pull there finds nothing"))
            continue
        stats[key].matched += 1
        want = (r.offset, r.total_size, tags_code(r.topic, r.properties, r.store_timestamp, tuple(cfg.delay_levels)),
                r.store_timestamp)
        got = (u.phy_offset, u.size, u.tags_code, u.store_timestamp)
        if want != got and per_queue[key] < MAX_EACH:
            per_queue[key] += 1
            names = ("commitlog offset", "size", "tags code", "store time")
            diff = ", ".join(f"{n} {w} vs {g}" for n, w, g in zip(names, want, got) if w != g)
            findings.append(Finding(ERROR, "rocksdb_cq.mismatch", f"{path} {key[0]}/{key[1]}", r.queue_offset,
                                    f"the message at commitlog offset {r.offset}", f"unit {got}",
                                    f"message vs unit: {diff}"))
    for key, st in sorted(stats.items()):
        if st.matched >= st.count:
            continue
        _orphans(cl, cqs, key, findings, path, cl_min, last_end)
    if behind:
        n = sum(behind.values())
        findings.append(Finding(INFO, "rocksdb_cq.behind", path, ckpt, f"dispatched up to {last_end} (the last "
                                f"message's end)", f"dispatched up to {ckpt}",
                                f"{n} message(s) from commitlog offset {first_behind} are not in the RocksDB consume "
                                f"queues yet ({len(behind)} queue(s)); the broker re-dispatches them from its "
                                f"checkpoint on start"))
    return nxt


def _orphans(cl, cqs, key, findings, path, cl_min, cl_end):
    """Units of one queue whose commitlog offset holds no message of this queue and queue offset."""
    n, first = 0, None
    for u in cqs.units(*key):
        if isinstance(u, Bad):
            continue
        ok = False
        if cl_min <= u.phy_offset < cl_end:
            try:
                r = cl.read_record(u.phy_offset, check_crc=False)
                ok = (r.topic, r.queue_id, r.queue_offset) == (u.topic, u.queue_id, u.queue_offset)
            except FormatError:
                ok = False
        if not ok:
            n += 1
            first = first or u
    if first is None:
        return
    past = first.phy_offset >= cl_end
    findings.append(Finding(
        ERROR, "rocksdb_cq.orphan", f"{path} {key[0]}/{key[1]}", first.queue_offset, "a unit pointing at its message",
        f"{n} unit(s) pointing at no such message (first: commitlog offset {first.phy_offset})",
        "beyond the commitlog end: the broker truncates them on start" if past else
        ("below the commitlog's first offset (expired)" if first.phy_offset < cl_min else
         "no message of this queue/offset there")))


def check_metadata(store, findings: list, ranges: dict) -> None:
    """The metadata RocksDBs open and hold JSON; committed offsets within their queues."""
    for name, d in metadata_dirs(store.root).items():
        try:
            m = read_metadata_one(d)
        except FormatError as e:
            findings.append(Finding(ERROR, "rocksdb_meta.unreadable", str(d), None, None, None, e.message))
            continue
        for b in m["bad"]:
            findings.append(Finding(ERROR, "rocksdb_meta.malformed", str(d), None, None, None, b))
        if name != "consumerOffsets":
            continue
        for tg, qs in sorted(offsets_table({name: m}).items()):
            topic = tg.split("@", 1)[0]
            for q, off in sorted(qs.items()):
                r = ranges.get((topic, q))
                if r is not None and off > r[1]:
                    findings.append(Finding(WARNING, "rocksdb_meta.offset_beyond", str(d), None,
                                            f"at most {r[1]} (the queue's max offset)", off,
                                            f"{tg} queue {q}: the committed offset is beyond the queue"))
