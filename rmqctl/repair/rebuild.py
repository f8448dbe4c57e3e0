"""`rebuild cq|index`: regenerate consume queues or index files from every valid commitlog record,
byte-identical to the broker's (docs/recovery.md, "Rebuild")."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqctl import dispatch as D
from rmqctl.repair import batchcq as BQ
from rmqctl.repair import parallel as P
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.batch_dispatch import HeldWindows, dispatch_batch, new_queue_state, take_undispatchable
from rmqctl.repair.layout_checks import check_layout
from rmqctl.repair.plan import Action, Ctx, Plan, rel_path
from rmqctl.repair.queue_actions import ext_actions
from rmqctl.repair.rebuild_index import IndexRebuilder
from rmqctl.repair.sparse import same_file
from rmqctl.scan import BLANK_RECORD, END, ZEROS
from rmqctl.store.commitlog import Walk


@dataclass
class Rebuild:
    """What the phases of analyze_rebuild share."""

    store: object
    what: str                       # cq | index
    ctx: Ctx
    topic: str | None = None        # rebuild cq --topic
    queue: int | None = None        # rebuild cq --queue
    skip: object = None             # topic_filter.TopicFilter, None: every topic kept
    why: str = ""                   # why topics are (not) filtered
    states: dict = field(default_factory=dict)     # (topic, queue id) -> rebuild_cq.QueueState
    untouched: list = field(default_factory=list)  # existing queues of skipped topics: left as they are
    rebuilder: IndexRebuilder | None = None
    multi: bool = False             # multi-dispatch (LMQ) on: records may feed more queues
    lmq: bool = False
    jobs: int = 1                   # -j: processes for the commitlog walk (rmqctl.repair.parallel)

    @property
    def plan(self) -> Plan:
        return self.ctx.plan


def analyze_rebuild(store, what: str, staging: Path, *, topic: str | None = None, queue: int | None = None,
                    progress=None, include_deleted_topics: bool = False, records=None, jobs: int = 1) -> Ctx:
    """Regenerate consume queues or index files from every valid commitlog record (from the first file
    to the first record the broker's recovery would stop at), build them in `staging`, and plan to
    swap in the files whose bytes differ. Records of topics absent from config/topics.json are left
    out unless include_deleted_topics (rmqctl.repair.topic_filter).

    records: None walks the commitlog here with the batch kernel; otherwise `records(walk)` yields the
    same records one by one (the Spark engine streams them from its tasks) and fills walk.ends.
    jobs > 1: the walk is split over that many processes (rmqctl.repair.parallel), the files the same."""
    rb = Rebuild(store, what, Ctx(Plan(store=str(store.root), abort=store.abort_exists), Path(staging)),
                 topic=topic, queue=queue, jobs=jobs)
    check_layout(store, rb.plan)
    if rb.plan.problems:
        return rb.ctx
    _topic_filter(rb, include_deleted_topics)
    _start_builders(rb)
    walk = Walk()
    try:
        last = _feed(rb, walk, progress, records)
    except BaseException:
        if rb.rebuilder:
            rb.rebuilder.abort()
        raise
    _record_end(rb, walk, last)
    take_undispatchable(rb.states, rb.plan.notes)
    _topic_notes(rb)
    if what == "cq":
        _queue_actions(rb)
    else:
        _index_actions(rb)
    return rb.ctx


def _topic_filter(rb: Rebuild, include_deleted_topics: bool) -> None:
    from rmqctl.repair.topic_filter import load_filter

    rb.skip, rb.why = (None, "--include-deleted-topics: every topic is kept") if include_deleted_topics \
        else load_filter(rb.store)
    rb.plan.topics = {"checked_against": rb.skip.source if rb.skip else None, "why": rb.why, "skipped": {}}


def _start_builders(rb: Rebuild) -> None:
    """cq: a state per existing queue the rebuild covers; index: a rebuilder keeping the files' names."""
    store, skip, cfg = rb.store, rb.skip, rb.store.config
    rb.multi, rb.lmq = D.multi_dispatch_on(cfg), D.lmq_on(cfg)
    if rb.what == "cq":
        for t, q in BQ.queues(store):
            if (rb.topic is None or t == rb.topic) and (rb.queue is None or q == rb.queue):
                if skip is not None and skip.skips(t):
                    rb.untouched.append(f"{t}/{q}")
                    skip.counts.setdefault(t, 0)
                    continue
                rb.states[(t, q)] = new_queue_state(store, rb.ctx.staging, t, q)
        return
    (rb.ctx.staging / "index").mkdir(parents=True, exist_ok=True)
    rb.rebuilder = IndexRebuilder(rb.ctx.staging / "index", cfg.hash_slot_num, cfg.index_num,
                                  [p.name for p in store.index_files()])
    if cfg.index_geometry_files is None and not {"hash_slot_num", "index_num"} & cfg.explicit:
        rb.plan.notes.append(f"no index file tells its geometry: new files get maxHashSlotNum {cfg.hash_slot_num}, "
                             f"maxIndexNum {cfg.index_num}; give the broker's config (--config) if it sets others")


def _feed(rb: Rebuild, walk: Walk, progress, records) -> int | None:
    """Every valid record into the builders: batches of the local walk, or the records `records(walk)`
    streams (Spark). Returns the offset of the last record."""
    last = None
    if records is None and rb.jobs > 1 and (rb.what == "index" or P.splittable(rb.store)):
        P.walk(rb.store, rb.store.commitlog.files, jobs=rb.jobs, walk=walk, progress=progress,
               sink=P.Dispatch(rb.store, rb.states if rb.what == "cq" else None, rb.rebuilder, None, rb.ctx.staging,
                               topic=rb.topic, queue=rb.queue, skip=rb.skip))
        return P.last_record(walk)
    if records is None:
        from rmqctl.repair import vecdispatch as VD

        topics = VD.Topics()
        states = rb.states if rb.what == "cq" else None
        held = HeldWindows(rb.store, topics, states, rb.ctx.staging)
        for bt in VD.batches(rb.store, rb.store.commitlog.files, walk=walk, progress=progress):
            last = int(bt.offset[-1])
            dispatch_batch(rb.store, bt, topics, states, rb.rebuilder, None, rb.store.config.delay_levels,
                           rb.ctx.staging, topic=rb.topic, queue=rb.queue, skip=rb.skip, held=held)
        held.flush()
        return last
    for r in records(walk):
        last = r.offset
        if progress:
            progress.advance(r.total_size)
        if rb.skip is not None and (rb.what == "index" or D.goes_to_consume_queue(r.sys_flag)) \
                and rb.skip.skips(r.topic):
            rb.skip.count(r.topic)
        elif rb.what == "cq":
            if D.goes_to_consume_queue(r.sys_flag):
                _put_record(rb, r)
        else:
            rb.rebuilder.dispatch(r.offset, r.store_timestamp, r.sys_flag, r.topic, r.properties)
    return last


def _put_record(rb: Rebuild, r) -> None:
    """One record's consume-queue units: its own, then its multi-dispatch (LMQ) targets'."""
    code = RC.tags_code(r.topic, r.properties, r.store_timestamp, rb.store.config.delay_levels)
    units = [(r.topic, r.queue_id, r.queue_offset, r.store_timestamp)]
    if rb.multi and "INNER_MULTI_QUEUE_OFFSET" in r.properties:
        units += [(n, q, o, -1) for n, q, o in D.lmq_targets(r.topic, r.queue_id, r.properties, rb.lmq)]
    for t, q, qo, ts in units:
        if (rb.topic is not None and t != rb.topic) or (rb.queue is not None and q != rb.queue):
            continue
        st = rb.states.get((t, q))
        if st is None:
            st = rb.states[(t, q)] = new_queue_state(rb.store, rb.ctx.staging, t, q)
        st.put(r.offset, r.total_size, code, qo, ts, r.properties)


def _record_end(rb: Rebuild, walk: Walk, last) -> None:
    files = rb.store.commitlog.files
    stop = walk.ends[-1].stop if walk.ends else None
    end = stop.offset if stop is not None else (files[0].start if files else 0)
    rb.ctx.cut, rb.ctx.last_valid = end, last
    rb.plan.commitlog = {"scan_start": files[0].start if files else 0, "valid_end": end,
                         "stop": {"kind": stop.kind, "detail": stop.detail} if stop else None}
    if stop is not None and stop.kind not in (END, BLANK_RECORD, ZEROS):
        rb.plan.notes.append(f"the commitlog has a corrupt record at {end} ({stop.kind}); the rebuild covers the "
                             "records before it, like the broker's recovery would (run `rmqctl recover`)")


def _topic_notes(rb: Rebuild) -> None:
    plan, skip = rb.plan, rb.skip
    if skip is None:
        plan.notes.append(rb.why)
        return
    plan.topics["skipped"] = dict(sorted(skip.counts.items()))
    if skip.counts:
        unit = "consume-queue units" if rb.what == "cq" else "records"
        plan.notes.append(
            f"{len(skip.counts)} topic(s) absent from {skip.source} skipped (deleted topics; "
            "--include-deleted-topics keeps them): "
            + ", ".join(f"{t} ({n} {unit})" for t, n in sorted(skip.counts.items())))
    if rb.untouched:
        plan.notes.append("existing consume queues of skipped topics left as they are: " + ", ".join(rb.untouched))


def _queue_actions(rb: Rebuild) -> None:
    store, plan = rb.store, rb.plan
    for (t, q), st in sorted(rb.states.items()):
        for start, staged in st.finish_files():
            path = st.path_for(start)
            plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                            f"consume queue {t}/{q} regenerated ({st.added} units)", group="consumequeue",
                            payload=(path, staged)))
        for f in st.delete_files():
            plan.add(Action("delete_file", rel_path(store, f.path), f"consume queue {t}/{q}: no record of the "
                            "commitlog belongs in this file", group="consumequeue", payload=f.path))
        ext_actions(store, plan, st, t, q)
    plan.summary = {"queues": len(rb.states), "units": sum(s.added for s in rb.states.values())}
    from rmqctl.repair import compaction as RCMP

    RCMP.rebuild_plan(store, rb.ctx, topic=rb.topic, queue=rb.queue)


def _index_actions(rb: Rebuild) -> None:
    store, plan = rb.store, rb.plan
    built = rb.rebuilder.finish()
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
    plan.summary = {"index_files": len(built), "items": rb.rebuilder.items}
