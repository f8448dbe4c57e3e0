"""`dump STORE_DIR`: a whole store at a glance, as one dict (rendered as text or JSON by the CLI)."""
from __future__ import annotations

import os

from rmqctl.scan import FileWalk
from rmqctl.store.commitlog import open_ro
from rmqctl.store.layout import Store


def commitlog_end(store: Store) -> tuple[int, str]:
    """End of the valid records in the last commitlog file (no CRC: this is a summary, verify checks)."""
    files = store.commitlog.files
    if not files:
        return 0, "no files"
    f = files[-1]
    with open_ro(f.path) as fd:
        w = FileWalk(fd, f.start, f.size, check_crc=False, check_phys=False)
        for _ in w:
            pass
    return w.stop.offset, w.stop.kind


def summarize(store: Store, *, queues: bool = True) -> dict:
    cfg = store.config
    files = store.commitlog.files
    out: dict = {"kind": "store", "root": str(store.root)}
    out["engine"] = store.engine
    unsupported = store.unsupported(rocksdb=True)
    if unsupported:
        out["unsupported"] = unsupported
    end, how = commitlog_end(store)
    sizes = sorted({f.size for f in files})
    out["commitlog"] = {
        "files": len(files), "file_size": cfg.commitlog_file_size, "sizes_on_disk": sizes,
        "bytes": sum(f.size for f in files), "min_offset": store.commitlog.min_offset,
        "max_offset": end, "last_file_ends_with": how,
        "first_file": files[0].name if files else None, "last_file": files[-1].name if files else None,
        "gaps": [[a.start + cfg.commitlog_file_size, b.start] for a, b in zip(files, files[1:])
                 if b.start != a.start + cfg.commitlog_file_size],
        "strays": [f"{p.name} ({why})" for p, why in store.commitlog.strays],
    }
    if queues and store.engine == "rocksdb":
        from rmqctl.store.rocksdb_cq import summarize as rocksdb_summary

        r = rocksdb_summary(store)
        out["rocksdb"] = r["rocksdb"]
        out["consume_queues"] = r["consume_queues"]
        out["topics"] = sorted({q["topic"] for q in r["consume_queues"]})
    elif queues:
        qs = []
        for topic, qid in store.queues():
            cq = store.consume_queue(topic, qid)
            qs.append({"topic": topic, "queue_id": qid, "files": len(cq.queue.files),
                       "min_offset": cq.min_offset(store.commitlog.min_offset), "max_offset": cq.max_offset()})
        out["consume_queues"] = qs
        out["topics"] = sorted({q["topic"] for q in qs})
    if store.engine != "rocksdb":
        from rmqctl.store.rocksdb_cq import metadata_dirs, summarize as rocksdb_summary

        if metadata_dirs(store.root):     # RocksDB metadata beside file consume queues
            out["rocksdb"] = rocksdb_summary(store)["rocksdb"]
    for kind in ("batchconsumequeue", "consumequeue_ext"):
        extra = store.queues(kind)
        if extra:
            out[kind] = [f"{t}/{q}" for t, q in extra]
    idx = store.index_files()
    out["index"] = {"files": [p.name for p in idx], "hash_slot_num": cfg.hash_slot_num, "index_num": cfg.index_num,
                    "file_size": cfg.index_file_size}
    ck = store.checkpoint()
    out["checkpoint"] = None if ck is None else {k: v for k, v in ck.__dict__.items()}
    out["abort"] = store.abort_exists
    out["lock"] = store.lock_state()
    out["next_start"] = "abnormal recovery (abort present)" if store.abort_exists else "normal recovery"
    out["config"] = _config_summary(store)
    extras = {}
    for name in ("timerwheel", "timerlog", "compaction", "batchconsumequeue", "consumequeue_ext"):
        p = store.root / name
        if p.exists():
            extras[name] = _du(p)
    if extras:
        out["other"] = extras
    from rmqctl.config.topics import compaction_topics
    from rmqctl.store.compaction import summarize as compaction_summary

    comp = compaction_summary(store.root, store.config, compaction_topics(store.root))
    if comp:
        out["compaction"] = comp
    if store.not_followed:   # links out of the store, FIFOs...: not read (docs/files-policy.md)
        out["not_followed"] = [f"{p} ({why})" for p, why in sorted(store.not_followed.items())]
    return out


def _du(p) -> dict:
    if p.is_file():
        return {"files": 1, "bytes": p.stat().st_size}
    n = b = 0
    for root, _, fs in os.walk(p):
        for f in fs:
            n += 1
            b += os.lstat(os.path.join(root, f)).st_size
    return {"files": n, "bytes": b}


def _config_summary(store: Store) -> list:
    cdir = store.config_dir
    if not cdir.is_dir():
        return []
    try:
        from rmqctl.config import files as cfgfiles
    except ImportError:
        return []
    out = []
    for kind in cfgfiles.config_files(cdir):
        loaded = cfgfiles.load(cdir, kind.filename)
        out.append({"file": kind.filename, "main": loaded.main.describe(), "bak": loaded.bak.describe(),
                    "broker_would": loaded.verdict})
    return out
