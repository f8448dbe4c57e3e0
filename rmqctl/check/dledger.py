"""verify for DLedger commitlog stores: the entry log as DLedgerMmapFileStore.recover() reads it, the index units,
checkpoint/currterm, each wrapped message's own checks, and consume queue units pointing at wrapped messages."""
from __future__ import annotations

import time

from rmqctl.check.findings import ERROR, INFO, WARNING, Report
from rmqctl.formats import dledger as fmt
from rmqctl.store import dledger as dl


def recovery_sentence(plan: dl.RecoveryPlan) -> str:
    """What DLedger's own recovery at the next broker start keeps and cuts (one line)."""
    kept = (f"keeps entries {plan.first_index}..{plan.last_index} (term {plan.last_term}), data up to offset "
            f"{plan.process_offset}" if plan.keep_entries
            else f"keeps no entry (data up to offset {plan.process_offset})")
    cut = (f"; drops the {plan.cut_bytes} bytes after it (left on disk, overwritten by the next appends)"
           if plan.cut_bytes else "")
    if plan.data_files_deleted:
        cut += f" and deletes data files {', '.join(plan.data_files_deleted)}"
    if plan.index_rewrite_from is not None:
        cut += f"; rewrites the index units from entry {plan.index_rewrite_from} on"
    why = "" if plan.stop.normal else f" ({plan.stop.kind}: {plan.stop.detail})"
    return f"DLedger's recovery at the next broker start {kept}{cut}{why}"


def verify_dledger(store, log: dl.DLedgerLog) -> Report:
    from rmqctl.check.smallfiles import check_lock

    t0 = time.time()
    report = Report(str(store.root))
    check_lock(store, report.findings)
    add = report.add
    size = log.data_file_size
    prev = None
    for f in log.data:
        if f.size != size:
            add(ERROR, "dledger.file_size", f.path, None, size, f.size,
                "DLedger refuses to load data files of different sizes (the broker exits)")
        if prev is not None and f.start != prev.start + prev.size:
            add(ERROR, "dledger.file_gap", f.path, None, prev.start + prev.size, f.start,
                "data files are not contiguous")
        prev = f
    for f in log.index:
        if f.size != log.index_file_size:
            add(ERROR, "dledger.file_size", f.path, None, log.index_file_size, f.size,
                "DLedger refuses to load index files of different sizes (the broker exits)")

    box: list = []
    entries = 0
    last = None
    by_msg_offset: dict[int, tuple] = {}
    index_bad = None
    n_bytes = 0
    for e, rec, bad in dl.message_walk(log, box):
        entries += 1
        last = e
        n_bytes += e.size
        if index_bad is None:
            u = log.index_unit(e.index)
            want = (e.magic, e.pos, e.size, e.index, e.term)
            if u != want:
                index_bad = e.index
                add(ERROR, "dledger.index_unit", _index_path(log, e.index), e.index * fmt.INDEX_UNIT_SIZE,
                    "magic/pos/size/index/term " + "/".join(map(str, want)),
                    "missing" if u is None else "/".join(map(str, u)),
                    f"entry {e.index}: DLedger's recovery rewrites the index units from here")
        if bad is not None:
            detail = bad if isinstance(bad, str) else f"{bad.kind}: {bad.detail}".rstrip(": ")
            add(ERROR, "dledger.message", e.path, e.message_offset - int(e.path.name), None, None,
                f"entry {e.index}: the wrapped message fails its checks ({detail})")
            continue
        by_msg_offset[e.message_offset] = (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size)
    stop = box[0]
    plan = dl.predict_recovery(log)
    if not stop.normal:
        add(ERROR, "dledger.entry", stop.path, stop.file_offset, None, None,
            recovery_sentence(plan))
    elif plan.cut_bytes:
        add(WARNING, "dledger.tail", stop.path, stop.file_offset, "zeros", f"{plan.cut_bytes} non-zero bytes",
            "bytes after the last entry; " + recovery_sentence(plan))
    last_index = last.index if last else -1
    ck = log.checkpoint()
    ckp = log.dir / "checkpoint"
    if ck is None:
        add(WARNING, "dledger.checkpoint", ckp, None, None, "missing",
            "no committed index: the broker's commitlog max offset stays 0 until the group commits again")
    else:
        try:
            committed = int(ck.get("committedIndex", "-1").strip())
            end = int(ck.get("endIndex", "-1").strip())
        except ValueError as exc:
            add(ERROR, "dledger.checkpoint", ckp, None, "integers", None, f"unreadable: {exc}")
        else:
            if committed > last_index:
                add(ERROR, "dledger.checkpoint", ckp, None, f"committedIndex <= {last_index}", committed,
                    "committed index past the last entry of the log")
            elif committed < last_index:
                add(INFO, "dledger.checkpoint", ckp, None, last_index, committed,
                    "entries after the committed index (a crash before the checkpoint was written): the broker's "
                    "commitlog max offset is the committed entry's end until the group commits them")
            if end != last_index:
                add(INFO, "dledger.checkpoint", ckp, None, f"endIndex {last_index}", end, "stale endIndex")
    ct = log.currterm()
    if ct is not None and last is not None:
        try:
            term = int(ct.get("currTerm", "0").strip())
        except ValueError:
            term = None
        if term is not None and term < last.term:
            add(ERROR, "dledger.currterm", log.dir / "currterm", None, f">= {last.term}", term,
                "current term behind the last entry's term")

    if store.abort_exists:
        add(WARNING, "abort.present", store.abort_path, None, "no abort file (clean shutdown)", "abort present",
            "abort file present: the next start runs abnormal recovery (DLedger's own recovery of the entry log, "
            "then the consume queues are re-dispatched from the wrapped messages)")
    # consume queues: every unit must point at a wrapped message of its queue
    units = 0
    for topic, qid in store.queues():
        cq = store.consume_queue(topic, qid)
        for qoff, phys, sz, _tags in cq.units():
            if phys == 0 and sz == 0:
                continue
            units += 1
            m = by_msg_offset.get(phys)
            if m is None:
                add(ERROR, "dledger.cq_unit", f"consumequeue/{topic}/{qid}", qoff * 20, "a wrapped message's offset",
                    phys, "unit points at no message of the DLedger log (entry pos + 48)")
            elif m[:3] != (topic, qid, qoff) or m[3] != sz:
                add(ERROR, "dledger.cq_unit", f"consumequeue/{topic}/{qid}", qoff * 20,
                    f"{topic}/{qid}@{qoff} size {sz}", f"{m[0]}/{m[1]}@{m[2]} size {m[3]}",
                    "unit and message disagree")
    seen = set()
    for topic, qid in store.queues():
        for _qoff, phys, sz, _tags in store.consume_queue(topic, qid).units():
            if sz:
                seen.add(phys)
    behind = [o for o in by_msg_offset if o not in seen]
    if behind:
        first = min(behind)
        f = next(f for f in log.data if f.start <= first < f.start + f.size)
        add(INFO, "dledger.cq_behind", f.path, first - f.start, None, f"{len(behind)} message(s)",
            "wrapped messages not in their consume queue yet: the broker dispatches them at its next start")
    report.stats.update({"bytes": n_bytes, "messages": len(by_msg_offset), "entries": entries, "cq_units": units,
                         "files": len(log.data), "seconds": round(time.time() - t0, 3), "engine": "dledger"})
    return report


def _index_path(log, i: int) -> str:
    off = i * fmt.INDEX_UNIT_SIZE
    for f in log.index:
        if f.start <= off < f.start + f.size:
            return str(f.path)
    return str(log.dir / "index")
