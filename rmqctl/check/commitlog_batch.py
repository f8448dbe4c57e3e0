"""verify's per-record commitlog checks on scanvec batches, as array operations: topics and TAGS per
distinct string, properties structure, queue-offset continuity, and each record against its
consume-queue unit (see the module doc of rmqctl.check.commitlog)."""
from __future__ import annotations

import os

import numpy as np

from rmqctl.check.commitlog_end import classify_end
from rmqctl.check.commitlog_results import FileResult, QueueTrack, ScanContext
from rmqctl.check.cq_units import CqPool, CqReader, pread_or_empty
from rmqctl.check.findings import ERROR, Finding
from rmqctl.check.interner import Interner
from rmqctl.dispatch import MULTI_OFFSET_PROPERTY as _MULTI_OFFSET
from rmqctl.dispatch import SCHEDULE_TOPIC, UNDECODABLE, lmq_targets, tags_code
from rmqctl.formats import commitlog as clf
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.formats.index import java_string_hash
from rmqctl.formats.properties import parse_properties
from rmqctl.store.files import inside




def utf8_ok(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def props_problem(raw: bytes) -> str | None:
    """Structural problems the broker would silently swallow (F02): invalid UTF-8, a segment without
    a name/value separator, an empty name."""
    if not raw:
        return None
    if not utf8_ok(raw):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"invalid UTF-8 at properties byte {e.start}"
    for seg in raw.split(b"\x02")[:-1] if raw.endswith(b"\x02") else raw.split(b"\x02"):
        i = seg.find(b"\x01")
        if i <= 0:
            return f"segment {seg[:40]!r} has no name/value separator" if i < 0 else "empty property name"
    return None


def _nb_batch():
    """rmqctl.check.commitlog_nb.batch when the numba kernel is in use (RMQCTL_KERNEL), else None."""
    from rmqctl.kernels import walk_kernel

    if walk_kernel() is None:
        return None
    f = _NB.get("batch", False)
    if f is False:
        try:
            from rmqctl.check import commitlog_nb
            from rmqctl.kernels import verify_nb

            verify_nb.warm()    # every kernel loaded (or compiled) now, with the types verify passes
            f = commitlog_nb.batch
        except Exception:   # noqa: BLE001 -- a numba that cannot build these: the numpy path, silently
            f = None
        _NB["batch"] = f
    return f


_NB: dict = {}


def preload() -> None:
    """Load the numba kernel's verify checks now when it is in use (before verify's workers fork)."""
    _nb_batch()


# store root (as ScanContext.root) -> the (topic, queue id) whose directory the store's listing reached through no
# link (Store.queue_dir_plain): set by verify around its commitlog pass, inherited by the workers it forks
PLAIN_QUEUES: dict = {}

CQ_CACHE_BYTES = 32 << 20     # consume-queue units read ahead, shared by the queues met so far (the pool: 2x at
# most, and what one batch reads on top)
CQ_AHEAD_MAX = 1 << 20
_QMAX = ((1 << 62) - 1) // UNIT_SIZE     # a larger queue offset's byte position is absurd (a damaged QUEUEOFFSET)

# the numba path's window: small enough to stay in the L2/L3 caches from the walk to the checks after it, large
# enough that the per-window Python work is paid few times (measured on 4 and 32 queues: 4 MiB beat 2 and 8;
# earlier, on 4 queues: 8 MiB 1.29, 2 MiB 1.13-1.19, 512 KiB 1.40-1.45 CPU s on 1.23 GB; the numpy path wants 8)
NB_WINDOW = 4 * 1024 * 1024


class JoinedProps:
    """The properties fields of a batch's records joined by \\0 (no pattern searched for can span two
    records), with where each record's field starts in the joined bytes and where every \\x02 is."""

    def __init__(self, slices, joined: bytes, starts, lengths, ends):
        self.slices = slices            # each record's properties bytes (views of the batch buffer)
        self.joined = joined
        self.view = np.frombuffer(joined, np.uint8)
        self.starts = starts            # record i's field starts at joined[starts[i]]
        self.lengths = lengths
        self.ends = ends                # end of record i's field in the batch buffer
        self.separators = np.flatnonzero(self.view == 2)

    @classmethod
    def of(cls, raw, rel, lengths) -> JoinedProps:
        ends = rel + lengths
        slices = list(map(raw.__getitem__, map(slice, rel.tolist(), ends.tolist())))
        return cls(slices, b"\0".join(slices), np.cumsum(lengths + 1) - (lengths + 1), lengths, ends)

    def record_of(self, positions):
        """The record each position of the joined bytes belongs to."""
        return np.searchsorted(self.starts, positions, "right") - 1


class QueueRows:
    """One row per consume-queue unit a batch's records make (record index, topic number, queue id, queue
    offset, INNER_NUM); ``sort_by_queue`` numbers the queues and groups the rows by queue, keeping each
    queue's rows in record order (commitlog order for multi-dispatch targets)."""

    def __init__(self, recs, topics, qids, qoffs, inner, multi: bool):
        self.recs, self.topics, self.qids, self.qoffs, self.inner = recs, topics, qids, qoffs, inner
        self.multi = multi
        self.queue = self.offs = self.tots = self.firsts = self.lasts = None

    def sort_by_queue(self, scan: RangeScan, off, tot) -> None:
        key = (self.topics << 32) | (self.qids & 0xFFFFFFFF)
        if not self.multi and (key == key[0]).all():
            k0 = int(key[0])
            queue = np.full(len(key), scan.qnum[k0] if k0 in scan.qnum else scan._new_queue(k0), np.int64)
        else:
            queue = scan._queue_numbers(key)
        offs, tots = off[self.recs], tot[self.recs]
        if self.multi:
            order = np.lexsort((offs, queue))     # a target queue's units in commitlog order
        elif (queue == queue[0]).all():
            order = None
        else:
            # stable sort of small ints: numpy radix-sorts 16-bit keys
            order = np.argsort(queue.astype(np.uint16) if len(scan.qkeys) < 1 << 16 else queue, kind="stable")
        if order is not None:
            queue, offs, tots = queue[order], offs[order], tots[order]
            self.recs, self.topics, self.qoffs, self.inner = (self.recs[order], self.topics[order],
                                                              self.qoffs[order], self.inner[order])
        self.queue, self.offs, self.tots = queue, offs, tots
        brk = np.flatnonzero(queue[1:] != queue[:-1]) + 1
        self.firsts = np.concatenate(([0], brk))          # each queue's first and last row
        self.lasts = np.concatenate((brk - 1, [len(queue) - 1]))


class RangeScan:
    """One range of one file, walked with the batch kernel (rmqctl.scanvec). Per batch everything is
    array work except what is rare (a suspicious properties field, INNER_NUM, SCHEDULE_TOPIC_XXXX) or
    per distinct value (topic, TAGS string, queue). Per-queue state lives in arrays indexed by a queue
    number, so memory is bounded by the number of queues, never by the number of messages."""

    def __init__(self, ctx: ScanContext, res: FileResult, fd: int, begin: int, bound: int, limit: int):
        from rmqctl.formats._derive import numpy_dtype
        from rmqctl.formats.consumequeue import ConsumeQueueUnit

        self.ctx, self.res, self.fd = ctx, res, fd
        self.begin, self.bound, self.limit = begin, bound, limit
        self.path, self.start = res.path, res.start
        self.unit_dtype = numpy_dtype(ConsumeQueueUnit)
        self.cq_base = os.path.join(ctx.root, "consumequeue")
        # queue directory -> judged to lie inside the store, once per range (its files are read again and again);
        # those the store's listing saw reached through no link need no judging (PLAIN_QUEUES)
        self.cq_dir_inside: dict = {}
        self.plain_queues = PLAIN_QUEUES.get(ctx.root, ())
        self.cq_slow = CqReader(ctx.root, ctx.cq_file_size) if ctx.check_cq else None
        # tagsCode <= Integer.MIN_VALUE - 1 is an ext-file address only where consume-queue ext exists
        self.ext_floor = -2147483649 if os.path.isdir(os.path.join(ctx.root, "consumequeue_ext")) else None
        self.cq_pool = CqPool(2 * CQ_CACHE_BYTES)     # queue number -> its cached consume-queue piece
        self.windows_left = 1             # about how many windows of this range are still to come
        self.topic_interner = Interner()
        self.tb_tn: list = []             # topic-bytes id -> topic number
        self.tb_ok: list = []             # topic-bytes id -> valid UTF-8
        self.tag_interner = Interner()
        self.tag_val: list = []           # tag-bytes id -> tagsCode (UNDECODABLE: parse the record)
        self.topics: list = []            # topic number -> str
        self.topic_cmp: list = []         # topic number -> compared with its consume queue
        self.topic_sched: list = []
        self.topic_num: dict = {}         # str -> topic number
        self.qnum: dict = {}              # (topic number, queue id) -> queue number
        self.qkeys: list = []
        self.qk_sorted = np.empty(0, np.int64)   # known keys, sorted, and their queue numbers
        self.qk_num = np.empty(0, np.int64)
        self.tag_hash: dict = {}
        cap = 64
        self.cap = cap
        z = np.zeros(cap, np.int64)
        self.first_q, self.last_q, self.next_q = z.copy(), z.copy(), z.copy()
        self.count, self.first_phys, self.gaps = z.copy(), z.copy(), z.copy()
        self.missing, self.mismatches = z.copy(), z.copy()
        self.first_gap: dict = {}
        self.first_missing: dict = {}
        self.first_mismatch: dict = {}
        self.nb_state = None              # rmqctl.check.commitlog_nb's own state (numba kernel)

    # --- the walk -------------------------------------------------------------------------------------
    def run(self) -> None:
        from rmqctl import scanvec

        res, fd, bound, limit = self.res, self.fd, self.bound, self.limit
        last_range = bound >= limit     # else: stop at the first record starting at or after bound
        pos, widen = self.begin, 0
        buf = bytearray(scanvec.WINDOW)      # reused by every window: each batch is done before the next read
        while True:
            if not last_range and pos >= bound:
                res.handoff = pos
                break
            w = max(min(NB_WINDOW if _nb_batch() else scanvec.WINDOW, (limit if last_range else bound) - pos), widen)
            # defer_cross: the next window validates a record crossing this one's end -- unless that record
            # could be this range's handoff (the next range must begin at a validated record)
            batch, nxt, stop = scanvec.walk_window(fd, self.start, res.size, pos, limit, window=w,
                                                   check_crc=True, check_phys=True, check_prop_crc=True,
                                                   path=self.path, buf=buf, defer_cross=last_range or pos + w < bound)
            if len(batch):
                n = len(batch)
                if not last_range and w > bound - pos:
                    n = int(np.searchsorted(batch.rel, bound - pos))
                if n:
                    self.windows_left = 1 + ((limit if last_range else bound) - nxt) // w
                    self.batch(batch, n)
                if n < len(batch):
                    res.handoff = pos + int(batch.rel[n])
                    break
            if stop is not None:
                resume = classify_end(self.ctx, res, fd, stop, limit)
                if resume is None:
                    break
                if res.first_skip is None:
                    res.first_skip = stop.offset
                # records were skipped: queue offsets after the skipped range cannot be judged
                self.next_q[:len(self.qkeys)] = -1
                pos, widen = resume, 0
                continue
            # a valid record larger than the window starts at nxt: widen the next window to hold it
            widen = int.from_bytes(os.pread(fd, 4, nxt), "big", signed=True) if nxt == pos else 0
            pos = nxt
        self.finish()
        self.cq_pool.release()

    def finish(self) -> None:
        res = self.res
        for g, (tn, qid) in enumerate(self.qkeys):
            t = QueueTrack(int(self.first_q[g]), int(self.last_q[g]), int(self.next_q[g]), int(self.count[g]),
                           int(self.first_phys[g]), int(self.gaps[g]), self.first_gap.get(g),
                           int(self.missing[g]), self.first_missing.get(g), int(self.mismatches[g]),
                           self.first_mismatch.get(g))
            res.queues[(self.topics[tn], qid)] = t

    # --- one batch ------------------------------------------------------------------------------------
    def batch(self, bt, n: int) -> None:
        """Check the first n records of a scanvec batch."""
        res = self.res
        raw = bt.raw
        b = np.frombuffer(raw, np.uint8)
        tot = bt.total_size[:n]
        off = bt.rel[:n] + (self.start + bt.win_pos)
        if res.messages == 0:
            res.first_store_ts, res.first_magic = int(bt.store_timestamp[0]), int(bt.magic_code[0])
        res.messages += n
        res.bytes += int(tot.sum())
        res.last_valid = int(off[n - 1])
        res.end = res.last_valid + int(tot[n - 1])
        nb = _nb_batch()
        if nb is not None and nb(self, bt, n, b, off, tot):
            return      # the numba kernel's path (rmqctl.check.commitlog_nb), same results
        late: list = []     # (record index, order, Finding): merged in record order like a per-record walk
        tid = self._check_topics(bt, n, b, off, late)
        props = JoinedProps.of(raw, bt.props_rel[:n], bt.props_length[:n])
        self._check_properties(props, b, off, late)
        if late:
            late.sort(key=lambda x: (x[0], x[1]))
            res.findings.extend(f for _, _, f in late)
        rows = self._queue_rows(bt, n, tid, props)
        if rows is None:
            return
        rows.sort_by_queue(self, off, tot)
        self._track_queues(rows)
        if self.cq_slow is not None:      # consume-queue units of the records, compared as arrays
            self._compare(props, rows, bt)

    def _check_topics(self, bt, n, b, off, late) -> np.ndarray:
        """Topic number of every record (per distinct byte string); invalid UTF-8 is a finding."""
        tid, bad_topic = self._topic_ids(b, bt.raw, bt.topic_rel[:n], bt.topic_length[:n])
        if bad_topic is not None:
            for i in np.flatnonzero(bad_topic).tolist():
                late.append((i, 0, Finding(ERROR, "commitlog.topic", self.path, int(off[i]), "UTF-8 topic",
                                           repr(self.topics[int(tid[i])]), "topic bytes are not valid UTF-8")))
        return tid

    def _check_properties(self, props: JoinedProps, b, off, late) -> None:
        """Structure checks, run only on the few suspicious fields: no final separator, a non-ASCII byte,
        an empty segment (\\x02\\x02)."""
        has = props.lengths > 0
        suspicious = has & (b[np.where(has, props.ends - 1, 0)] != 2)
        if not props.joined.isascii():
            suspicious[props.record_of(np.flatnonzero(props.view >= 0x80))] = True
        seps = props.separators
        empty_segments = np.flatnonzero(seps[1:] - seps[:-1] == 1)
        if len(empty_segments):
            suspicious[props.record_of(seps[empty_segments])] = True
        for i in np.flatnonzero(suspicious).tolist():
            self._props_finding(i, bytes(props.slices[i]), int(off[i]), late)

    def _props_finding(self, i: int, praw: bytes, off: int, late: list) -> None:
        """The structure finding of record i's suspicious properties field, if any."""
        try:
            praw.decode("utf-8")
            bad = None if b"\x02\x02" not in praw and praw.endswith(b"\x02") else props_problem(praw)
        except UnicodeDecodeError:
            bad = props_problem(praw)
        if bad:
            late.append((i, 1, Finding(ERROR, "commitlog.properties", self.path, off, None, None,
                                       f"{bad} (body CRC does not cover properties)")))

    def _queue_rows(self, bt, n, tid, props: JoinedProps) -> QueueRows | None:
        """One row per consume-queue unit the records make: every dispatchable record (PREPARED / ROLLBACK
        records are in no consume queue), plus one per multi-dispatch (LMQ) target; None when none."""
        sysf = bt.sys_flag[:n]
        disp = (sysf & 0x4) == 0
        if not disp.any():
            return None
        rec = np.flatnonzero(disp) if not disp.all() else np.arange(n)
        qid = bt.queue_id[:n][rec]
        qoff = bt.queue_offset[:n][rec]
        topic = tid[rec]
        inner = np.ones(len(rec), np.int64)
        for k in np.flatnonzero(sysf[rec] & clf.INNER_BATCH_FLAG).tolist():
            try:
                inner[k] = max(1, int(parse_properties(props.slices[int(rec[k])]).get("INNER_NUM", "1")))
            except ValueError:
                inner[k] = 1
        multi = False
        if self.ctx.multi_dispatch and _MULTI_OFFSET in props.joined:
            x = self._multi_rows(props.slices, rec, topic, qid)
            if x is not None:
                # multi-dispatch (LMQ): each target queue gets a unit for the record at its own offset
                xk, xt, xq, xo = x
                rec, topic, qid, qoff = (np.concatenate((rec, rec[xk])), np.concatenate((topic, xt)),
                                         np.concatenate((qid, xq)), np.concatenate((qoff, xo)))
                inner = np.concatenate((inner, np.ones(len(xk), np.int64)))
                multi = True
        return QueueRows(rec, topic, qid, qoff, inner, multi)

    def _track_queues(self, rows: QueueRows) -> None:
        """Queue-offset continuity per queue: gaps (first one kept), first/last offsets, counts."""
        queue, qoffs, firsts, lasts = rows.queue, rows.qoffs, rows.firsts, rows.lasts
        first_queues = queue[firsts]
        isnew = self.count[first_queues] == 0
        prev_next = np.empty(len(queue), np.int64)
        prev_next[1:] = qoffs[:-1] + rows.inner[:-1]
        prev_next[firsts] = np.where(isnew, -1, self.next_q[first_queues])
        gap = (qoffs != prev_next) & (prev_next >= 0)
        if gap.any():
            gi = np.flatnonzero(gap)
            np.add.at(self.gaps, queue[gi], 1)
            for k in gi.tolist():
                g = int(queue[k])
                if g not in self.first_gap:
                    self.first_gap[g] = (int(rows.offs[k]), int(prev_next[k]), int(qoffs[k]))
        new_queues = first_queues[isnew]
        self.first_q[new_queues] = qoffs[firsts][isnew]
        self.first_phys[new_queues] = rows.offs[firsts][isnew]
        self.count[first_queues] += lasts - firsts + 1
        last_queues = queue[lasts]
        self.last_q[last_queues] = qoffs[lasts]
        self.next_q[last_queues] = qoffs[lasts] + rows.inner[lasts]

    def _multi_rows(self, slices, recs, topics, qid):
        """(row, topic number, queue id, queue offset) arrays of the multi-dispatch targets of the rows' records
        (INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET, rmqctl.dispatch.lmq_targets), or None."""
        rows, tns, qids, qos = [], [], [], []
        for k, i in enumerate(recs.tolist()):
            if _MULTI_OFFSET not in bytes(slices[i]):
                continue
            t = self.topics[int(topics[k])]
            for name, tq, qo in lmq_targets(t, int(qid[k]), parse_properties(slices[i]), self.ctx.enable_lmq):
                rows.append(k)
                tns.append(self._topic_bytes(name.encode("utf-8"))[0])
                qids.append(tq)
                qos.append(qo)
        if not rows:
            return None
        a = lambda v: np.array(v, np.int64)     # noqa: E731
        return a(rows), a(tns), a(qids), a(qos)

    def _compare(self, props: JoinedProps, rows: QueueRows, bt) -> None:
        """Each row's consume-queue unit against the record: missing, or (phys, size, tagsCode) differ."""
        slices, queue, qoffs, offs, tots = props.slices, rows.queue, rows.qoffs, rows.offs, rows.tots
        cmpt = np.array(self.topic_cmp, bool)[rows.topics]
        if not cmpt.any():
            return
        sched = np.array(self.topic_sched, bool)[rows.topics]
        rec = rows.recs                   # record index (in the batch) of each row
        tags = np.zeros(len(queue), np.int64)
        need = cmpt & ~sched
        if need.any():
            tags[need] = self._tags(props)[rec[need]]
        for k in np.flatnonzero(cmpt & sched).tolist():
            i = int(rec[k])
            tags[k] = tags_code(SCHEDULE_TOPIC, parse_properties(slices[i]), int(bt.store_timestamp[i]),
                                self.ctx.delay_levels)
        up = np.zeros(len(queue), np.int64)
        us = np.zeros(len(queue), np.int64)
        ut = np.zeros(len(queue), np.int64)
        present = np.zeros(len(queue), bool)
        self._units(rows, cmpt, up, us, ut, present)
        missing = cmpt & (~present | (up < 0) | (us <= 0))
        tag_bad = ut != tags
        if self.ext_floor is not None:
            tag_bad &= ut > self.ext_floor
        mism = cmpt & ~missing & ((up != offs) | (us != tots) | tag_bad)
        if missing.any():
            mi = np.flatnonzero(missing)
            np.add.at(self.missing, queue[mi], 1)
            for k in mi.tolist():
                gg = int(queue[k])
                if gg not in self.first_missing:
                    self.first_missing[gg] = (int(offs[k]), int(qoffs[k]))
        if mism.any():
            mi = np.flatnonzero(mism)
            np.add.at(self.mismatches, queue[mi], 1)
            for k in mi.tolist():
                gg = int(queue[k])
                if gg not in self.first_mismatch:
                    self.first_mismatch[gg] = (int(qoffs[k]), (int(offs[k]), int(tots[k]), int(tags[k])),
                                               (int(up[k]), int(us[k]), int(ut[k])))

    def _units(self, rows: QueueRows, cmpt, up, us, ut, present) -> None:
        """Fill the unit (phys, size, tags) at the queue offset of every compared row (cmpt), from each queue's
        cached consume-queue piece (CqPool), read now for the queues whose piece does not hold their offsets
        (in bounded pieces, read ahead); `present` False where there is no unit. Array work per batch: Python
        runs only for the queues read now and those looked up one unit at a time."""
        queue, qoffs, firsts = rows.queue, rows.qoffs, rows.firsts
        cnt = np.add.reduceat(cmpt.astype(np.int64), firsts)
        qmin = np.minimum.reduceat(np.where(cmpt, qoffs, np.iinfo(np.int64).max), firsts)
        qmax = np.maximum.reduceat(np.where(cmpt, qoffs, -1), firsts)
        g = queue[firsts]
        cqfs = self.ctx.cq_file_size
        ok = (cnt > 0) & (qmin >= 0) & (qmax <= _QMAX)
        b0 = np.where(ok, qmin, 0) * UNIT_SIZE
        b1 = np.where(ok, qmax, 0) * UNIT_SIZE
        f0 = b0 - b0 % cqfs
        # negative or absurd (a damaged QUEUEOFFSET), crossing a consume-queue file, or scattered offsets: one
        # unit at a time
        slow = (cnt > 0) & ~(ok & (f0 == b1 - b1 % cqfs) & (qmax - qmin <= 4 * cnt + 1024))
        pool = self.cq_pool
        pool.trim()     # no place in the pool is in use between batches
        p0, p1 = b0 - f0, b1 - f0 + UNIT_SIZE
        known = g < len(pool.f0)
        gk = np.where(known, g, 0)
        hit = known & (pool.f0[gk] == f0) & (pool.p0[gk] <= p0) & (p1 <= pool.p0[gk] + UNIT_SIZE * pool.n[gk])
        for x in np.flatnonzero((cnt > 0) & ~slow & ~hit).tolist():
            self._cq_read(int(g[x]), int(f0[x]), int(p0[x]), int(p1[x]))
        # every queue's piece is in the pool now: its base (byte position of its first unit in the queue), its
        # units and where they lie in the pool, per row
        gk = np.where(g < len(pool.f0), g, 0)
        seg = np.repeat(np.arange(len(firsts)), rows.lasts - firsts + 1)
        rg = gk[seg]
        fast = cmpt & ~slow[seg]
        j = qoffs - (f0[seg] + pool.p0[rg]) // UNIT_SIZE
        there = fast & (j < pool.n[rg])
        rows_in = np.flatnonzero(there)
        if len(rows_in):
            at = pool.at[rg[rows_in]] + UNIT_SIZE * j[rows_in]
            u = pool.buf[at[:, None] + np.arange(UNIT_SIZE)].reshape(-1).view(self.unit_dtype)
            up[rows_in] = u["physical_offset"]
            us[rows_in] = u["size"]
            ut[rows_in] = u["tags_code"]
            present[rows_in] = True
        for x in np.flatnonzero(slow).tolist():
            tn, qid = self.qkeys[int(g[x])]
            topic = self.topics[tn]
            for k in range(int(firsts[x]), int(rows.lasts[x]) + 1):
                if cmpt[k]:
                    v = self.cq_slow.unit(topic, qid, int(qoffs[k]))
                    if v is not None:
                        present[k] = True
                        up[k], us[k], ut[k] = v

    def _cq_read(self, g: int, f0: int, p0: int, p1: int) -> None:
        """Read queue g's consume-queue piece holding bytes [p0, p1) of its file starting at f0 into the pool."""
        tn, qid = self.qkeys[g]
        d = os.path.join(self.cq_base, self.topics[tn], str(qid))
        ok = self.cq_dir_inside.get(d)
        if ok is None:
            ok = self.cq_dir_inside[d] = (self.topics[tn], qid) in self.plain_queues or inside(d, self.ctx.root)
        path = os.path.join(d, f"{f0:020d}")
        # read ahead 16x what this batch needs, at least the queue's share of CQ_CACHE_BYTES (each read opens
        # the file: with few queues, a few large reads per queue). Never more than the share otherwise: pieces
        # beyond it overflow the pool, which then empties at every batch, and every queue is read again per batch
        # (8192 queues at 10 KB each did: 20 reads per queue)
        share = CQ_CACHE_BYTES // max(1, len(self.qkeys))
        ahead = max(16 * (p1 - p0), min(share, CQ_AHEAD_MAX, 2 * (p1 - p0) * self.windows_left))
        self.cq_pool.put(g, f0, p0, pread_or_empty(path, min(ahead, self.ctx.cq_file_size - p0), p0, ok))

    def _tags(self, props: JoinedProps):
        """tagsCode (TAGS hash) of every record of the batch: TAGS located as arrays over the joined
        properties, hashed per distinct string. Ambiguous fields (TAGS twice or not at a segment start,
        invalid UTF-8) are parsed fully, as the broker parses them."""
        view, jstart, twos = props.view, props.starts, props.separators
        m = len(props.lengths)
        if not len(view):       # one record, no properties
            return np.zeros(m, np.int64)
        jend = jstart + props.lengths
        c = np.flatnonzero(view[:-4] == 0x54) if len(view) > 4 else np.empty(0, np.int64)
        if len(c):
            c = c[(view[c + 1] == 0x41) & (view[c + 2] == 0x47) & (view[c + 3] == 0x53) & (view[c + 4] == 1)]
        r = np.searchsorted(jstart, c, "right") - 1
        cnt = np.bincount(r, minlength=m)
        hit = np.zeros(m, np.int64)
        hit[r] = c
        one = cnt == 1
        segok = one & ((hit == jstart) | (view[np.maximum(hit - 1, 0)] == 2))
        slow = (cnt > 1) | (one & ~segok)
        out = np.zeros(m, np.int64)
        fast = np.flatnonzero(segok)
        if len(fast):
            vs = hit[fast] + 5
            if len(twos):
                k = np.searchsorted(twos, vs)
                ve = np.where(k < len(twos), twos[np.minimum(k, len(twos) - 1)], jend[fast])
                ve = np.minimum(ve, jend[fast])
            else:
                ve = jend[fast]
            vl = ve - vs
            ids = self.tag_interner.ids(view, vs, vl)
            if ids is not None:
                tv = self.tag_interner.values
                for k2 in range(len(self.tag_val), len(tv)):
                    self.tag_val.append(self._tag_value(tv[k2]))
                vals = np.array(self.tag_val, np.int64)[ids]
            else:
                d: dict = {}
                vals = np.array([d[v] if v in d else d.setdefault(v, self._tag_value(v))
                                 for v in (props.joined[a:z] for a, z in zip(vs.tolist(), ve.tolist()))], np.int64)
            bad = vals == UNDECODABLE
            out[fast] = np.where(bad, 0, vals)
            if bad.any():
                slow[fast[bad]] = True
        for k2 in np.flatnonzero(slow).tolist():
            out[k2] = self._hash(parse_properties(props.slices[k2]).get("TAGS"))
        return out

    def _tag_value(self, v: bytes) -> int:
        try:
            return self._hash(v.decode("utf-8"))
        except UnicodeDecodeError:
            return UNDECODABLE

    def _hash(self, tg) -> int:
        if not tg:
            return 0
        h = self.tag_hash.get(tg)
        if h is None:
            h = java_string_hash(tg)
            if len(self.tag_hash) < 1 << 16:
                self.tag_hash[tg] = h
        return h

    def _topic_ids(self, b, raw, trel, tlen):
        ids = self.topic_interner.ids(b, trel, tlen)
        if ids is not None:
            tv = self.topic_interner.values
            for k in range(len(self.tb_tn), len(tv)):
                tn, ok = self._topic_bytes(tv[k])
                self.tb_tn.append(tn)
                self.tb_ok.append(ok)
            tid = np.array(self.tb_tn, np.int64)[ids]
            if all(self.tb_ok):
                return tid, None
            return tid, ~np.array(self.tb_ok, bool)[ids]
        d: dict = {}
        inv = np.array([d.setdefault(bytes(raw[a:a + k]), len(d))
                        for a, k in zip(trel.tolist(), tlen.tolist())], np.int64)
        pairs = [self._topic_bytes(tb) for tb in d]
        tid = np.array([p[0] for p in pairs], np.int64)[inv]
        oks = [p[1] for p in pairs]
        if all(oks):
            return tid, None
        return tid, ~np.array(oks, bool)[inv]

    def _topic_bytes(self, tb: bytes) -> tuple:
        """(topic number, bytes are valid UTF-8) of one topic byte string."""
        topic = tb.decode("utf-8", errors="replace")     # as the broker (and FileWalk) decode it
        tn = self.topic_num.get(topic)
        if tn is None:
            tn = self.topic_num[topic] = len(self.topics)
            self.topics.append(topic)
            self.topic_cmp.append(topic not in self.ctx.batch_topics)
            self.topic_sched.append(topic == SCHEDULE_TOPIC)
        # the broker reads invalid bytes as U+FFFD and files the messages under that name
        return tn, utf8_ok(tb)

    def _queue_numbers(self, key):
        for _ in range(2):
            ks = self.qk_sorted
            pos = np.searchsorted(ks, key)
            np.minimum(pos, max(len(ks) - 1, 0), out=pos)
            found = ks[pos] == key if len(ks) else np.zeros(len(key), bool)
            if found.all():
                return self.qk_num[pos]
            for k in np.unique(key[~found]).tolist():
                if k not in self.qnum:
                    self._new_queue(k)
            items = sorted(self.qnum.items())
            self.qk_sorted = np.array([k for k, _ in items], np.int64)
            self.qk_num = np.array([v for _, v in items], np.int64)
        raise AssertionError("unreachable")

    def _new_queue(self, key: int) -> int:
        g = len(self.qkeys)
        qid = key & 0xFFFFFFFF
        self.qkeys.append((key >> 32, qid - (1 << 32) if qid >= 1 << 31 else qid))
        self.qnum[key] = g
        if g >= self.cap:
            self.cap *= 2
            for name in ("first_q", "last_q", "next_q", "count", "first_phys", "gaps", "missing", "mismatches"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate((a, np.zeros(self.cap - len(a), np.int64))))
        return g
