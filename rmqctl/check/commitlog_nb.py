"""verify's per-batch commitlog checks on the numba kernel (rmqctl.kernels.verify_nb): the same findings and
queue tracks as RangeScan's numpy path (rmqctl.check.commitlog_batch), with the per-record work compiled and
only what is rare decided here, by the same code. A batch holding what the compiled path does not cover
(INNER_BATCH records, multi-dispatch offsets) returns False and runs the numpy path: both paths keep the same
per-queue state, so they can alternate batch by batch (RMQCTL_KERNEL=auto switches kernels mid-walk)."""
from __future__ import annotations

import numpy as np

from rmqctl.check.findings import ERROR, Finding
from rmqctl.dispatch import SCHEDULE_TOPIC, UNDECODABLE, tags_code
from rmqctl.formats import commitlog as clf
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.formats.properties import parse_properties
from rmqctl.kernels import verify_nb as vk


class NbState:
    """What the compiled path keeps per RangeScan besides the shared per-queue state."""

    def __init__(self):
        self.topics = vk.TopicTable()
        self.mark = np.full(64, -1, np.int64)


def batch(scan, bt, n: int, b, off, tot) -> bool:
    """Check the first n records of a scanvec batch (the header totals are already counted); False: not
    done, the numpy path must run this batch."""
    st = scan.nb_state
    if st is None:
        st = scan.nb_state = NbState()
    raw = bt.raw
    prel, plen = bt.props_rel[:n], bt.props_length[:n]
    flags = np.empty(n, np.int8)
    rtags = np.empty(n, np.int64)
    vk.props_scan(b, b[:len(b) // 8 * 8].view(np.uint64), prel, plen, flags, rtags)
    sysf = bt.sys_flag[:n]
    disp = (sysf & 0x4) == 0
    if (disp & ((sysf & clf.INNER_BATCH_FLAG) != 0)).any() or (scan.ctx.multi_dispatch
                                                               and (flags & vk.MULTI).any()):
        return False
    trel, tlen = bt.topic_rel[:n], bt.topic_length[:n]
    tid = np.empty(n, np.int64)
    tbad = np.empty(n, np.bool_)
    i = 0
    while (i := st.topics.lookup(b, trel, tlen, i, tid, tbad)) < n:
        a = int(trel[i])
        tb = bytes(raw[a:a + int(tlen[i])])
        tn, ok = scan._topic_bytes(tb)
        st.topics.add(tb, tn, not ok)
    late: list = []
    if tbad.any():
        for i in np.flatnonzero(tbad).tolist():
            late.append((i, 0, Finding(ERROR, "commitlog.topic", scan.path, int(off[i]), "UTF-8 topic",
                                       repr(scan.topics[int(tid[i])]), "topic bytes are not valid UTF-8")))
    sus = np.flatnonzero(flags & vk.SUSPICIOUS)
    for i in sus.tolist():
        a = int(prel[i])
        scan._props_finding(i, bytes(raw[a:a + int(plen[i])]), int(off[i]), late)
    if late:
        late.sort(key=lambda x: (x[0], x[1]))
        scan.res.findings.extend(f for _, _, f in late)
    if not disp.any():
        return True
    rec = np.flatnonzero(disp) if not disp.all() else np.arange(n)
    tn = tid[rec]
    qid = bt.queue_id[:n][rec]
    qoff = bt.queue_offset[:n][rec]
    offs, tots = off[rec], tot[rec]
    g = np.empty(len(rec), np.int64)
    if vk.queue_numbers(tn, qid, scan.qk_sorted, scan.qk_num, g):
        key = (tn << 32) | (qid & 0xFFFFFFFF)
        for k in np.unique(key[g < 0]).tolist():
            if k not in scan.qnum:
                scan._new_queue(k)
        items = sorted(scan.qnum.items())
        scan.qk_sorted = np.array([k for k, _ in items], np.int64)
        scan.qk_num = np.array([v for _, v in items], np.int64)
        vk.queue_numbers(tn, qid, scan.qk_sorted, scan.qk_num, g)
    prev = np.empty(len(g), np.int64)
    for r in vk.track(g, qoff, offs, scan.first_q, scan.last_q, scan.next_q, scan.count, scan.first_phys,
                      scan.gaps, prev).tolist():
        q = int(g[r])
        if q not in scan.first_gap:
            scan.first_gap[q] = (int(offs[r]), int(prev[r]), int(qoff[r]))
    if scan.cq_slow is not None:
        _compare(scan, st, bt, rec, flags, rtags, tn, g, qid, qoff, offs, tots)
    return True


def _tags(scan, bt, rec, flags, rtags, tn, cmpt):
    """tagsCode of every row (as RangeScan._tags / tags_code): the kernel's hash where it is sure, else
    decided here."""
    raw = bt.raw
    tags = rtags[rec]
    odd = flags[rec] & (vk.TAGS_PARSE | vk.TAGS_VALUE)
    want = (odd != 0) & cmpt
    sched = None
    if any(scan.topic_sched):
        sched = np.array(scan.topic_sched, bool)[tn] & cmpt
        want |= sched
    rows = np.flatnonzero(want) if want.any() else ()
    for k in (rows.tolist() if len(rows) else ()):
        i = int(rec[k])
        a = int(bt.props_rel[i])
        sl = raw[a:a + int(bt.props_length[i])]
        if sched is not None and sched[k]:
            tags[k] = tags_code(SCHEDULE_TOPIC, parse_properties(sl), int(bt.store_timestamp[i]),
                                scan.ctx.delay_levels)
            continue
        v = None
        if odd[k] == vk.TAGS_VALUE:
            p = bytes(sl)
            s = p.find(b"TAGS\x01") + 5
            e = p.find(b"\x02", s)
            v = scan._tag_value(p[s:] if e < 0 else p[s:e])
        if v is None or v == UNDECODABLE:
            v = scan._hash(parse_properties(sl).get("TAGS"))
        tags[k] = v
    return tags


def _compare(scan, st, bt, rec, flags, rtags, tn, g, qid, qoff, offs, tots) -> None:
    """Each row's consume-queue unit against the record (RangeScan._compare / _units)."""
    cmpt = np.array(scan.topic_cmp, bool)[tn]
    if not cmpt.any():
        return
    tags = _tags(scan, bt, rec, flags, rtags, tn, cmpt)
    nrow = len(g)
    if len(st.mark) < len(scan.qkeys):
        st.mark = np.full(scan.cap, -1, np.int64)
    lq = np.empty(nrow, np.int64)
    order, qmin, qmax, cnt = (np.empty(nrow, np.int64) for _ in range(4))
    m = vk.local_queues(g, cmpt, qoff, lq, order, qmin, qmax, cnt, st.mark)
    w_start, w_base, w_j0, w_end, todo = (np.zeros(m, np.int64) for _ in range(5))
    preset = np.zeros(nrow, np.bool_)
    pp, ps, pt = (np.zeros(nrow, np.int64) for _ in range(3))
    pool = scan.cq_pool
    pool.trim()     # no place in the pool is in use between batches
    cqfs = scan.ctx.cq_file_size
    # the queues whose cached piece holds their units are planned compiled; Python reads the others' pieces
    # (once per queue and read-ahead, not per batch) or looks their units up one at a time
    k = vk.plan(order, qmin, qmax, cnt, m, cqfs, pool.f0, pool.p0, pool.n, pool.at, w_start, w_base, w_j0, w_end,
                todo)
    for x in todo[:k].tolist():
        q, lo, hi = int(order[x]), int(qmin[x]), int(qmax[x])
        if w_end[x] == -1:
            t, qi = scan.qkeys[q]
            topic = scan.topics[t]
            for r in np.flatnonzero(lq == x).tolist():
                u = scan.cq_slow.unit(topic, qi, int(qoff[r]))
                if u is not None:
                    preset[r] = True
                    pp[r], ps[r], pt[r] = u
            continue
        b0, b1 = lo * UNIT_SIZE, hi * UNIT_SIZE
        f0 = b0 - b0 % cqfs
        scan._cq_read(q, f0, b0 - f0, b1 - f0 + UNIT_SIZE)
        w_base[x], w_j0[x], w_end[x], w_start[x] = f0 + int(pool.p0[q]), 0, int(pool.n[q]), int(pool.at[q])
    units = pool.buf        # read after the reads above: the pool may have grown (places kept)
    up, us, ut = (np.empty(nrow, np.int64) for _ in range(3))
    floor = scan.ext_floor
    ev = vk.compare(lq, g, qoff, offs, tots, tags, units, w_start, w_base, w_j0, w_end, preset, pp, ps, pt,
                    floor is not None, 0 if floor is None else floor, scan.missing, scan.mismatches, up, us, ut)
    for kind, r in ev.tolist():
        q = int(g[r])
        if kind == 0:
            if q not in scan.first_missing:
                scan.first_missing[q] = (int(offs[r]), int(qoff[r]))
        elif q not in scan.first_mismatch:
            scan.first_mismatch[q] = (int(qoff[r]), (int(offs[r]), int(tots[r]), int(tags[r])),
                                      (int(up[r]), int(us[r]), int(ut[r])))
