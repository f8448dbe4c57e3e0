"""`rebuild cq|index`: regenerate consume queues or index files from every valid commitlog record,
byte-identical to the broker's (docs/recovery.md, "Rebuild")."""
from __future__ import annotations

from pathlib import Path

from rmqctl import dispatch as D
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.batch_dispatch import dispatch_batch, new_queue_state
from rmqctl.repair.layout_checks import check_layout
from rmqctl.repair.plan import Action, Ctx, Plan, rel_path
from rmqctl.repair.queue_actions import ext_actions
from rmqctl.repair.rebuild_index import IndexRebuilder
from rmqctl.repair.sparse import same_file
from rmqctl.scan import BLANK_RECORD, END, ZEROS
from rmqctl.store.commitlog import Walk


def analyze_rebuild(store, what: str, staging: Path, *, topic: str | None = None, queue: int | None = None,
                    progress=None, include_deleted_topics: bool = False, records=None) -> Ctx:
    """Regenerate consume queues or index files from every valid commitlog record (from the first file
    to the first record the broker's recovery would stop at), build them in `staging`, and plan to
    swap in the files whose bytes differ. Records of topics absent from config/topics.json are left
    out unless include_deleted_topics (rmqctl.repair.topic_filter).

    records: None walks the commitlog here with the batch kernel; otherwise `records(walk)` yields the
    same records one by one (the Spark engine streams them from its tasks) and fills walk.ends."""
    from rmqctl.repair.topic_filter import load_filter

    plan = Plan(store=str(store.root), abort=store.abort_exists)
    ctx = Ctx(plan, Path(staging))
    check_layout(store, plan)
    cfg = store.config
    files = store.commitlog.files
    if plan.problems:
        return ctx
    skip, why = (None, "--include-deleted-topics: every topic is kept") if include_deleted_topics \
        else load_filter(store)
    plan.topics = {"checked_against": skip.source if skip else None, "why": why, "skipped": {}}
    walk = Walk()
    states: dict = {}
    untouched = []              # existing queues of skipped topics: left as they are
    if what == "cq":
        for t, q in store.queues():
            if (topic is None or t == topic) and (queue is None or q == queue):
                if skip is not None and skip.skips(t):
                    untouched.append(f"{t}/{q}")
                    skip.counts.setdefault(t, 0)
                    continue
                states[(t, q)] = new_queue_state(store, ctx.staging, t, q)
    rebuilder = None
    if what == "index":
        (ctx.staging / "index").mkdir(parents=True, exist_ok=True)
        rebuilder = IndexRebuilder(ctx.staging / "index", cfg.hash_slot_num, cfg.index_num,
                                   [p.name for p in store.index_files()])
        if cfg.index_geometry_files is None and not {"hash_slot_num", "index_num"} & cfg.explicit:
            plan.notes.append(f"no index file tells its geometry: new files get maxHashSlotNum {cfg.hash_slot_num}, "
                              f"maxIndexNum {cfg.index_num}; give the broker's config (--config) if it sets others")
    delay = cfg.delay_levels
    multi, lmq = D.multi_dispatch_on(cfg), D.lmq_on(cfg)
    last = None
    try:
        if records is None:
            from rmqctl.repair import vecdispatch as VD

            topics = VD.Topics()
            for bt in VD.batches(store, files, walk=walk, progress=progress):
                last = int(bt.offset[-1])
                dispatch_batch(store, bt, topics, states if what == "cq" else None, rebuilder, None, delay,
                               ctx.staging, topic=topic, queue=queue, skip=skip)
        for r in (records(walk) if records is not None else ()):
            last = r.offset
            if progress:
                progress.advance(r.total_size)
            if what == "cq":
                if not D.goes_to_consume_queue(r.sys_flag):
                    continue
                if skip is not None and skip.skips(r.topic):
                    skip.count(r.topic)
                    continue
                code = RC.tags_code(r.topic, r.properties, r.store_timestamp, delay)
                # the record's own unit (through the ext), then its multi-dispatch (LMQ) targets' units
                units = [(r.topic, r.queue_id, r.queue_offset, r.store_timestamp)]
                if multi and "INNER_MULTI_QUEUE_OFFSET" in r.properties:
                    units += [(n, q, o, -1) for n, q, o in D.lmq_targets(r.topic, r.queue_id, r.properties, lmq)]
                for t, q, qo, ts in units:
                    if (topic is not None and t != topic) or (queue is not None and q != queue):
                        continue
                    st = states.get((t, q))
                    if st is None:
                        st = states[(t, q)] = new_queue_state(store, ctx.staging, t, q)
                    st.put(r.offset, r.total_size, code, qo, ts)
            elif skip is not None and skip.skips(r.topic):
                skip.count(r.topic)
            else:
                rebuilder.dispatch(r.offset, r.store_timestamp, r.sys_flag, r.topic, r.properties)
    except BaseException:
        if rebuilder:
            rebuilder.abort()
        raise
    stop = walk.ends[-1].stop if walk.ends else None
    end = stop.offset if stop is not None else (files[0].start if files else 0)
    ctx.cut, ctx.last_valid = end, last
    plan.commitlog = {"scan_start": files[0].start if files else 0, "valid_end": end,
                      "stop": {"kind": stop.kind, "detail": stop.detail} if stop else None}
    if stop is not None and stop.kind not in (END, BLANK_RECORD, ZEROS):
        plan.notes.append(f"the commitlog has a corrupt record at {end} ({stop.kind}); the rebuild covers the "
                          "records before it, like the broker's recovery would (run `rmqctl recover`)")
    if skip is not None:
        plan.topics["skipped"] = dict(sorted(skip.counts.items()))
        if skip.counts:
            unit = "consume-queue units" if what == "cq" else "records"
            plan.notes.append(
                f"{len(skip.counts)} topic(s) absent from {skip.source} skipped (deleted topics; "
                "--include-deleted-topics keeps them): "
                + ", ".join(f"{t} ({n} {unit})" for t, n in sorted(skip.counts.items())))
        if untouched:
            plan.notes.append("existing consume queues of skipped topics left as they are: " + ", ".join(untouched))
    else:
        plan.notes.append(why)
    if what == "cq":
        for (t, q), st in sorted(states.items()):
            for start, staged in st.finish_files():
                path = st.path_for(start)
                plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                                f"consume queue {t}/{q} regenerated ({st.added} units)", group="consumequeue",
                                payload=(path, staged)))
            for f in st.delete_files():
                plan.add(Action("delete_file", rel_path(store, f.path), f"consume queue {t}/{q}: no record of the "
                                "commitlog belongs in this file", group="consumequeue", payload=f.path))
            ext_actions(store, plan, st, t, q)
        plan.summary = {"queues": len(states), "units": sum(s.added for s in states.values())}
    else:
        built = rebuilder.finish()
        names = set()
        for b in built:
            names.add(b.name)
            path = store.index_dir / b.name
            staged = Path(b.path)
            if path.exists() and same_file(path, staged):
                staged.unlink()
                continue
            plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                            f"index file regenerated ({b.index_count - 1} items)", group="index",
                            payload=(path, staged)))
        for p in store.index_files():
            if p.name not in names:
                plan.add(Action("delete_file", rel_path(store, p), "index file not produced by the regeneration",
                                group="index", payload=p))
        plan.summary = {"index_files": len(built), "items": rebuilder.items}
    return ctx
