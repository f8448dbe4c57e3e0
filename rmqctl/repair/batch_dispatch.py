"""The broker's dispatch (CommitLogDispatcherBuildConsumeQueue / BuildIndex) on scanvec batches: consume-queue
units grouped by queue, multi-dispatch (LMQ) targets, index items hashed in bulk, placeholder units for
quarantined ranges; and pass 2 of recover, which walks the valid segments through it."""
from __future__ import annotations

from pathlib import Path

from rmqctl import dispatch as D
from rmqctl.errors import ProblemsFound
from rmqctl.formats import commitlog as clf
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.repair import batchcq as BQ
from rmqctl.repair import queue_state as QS
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.fillers import QUARANTINE_TOPIC
from rmqctl.repair.rebuild_index import IndexRebuilder
from rmqctl.scan import BLANK_RECORD, END
from rmqctl.store.commitlog import Walk


def dispatch_pass2(store, files, segments, scan_start, states, idx, ctx, cfg):
    rebuilder = None
    if idx is not None:
        (ctx.staging / "index").mkdir(parents=True, exist_ok=True)
        rebuilder = IndexRebuilder(ctx.staging / "index", cfg.hash_slot_num, cfg.index_num, idx["names"],
                                   prev=idx["prev"], prev_name=idx["prev_name"], skip_keys_at=idx["skip"])
    try:
        dispatch_segments(store, files, segments, scan_start, states, rebuilder, ctx.fillers, idx, ctx.staging)
        built = rebuilder.finish() if rebuilder else []
    except BaseException:
        if rebuilder:
            rebuilder.abort()
        raise
    return states, built


def dispatch_segments(store, files, segments, validated_from, states, rebuilder, fillers, idx, staging) -> None:
    from rmqctl.repair import vecdispatch as VD

    cfg = store.config
    fill_at = {f.start: f for f in fillers}
    idx_from = idx["from"] if idx is not None else None
    topics = VD.Topics()
    held = HeldWindows(store, topics, states, staging)
    for _si, (a, b) in enumerate(segments):
        walk = Walk()
        # Records before the broker's start file are trusted like the broker trusts them (its reput
        # does not check CRCs either); everything from the start file on was validated by pass 1.
        for bt in VD.batches(store, files, a, b, check_crc=False, walk=walk):
            dispatch_batch(store, bt, topics, states, rebuilder, idx_from, cfg.delay_levels, staging, fillers=fillers,
                           held=held)
        held.flush()
        stop = walk.ends[-1].stop if walk.ends else None
        if a < validated_from and stop is not None and stop.offset < min(b, validated_from) \
                and stop.kind not in (END, BLANK_RECORD):
            raise ProblemsFound(f"corrupt record before the broker's recovery start file ({stop.kind}: "
                                f"{stop.detail}); run `rmqctl recover --from-start`", offset=stop.offset)
        f = fill_at.get(b)
        if f is not None and f.kind == "record" and rebuilder is not None and f.start >= idx_from:
            rebuilder.dispatch(f.start, f.store_ts, clf.TRANSACTION_ROLLBACK_TYPE, QUARANTINE_TOPIC, {})


def new_queue_state(store, staging, topic, qid):
    if not D.names_a_directory(topic):
        return Undispatchable(topic, qid)
    st = QS.empty_state(store, topic, qid)
    st.stage_dir = Path(staging).joinpath("cq", topic, str(qid))
    return st


class Undispatchable:
    """A queue whose topic cannot name a directory (rmqctl.dispatch.names_a_directory): its units are counted
    and no file is planned. Taken out of the states when the dispatch is over (take_undispatchable)."""

    base = ext = stage_dir = None
    batch_cq = False

    def __init__(self, topic: str, queue_id: int):
        self.topic, self.queue_id = topic, queue_id
        self.max_phys, self.end, self.added, self.units = -1, 0, 0, 0

    def put(self, *_a, **_k) -> None:
        self.units += 1

    def put_many(self, phys, *_a) -> None:
        self.units += len(phys)


def take_undispatchable(states: dict, notes: list) -> dict:
    """Removes the Undispatchable queues from `states`; a note names their topics. Returns {topic: units}."""
    gone: dict = {}
    for k in [k for k, st in states.items() if isinstance(st, Undispatchable)]:
        st = states.pop(k)
        gone[st.topic] = gone.get(st.topic, 0) + st.units
    if gone:
        notes.append(f"{sum(gone.values())} consume-queue unit(s) not dispatched: their topic name cannot be a "
                     "consume-queue directory (damaged topic bytes, which no CRC covers; the broker's own dispatch "
                     "of them fails): " + ", ".join(f"{t!r} ({n})" for t, n in sorted(gone.items())))
    return gone


def dispatch_batch(store, bt, topics, states, rebuilder, idx_from, delay, staging, *, fillers=(),
                   topic=None, queue=None, create=True, skip=None, held=None) -> None:
    """CommitLogDispatcherBuildConsumeQueue and BuildIndex for one scanvec batch. `states` None: no
    consume queues; `rebuilder` None: no index; idx_from: first commitlog offset the index takes.
    topic/queue restrict the consume queues built (rebuild cq --topic/--queue); skip: a
    topic_filter.TopicFilter whose skipped topics are neither queued nor indexed (rebuild, F21).
    held: a HeldWindows the units may wait in (the caller flushes it before it reads `states`)."""
    import numpy as np

    from rmqctl.repair import vecdispatch as VD

    props = None
    tids = topics.of(bt)
    if states is not None:
        rows = np.flatnonzero(VD.cq_mask(bt))
        if skip is not None:
            rows = skip.drop(rows, tids, topics)
        multi = None
        if len(rows) and _may_multi_dispatch(bt) and D.multi_dispatch_on(store.config):
            props = VD.props_of(bt)
            multi = VD.multi_targets(bt, props, rows, tids, topics, D.lmq_on(store.config))
        if multi is not None:
            if held is not None:
                held.flush()
            _dispatch_multi(store, bt, topics, tids, states, rows, multi, props, delay, staging, topic, queue, create)
            rows = rows[:0]
        if topic is not None:
            ok = np.asarray([n == topic for n in topics.names], bool)
            rows = rows[ok[tids[rows]]]
        if queue is not None:
            rows = rows[bt.queue_id[rows] == queue]
        if len(rows):
            keys = (tids[rows] << 32) | (bt.queue_id[rows] & 0xFFFFFFFF)
            if props is None:
                props = VD.props_of(bt)
            all_codes = VD.tags_codes(bt, props, tids, topics, delay, rows)    # once for the window's queues
            record = getattr(states, "record_window", None)    # a -j worker (repair.parallel): recorded
            if record is None and held is not None and held.on and not fillers and create:
                record = held.add
            if record is not None:
                record(bt, rows, keys, all_codes)
            else:
                if held is not None:
                    held.flush()    # what was held goes first
                _put_groups(store, bt, topics, states, rows, keys, all_codes, props, staging, fillers, create)
    if rebuilder is not None:
        offs = bt.offset
        i0 = int(np.searchsorted(offs, idx_from, "left")) if idx_from is not None else 0
        if i0 < len(offs):
            rows = np.arange(i0, len(offs), dtype=np.int64)
            if skip is not None:
                rows = skip.drop(rows, tids, topics)
        if i0 < len(offs) and len(rows):
            if props is None:
                props = VD.props_of(bt)
            item_row, item_hash = VD.index_items(bt, props, tids, topics, rows)
            rebuilder.dispatch_many(offs[rows], bt.store_timestamp[rows], item_row, item_hash)


def window_entry(bt, rows, keys, codes) -> tuple:
    """What put_windows needs of a window's consume-queue rows (keys: topic id << 32 | queue id)."""
    return (keys, bt.queue_id[rows], bt.offset[rows], bt.total_size[rows], codes, bt.queue_offset[rows],
            bt.store_timestamp[rows])


def put_windows(store, topics, states, entries, staging) -> None:
    """_put_groups over consecutive windows' entries (window_entry) joined into one: each queue's units stay in
    commitlog order (the grouping sort is stable), and the per-queue work is done once for all the windows."""
    import types

    import numpy as np

    keys, qid, offs, sizes, codes, qoffs, ts = (np.concatenate(c) for c in zip(*entries)) if len(entries) > 1 \
        else entries[0]
    bt = types.SimpleNamespace(queue_id=qid, offset=offs, total_size=sizes, queue_offset=qoffs, store_timestamp=ts)
    _put_groups(store, bt, topics, states, np.arange(len(keys)), keys, codes, None, staging, (), True)


class HeldWindows:
    """Consume-queue rows of consecutive windows held back and appended together (put_windows): on a store of
    many queues the per-queue work of each 4 MiB window outweighed the units it appended. Held only where the
    window's rows say all a queue needs (no batch consume queues, no fillers); bounded by HOLD_ROWS."""

    HOLD_ROWS = 1 << 17     # ~7 MB of columns; about 128 MiB of 1 KiB records

    def __init__(self, store, topics, states, staging):
        self.store, self.topics, self.states, self.staging = store, topics, states, staging
        self.on = states is not None and not BQ.any_batch(store)
        self.entries: list = []
        self.rows = 0

    def add(self, bt, rows, keys, codes) -> None:
        self.entries.append(window_entry(bt, rows, keys, codes))
        self.rows += len(rows)
        if self.rows >= self.HOLD_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.entries:
            entries, self.entries, self.rows = self.entries, [], 0
            put_windows(self.store, self.topics, self.states, entries, self.staging)


def _put_groups(store, bt, topics, states, rows, keys, codes, props, staging, fillers, create) -> None:
    """Append each queue's units of the window (rows grouped by key = topic id << 32 | queue id). The usual
    case -- the queue has units already, queue offsets not behind its write end, no ext, batch queue or
    fillers -- is decided for all queues of the window with array operations and each such queue gets one
    slice of the window's packed units; any other queue takes _put_group (QueueState.put_many / put). The
    per-queue work stays a few Python operations, whatever the number of queues in the window."""
    import numpy as np

    from rmqctl.kernels import rebuild_kernel

    nbk = rebuild_kernel()
    grouped = nbk.group_queues(keys) if nbk is not None and len(keys) else None
    if grouped is not None:
        # compiled: grouped in one pass (no sort of the rows), decided and packed in another
        gid, rank, first = grouped
        heads = rows[first]
        if len(rows) == len(bt.offset):     # every row of the batch (rows ascend): no gather
            offs, sizes, qoffs = bt.offset, bt.total_size, bt.queue_offset
        else:
            offs, sizes, qoffs = bt.offset[rows], bt.total_size[rows], bt.queue_offset[rows]
    else:
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        srt = rows[order]
        heads = srt[starts]
    ng = len(heads)
    sts = []
    mp = np.full(ng, -1, np.int64)
    wend = np.zeros(ng, np.int64)
    simple = np.zeros(ng, bool)
    for j, (key, q) in enumerate(zip((keys[first] if grouped is not None else k[starts]).tolist(),
                                     bt.queue_id[heads].tolist())):
        t = topics.names[key >> 32]
        st = states.get((t, q))
        if st is None and create:
            st = states[(t, q)] = new_queue_state(store, staging, t, q)
        sts.append(st)
        if st is not None and st.base is not None and st.ext is None and not fillers \
                and not getattr(st, "batch_cq", False):
            simple[j], mp[j], wend[j] = True, st.max_phys, st.end
    if grouped is not None:
        order, bounds, nkeep, fast, last_end, packed = nbk.place_groups(gid, rank, offs, sizes, codes, qoffs, mp,
                                                                        wend, simple)
        starts, stops = bounds[:-1], bounds[1:]
        packed = memoryview(packed)
        if not fast.all():      # the rows of the groups that take the unit-by-unit rules
            srt, codes = rows[order], codes[order]
    else:
        stops = np.r_[starts[1:], len(k)]
        codes = codes[order]
        offs, sizes, qoffs = bt.offset[srt], bt.total_size[srt], bt.queue_offset[srt]
        ends = offs + sizes
        last_end = ends[stops - 1]
        gid = np.repeat(np.arange(ng), stops - starts)
        # units already in the queue (offset + size <= its max physical end) are skipped by the broker: a
        # prefix of each queue's rows (commitlog order)
        keep = ~((mp[gid] >= 0) & (ends <= mp[gid]))
        csum = np.cumsum(keep)
        rank = csum - 1 - np.r_[0, csum[:-1]][starts][gid]
        ok = ~keep | (qoffs == 0) | (qoffs * UNIT_SIZE >= wend[gid] + UNIT_SIZE * rank)
        fast = simple & np.logical_and.reduceat(ok, starts)
        nkeep = np.add.reduceat(keep, starts)
        packed = None
        if fast.any():
            u = np.empty(len(srt), RC._UNIT_DT)
            u["p"], u["s"], u["t"] = offs, sizes, codes
            packed = memoryview(u.tobytes())
    for a, b, n, st, f, e in zip(starts.tolist(), stops.tolist(), nkeep.tolist(), sts, fast.tolist(),
                                 last_end.tolist()):
        if st is None:
            continue
        if not f:
            _put_group(st, bt, props, srt[a:b], codes[a:b], fillers)
        elif n:
            st.out += packed[(b - n) * UNIT_SIZE:b * UNIT_SIZE]
            st.end += UNIT_SIZE * n
            st.max_phys = e
            st.added += n
            if st.stage_dir is not None and st.end - st.out_base >= st.spill_at:
                st.flush_full()


def _put_group(st, bt, props, sel, codes, fillers) -> None:
    """One queue's units of the window, by the broker's rules unit by unit where needed."""
    import numpy as np

    offs, sizes, qoffs = bt.offset, bt.total_size, bt.queue_offset
    if st.max_phys >= 0:
        cut = int(np.searchsorted(offs[sel] + sizes[sel], st.max_phys, "right"))
        sel, codes = sel[cut:], codes[cut:]
        if not len(sel):
            return
    if getattr(st, "batch_cq", False):
        st.put_rows(bt, props, sel, codes, fillers)   # one 46-byte unit per record
    elif fillers:
        for j, c in zip(sel.tolist(), codes.tolist()):
            o, sz, qo = int(offs[j]), int(sizes[j]), int(qoffs[j])
            if st.base is not None and qo * UNIT_SIZE > st.end and o + sz > st.max_phys:
                pad_with_filler(st, o, qo, fillers)
            st.put(o, sz, c, qo, int(bt.store_timestamp[j]))
    else:
        st.put_many(offs[sel], sizes[sel], codes, qoffs[sel], bt.store_timestamp[sel].astype(np.int64))


def _may_multi_dispatch(bt) -> bool:
    """Whether any record may carry multi-dispatch offsets, a prefilter before VD.multi_targets: the numba
    kernel searches the properties fields only (where VD.multi_targets looks), the numpy one the window."""
    from rmqctl.kernels import dispatch_kernel
    from rmqctl.repair import vecdispatch as VD

    nbk = dispatch_kernel()
    if nbk is None:
        return VD.has_multi_dispatch(bt)
    props = VD.props_of(bt)
    if isinstance(props, VD.PropsNB):
        # the properties were read in place already: the records whose field names the offsets
        # (VD.multi_targets looks at those only)
        return bool(props.value(D.MULTI_OFFSET_PROPERTY[:-1])[0].any())
    import numpy as np

    return nbk.any_in_ranges(np.frombuffer(bt.raw, np.uint8), bt.props_rel, bt.props_length,
                             D.MULTI_OFFSET_PROPERTY)


def _dispatch_multi(store, bt, topics, tids, states, rows, multi, props, delay, staging, topic, queue,
                    create) -> None:
    """dispatch_batch's consume queues for a batch with multi-dispatched records (LMQ, 4.9 plain-topic
    multi-dispatch): every record's own unit plus one unit per target queue at the target's queue offset
    with the record's tagsCode, each queue's units in commitlog order (a queue may get both)."""
    import numpy as np

    from rmqctl.repair import vecdispatch as VD

    codes = VD.tags_codes(bt, props, tids, topics, delay, rows)
    pos, xt, xq, xo = multi
    sel = np.concatenate((np.arange(len(rows)), pos))
    tid = np.concatenate((tids[rows], xt))
    qid = np.concatenate((bt.queue_id[rows].astype(np.int64), xq))
    qoff = np.concatenate((bt.queue_offset[rows].astype(np.int64), xo))
    ts = np.concatenate((bt.store_timestamp[rows].astype(np.int64), np.full(len(pos), -1, np.int64)))
    keep = np.ones(len(sel), bool)
    if topic is not None:
        keep &= np.asarray([n == topic for n in topics.names], bool)[tid]
    if queue is not None:
        keep &= qid == queue
    sel, tid, qid, qoff, ts = sel[keep], tid[keep], qid[keep], qoff[keep], ts[keep]
    phys = bt.offset[rows].astype(np.int64)[sel]
    size = bt.total_size[rows].astype(np.int64)[sel]
    code = codes[sel]
    key = (tid << 32) | (qid & 0xFFFFFFFF)
    order = np.lexsort((phys, key))
    key, phys, size, code, qoff, qid, ts = (key[order], phys[order], size[order], code[order], qoff[order],
                                            qid[order], ts[order])
    for k, g in VD.groups(key):
        t, q = topics.names[k >> 32], int(qid[g[0]])
        st = states.get((t, q))
        if st is None:
            if not create:
                continue
            st = states[(t, q)] = new_queue_state(store, staging, t, q)
        st.put_many(phys[g], size[g], code[g], qoff[g], ts[g])


def pad_with_filler(st, offset, queue_offset, fillers) -> None:
    cands = [f for f in fillers if f.kind == "record" and st.max_phys <= f.start < offset]
    if not cands:
        return
    f = cands[-1]
    while st.end < queue_offset * UNIT_SIZE:
        st.out += RC.UNIT.pack(f.start, f.end - f.start, 0)
        st.end += UNIT_SIZE
        st.added += 1
