"""verify: the 5.x compaction store (compaction/compactionLog, compaction/compactionCq, position-checkpoint).

Per compaction queue: what the broker's load does with its files (rmqctl.store.compaction.verdict: not loaded,
load failure, log files deleted), then for a queue it loads: every CQ unit points at the start of a record of
the log file of the same name with the same size and queue offset; queue offsets ascend; log records without a
unit (the broker never serves them, or drops them at load); keys unique among the compacted offsets (<= the
queue's position in position-checkpoint); each record equals the commitlog's message at that queue offset
(except PHYSICALOFFSET, which the compaction log rewrites).
"""
from __future__ import annotations

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.config.topics import compaction_topics
from rmqctl.store import compaction as C

PHYS_POS, PHYS_LEN = 28, 8


def check_compaction_store(store, findings: list, *, commitlog_ok: bool = True) -> dict:
    from rmqctl.repair.compaction import walk_log

    root = store.root
    qs = C.queues(root, store._skip)
    stats = {"compaction_queues": len(qs), "compaction_units": 0}
    sz = C.sizes(root, store.config)
    if not qs:
        _behind(store, qs, sz, findings)      # a COMPACTION topic whose compaction files are all gone
        return stats
    positions, _ = C.position_checkpoint(root)
    positions = positions or {}
    for q in qs:
        qname = f"{q.topic}/{q.queue_id}"
        v = C.verdict(q, sz)
        if v.loads:     # what is left: a 0-byte last entry, which the broker deletes at load
            for p in q.strays + [f.path for f in q.log_files + q.cq_files if f.size == 0]:
                findings.append(Finding(INFO, "compaction.stray", str(p), None, None, None,
                                        "0-byte last entry of the directory: the broker deletes it at load"))
        if not v.loads:
            where = q.cq_dir if not q.has_cq_dir else q.log_dir
            findings.append(Finding(ERROR, "compaction.load", str(where), None, None, None,
                                    f"compaction queue {qname}: {v.why}"))
            continue
        for f in v.deletes:
            findings.append(Finding(ERROR, "compaction.unpaired", str(f.path), f.start,
                                    f"a CQ file {f.name} (or units pointing into this file)", "none",
                                    f"the broker deletes this log file at load: it starts after the end of the "
                                    f"queue's last CQ unit ({v.max_phy}); its records are lost from the compaction "
                                    "store (`rmqctl rebuild cq` regenerates the CQ file from it)"))
        deleted = {f.name for f in v.deletes}
        logs = {f.name: f for f in q.log_files if f.size > 0 and f.name not in deleted}
        cqs = [f for f in q.cq_files if f.size > 0]
        pos = positions.get(q.key)
        prev_qo = prev_pos = None
        seen_keys: dict = {}
        cl_checked = 0
        for cf in cqs:
            lf = logs.get(cf.name)
            recs, stop = walk_log(lf, sz.log) if lf is not None else ([], None)
            by_off = {r[0]: r for r in recs}
            if stop is not None and not stop.normal:
                findings.append(Finding(ERROR, "compaction.log_record", str(lf.path), stop.offset, None, stop.kind,
                                        f"compaction log {qname}: {stop.detail or stop.kind}; a consumer reading "
                                        "the queue gets these bytes as they are"))
            n = v.cq_ends.get(cf.start, 0) // C.UNIT_SIZE
            units = q.read_cq(cf, sz.cq)[:n]
            covered = set()
            for i, u in enumerate(units):
                phys, size, _tags, _ts, qo, batch = u[:6]
                at = i * C.UNIT_SIZE
                stats["compaction_units"] += 1
                r = by_off.get(phys)
                if not (cf.start <= phys < cf.start + sz.log):
                    findings.append(Finding(ERROR, "compaction.cq_unit", str(cf.path), at,
                                            f"an offset in [{cf.start}, {cf.start + sz.log})", phys,
                                            f"compaction CQ {qname}: unit points outside its log file"))
                elif r is None:
                    findings.append(Finding(ERROR, "compaction.cq_unit", str(cf.path), at,
                                            "the start of a record of the compaction log", phys,
                                            f"compaction CQ {qname}: no record starts there; a consumer gets "
                                            "garbage at queue offset " + str(qo)))
                else:
                    covered.add(phys)
                    if r[1] != size or r[4] != qo or r[6] != q.topic or r[7] != q.queue_id or batch != 1:
                        findings.append(Finding(ERROR, "compaction.cq_unit", str(cf.path), at,
                                                f"size {r[1]}, queue offset {r[4]}, {r[6]}/{r[7]}, batch 1",
                                                f"size {size}, queue offset {qo}, batch {batch}",
                                                f"compaction CQ {qname}: unit disagrees with the record at {phys}"))
                    elif pos is not None and qo <= int(pos) and r[5] and cf is not cqs[-1]:
                        k = r[5]
                        if k in seen_keys:
                            findings.append(Finding(WARNING, "compaction.duplicate_key", str(lf.path), phys,
                                                    f"one record of key {k!r} up to the compaction position {pos}",
                                                    f"also at queue offset {seen_keys[k]}",
                                                    f"compaction {qname}: a compacted range holds a key twice"))
                        else:
                            seen_keys[k] = qo
                    if commitlog_ok and r[1] == size and _against_commitlog(store, lf, r, findings, qname):
                        cl_checked += 1
                if prev_qo is not None and qo <= prev_qo:
                    findings.append(Finding(ERROR, "compaction.cq_order", str(cf.path), at, f"> {prev_qo}", qo,
                                            f"compaction CQ {qname}: queue offsets must ascend"))
                if prev_pos is not None and phys <= prev_pos:
                    findings.append(Finding(ERROR, "compaction.cq_order", str(cf.path), at, f"> {prev_pos}", phys,
                                            f"compaction CQ {qname}: log positions must ascend"))
                prev_qo, prev_pos = qo, phys
            for r in recs:
                if r[0] in covered:
                    continue
                last_file = cf is cqs[-1]
                beyond = v.max_phy >= 0 and r[0] >= v.max_phy
                if last_file and beyond:
                    findings.append(Finding(WARNING, "compaction.orphan_record", str(lf.path), r[0], None, None,
                                            f"compaction log {qname}: record of queue offset {r[4]} after the CQ's "
                                            "last unit: the broker's load ends the log before it (overwritten by "
                                            "the next record)"))
                else:
                    findings.append(Finding(WARNING, "compaction.orphan_record", str(lf.path), r[0], None, None,
                                            f"compaction log {qname}: record of queue offset {r[4]} has no CQ "
                                            "unit: the broker never serves it (`rmqctl rebuild cq` regenerates the "
                                            "CQ from the log)"))
        mx = C.cq_max_offset(q, sz, v)
        if pos is not None:
            try:
                p = int(pos)
            except (TypeError, ValueError):
                p = None
            try:     # beyond the topic's own consume queue: said once, by the position-checkpoint check
                regular = store.consume_queue(q.topic, q.queue_id).max_offset()
            except Exception:   # noqa: BLE001
                regular = None
            if p is not None and p >= mx and mx > 0 and (regular is None or p <= regular):
                findings.append(Finding(ERROR, "compaction.position", str(root / "compaction" / "position-checkpoint"),
                                        None, f"< {mx} (the compaction CQ's max offset)", p,
                                        f"compaction position of {qname} beyond its compaction queue: the broker "
                                        "never compacts the files up to it again"))
        stats.setdefault("compaction_commitlog_compared", 0)
        stats["compaction_commitlog_compared"] += cl_checked
    _behind(store, qs, sz, findings)
    for k in positions:
        topic, _, qid = str(k).rpartition("_")
        if not any(q.key == k for q in qs) and qid.lstrip("-").isdigit():
            findings.append(Finding(INFO, "compaction.position", str(root / "compaction" / "position-checkpoint"),
                                    None, None, None, f"a compaction position for {topic}/{qid}, which has no "
                                    "compaction files"))
    return stats


def _behind(store, qs, sz, findings) -> None:
    """Keyed messages of a COMPACTION topic (config/topics.json) in the commitlog above the compaction queue's max
    offset: consumers of the topic never see them until the broker re-dispatches them, which only an abnormal
    recovery does (a normal start re-dispatches from the commitlog's confirm offset)."""
    from rmqctl.scan import FileWalk
    from rmqctl.store.commitlog import open_ro

    topics = compaction_topics(store.root)
    if not topics:
        return
    known = {(q.topic, q.queue_id): q for q in qs}
    cfs = store.config.commitlog_file_size
    for t, qid in store.queues():
        if t not in topics:
            continue
        q = known.get((t, qid))
        cmax = 0
        if q is not None:
            v = C.verdict(q, sz)
            if not v.loads:
                continue          # reported as compaction.load
            cmax = C.cq_max_offset(q, sz, v)
        cq = store.consume_queue(t, qid)
        rmax = cq.max_offset()
        first = n = 0
        for qo, phys, size, _tags in cq.units(cmax, rmax):
            if phys < 0 or size <= 0:
                continue
            f = store.commitlog.file_for(phys, cfs)
            if f is None:
                continue
            with open_ro(f.path) as fd:
                w = FileWalk(fd, f.start, f.size, phys - f.start, phys - f.start + size, check_crc=False,
                             check_phys=False, check_prop_crc=False)
                r = next(iter(w), None)
            if r is None or r.queue_offset != qo:
                continue
            keys = r.properties.get("KEYS")
            if keys and keys.strip():
                first = first or phys
                n += 1
        if n:
            where = str(q.cq_dir if q is not None else store.root / "compaction" / C.CQ_DIR / t / str(qid))
            findings.append(Finding(INFO if store.abort_exists else WARNING, "compaction.behind", where, None,
                                    f"compaction queue up to queue offset {rmax}", f"ends at {cmax}",
                                    f"{n} keyed message(s) of COMPACTION topic {t} queue {qid} (from commitlog offset "
                                    f"{first}) are not in its compaction log: consumers do not see them; "
                                    + ("the abnormal recovery re-dispatches them (`rmqctl recover` does the same)"
                                       if store.abort_exists
                                       else "a normal start never re-dispatches them; "
                                            "`rmqctl recover --from-start` does")))


def _against_commitlog(store, lf, r, findings, qname) -> bool:
    """The log record against the commitlog's message at the same queue offset (its regular consume queue)."""
    off, size, qo = r[0], r[1], r[4]
    try:
        u = store.consume_queue(r[6], r[7]).unit(qo)
    except Exception:   # noqa: BLE001 - no such queue: nothing to compare with
        return False
    if u is None or u[0] < 0 or u[1] <= 0:
        return False
    phys = u[0]
    cfs = store.config.commitlog_file_size
    f = store.commitlog.file_for(phys, cfs)
    if f is None:
        return False       # expired from the commitlog: the compaction log is the only copy
    with open(f.path, "rb") as fh:
        fh.seek(phys - f.start)
        orig = fh.read(size)
    with open(lf.path, "rb") as fh:
        fh.seek(off - lf.start)
        mine = fh.read(size)
    if u[1] != size or len(orig) != size or \
            orig[:PHYS_POS] + orig[PHYS_POS + PHYS_LEN:] != mine[:PHYS_POS] + mine[PHYS_POS + PHYS_LEN:]:
        findings.append(Finding(ERROR, "compaction.commitlog_mismatch", str(lf.path), off,
                                f"the bytes of commitlog offset {phys} ({u[1]} bytes)", f"{size} bytes that differ",
                                f"compaction log {qname}: the record of queue offset {qo} is not the commitlog's "
                                "message at that offset"))
    return True


__all__ = ["check_compaction_store"]


def verify_one(path, findings: list, config=None) -> dict:
    """`verify FILE` on a compaction log or CQ file: the checks of its queue (its partner file, the commitlog and
    the position included), reported for that file and its queue directory."""
    from pathlib import Path

    from rmqctl.store.files import store_root_of
    from rmqctl.store.layout import Store

    path = Path(path)
    root = store_root_of(path.parent)
    if root is None:
        from rmqctl.errors import UsageError

        raise UsageError("a compaction file is checked with its store (no store directory above it)", path=path)
    store = Store(root, config) if config is not None else Store(root)
    mine: list = []
    stats = check_compaction_store(store, mine)
    qdir = path.parent
    log_dir = qdir.parents[2] / C.LOG_DIR / qdir.parent.name / qdir.name
    cq_dir = qdir.parents[2] / C.CQ_DIR / qdir.parent.name / qdir.name
    keep = {str(path), str(log_dir), str(cq_dir), str(log_dir / path.name), str(cq_dir / path.name)}
    findings.extend(f for f in mine if f.path in keep)
    return stats
