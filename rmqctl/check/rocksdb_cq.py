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

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.dispatch import goes_to_consume_queue, tags_code
from rmqctl.errors import FormatError
from rmqctl.store.commitlog import CommitLog
from rmqctl.store.rocksdb_cq import (
    Bad,
    ConsumeQueues,
    metadata_dirs,
    offsets_table,
    read_metadata_one,
)

MAX_EACH = 20      # findings of one kind per queue before they are summed up


def check_store(store, findings: list, *, cl_min: int, cl_end: int | None) -> tuple[dict, int]:
    """Returns ({(topic, qid): (min, max)}, dispatch checkpoint or -1) for the config and recovery checks."""
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
        # units, per queue, in key order (queue offset order)
        units: dict = defaultdict(dict)
        for u in cqs.units():
            if isinstance(u, Bad):
                findings.append(Finding(ERROR, "rocksdb_cq.malformed", path, None, None, None,
                                        f"{u.cf} column family, key {u.key.hex()}: {u.why}"))
                continue
            units[(u.topic, u.queue_id)][u.queue_offset] = u
        _check_offsets(cqs, units, findings, path, ranges)
        if cl_end is not None:
            # after the broker's start: the queues as re-dispatched from the checkpoint
            for key, nxt in _against_commitlog(store, cqs, units, findings, path, ckpt, cl_min, cl_end,
                                                  dict(ranges)).items():
                lo, hi = ranges.get(key, (0, 0))
                ranges[key] = (lo, max(hi, nxt))
        if cl_end is not None and ckpt > cl_end:
            findings.append(Finding(ERROR, "rocksdb_cq.checkpoint_ahead", path, ckpt, f"at most {cl_end}", ckpt,
                                    "the dispatch checkpoint is beyond the end of the commitlog; the broker "
                                    "truncates the units beyond the end on start"))
    return ranges, ckpt


def _check_offsets(cqs, units, findings, path, ranges):
    for key in sorted(set(units) | set(cqs.queues)):
        t, q = key
        have = units.get(key, {})
        info = cqs.queues.get(key)
        where = f"{path} {t}/{q}"
        if have and (info is None or info.max_entry is None):
            findings.append(Finding(ERROR, "rocksdb_cq.no_max", where, None, f"a max entry (last unit {max(have)})",
                                    "none", "the queue has units but no max entry: the broker serves it as empty"))
            continue
        mx = info.max_entry
        try:
            lo = cqs.min_offset(t, q)
        except FormatError:          # a malformed unit on the broker's search path (reported as malformed)
            lo = info.min_entry.queue_offset if info.min_entry is not None else min(have, default=0)
        ranges[key] = (lo, mx.queue_offset + 1)
        last = have.get(mx.queue_offset)
        if last is None:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"a unit at the max entry's queue offset {mx.queue_offset}", "no unit",
                                    f"highest unit present: {max(have) if have else 'none'}"))
        elif last.phy_offset != mx.phy_offset:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"commitlog offset {last.phy_offset} (the last unit's)", mx.phy_offset,
                                    "the max entry's commitlog offset differs from the unit's"))
        beyond = [o for o in have if o > mx.queue_offset]
        if beyond:
            findings.append(Finding(ERROR, "rocksdb_cq.max_offset", where, mx.queue_offset,
                                    f"no unit after the max entry's queue offset {mx.queue_offset}",
                                    f"{len(beyond)} unit(s) up to {max(beyond)}",
                                    "units beyond the max entry are not served"))
        base = info.min_entry.queue_offset if info.min_entry is not None else min(have, default=lo)
        missing = [o for o in range(base, mx.queue_offset + 1) if o not in have]
        if missing:
            served = (f"; the broker serves the queue from offset {lo}, so the {lo - base} unit(s) before are not "
                      f"served either" if lo > base else f"; the broker serves the queue from offset {lo}")
            findings.append(Finding(ERROR, "rocksdb_cq.gap", where, missing[0], "a unit per offset in "
                                    f"[{base}, {mx.queue_offset}]", f"{len(missing)} missing",
                                    f"first missing queue offset {missing[0]}{served}"))


def _against_commitlog(store, cqs, units, findings, path, ckpt, cl_min, cl_end, ranges):
    """Each dispatchable message below the checkpoint has its unit; each unit points at its message."""
    cfg = store.config
    matched = set()
    nxt: dict = {}
    behind: dict = defaultdict(int)
    per_queue: dict = defaultdict(int)
    first_behind = None
    last_end = cl_min
    for r in CommitLog(store).records(check_crc=False, check_prop_crc=False):
        last_end = r.end
        if not goes_to_consume_queue(r.sys_flag):
            continue
        key = (r.topic, r.queue_id)
        nxt[key] = r.queue_offset + 1
        u = units.get(key, {}).get(r.queue_offset)
        if ckpt >= 0 and r.offset >= ckpt:
            behind[key] += 1
            first_behind = r.offset if first_behind is None else first_behind
            if u is not None and u.phy_offset == r.offset:
                matched.add((key, r.queue_offset))
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
        matched.add((key, r.queue_offset))
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
    for key, have in sorted(units.items()):
        orphans = sorted(o for o in have if (key, o) not in matched)
        if not orphans:
            continue
        o = orphans[0]
        u = have[o]
        past = u.phy_offset >= cl_end
        findings.append(Finding(
            ERROR, "rocksdb_cq.orphan", f"{path} {key[0]}/{key[1]}", o, "a unit pointing at its message",
            f"{len(orphans)} unit(s) pointing at no such message (first: commitlog offset {u.phy_offset})",
            "beyond the commitlog end: the broker truncates them on start" if past else
            ("below the commitlog's first offset (expired)" if u.phy_offset < cl_min else
             "no message of this queue/offset there")))
    if behind:
        n = sum(behind.values())
        findings.append(Finding(INFO, "rocksdb_cq.behind", path, ckpt, f"dispatched up to {last_end} (the last message's end)",
                                f"dispatched up to {ckpt}",
                                f"{n} message(s) from commitlog offset {first_behind} are not in the RocksDB consume "
                                f"queues yet ({len(behind)} queue(s)); the broker re-dispatches them from its "
                                f"checkpoint on start"))
    return nxt


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
