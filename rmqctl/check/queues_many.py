"""verify's per-queue checks (consumequeue.check_queue) over many queues at once. A store of a thousand topics
holds 8,192 queues of a few dozen units each, where check_queue's two dozen numpy calls and its file judgements
cost more per queue than reading the files.

The queues of the usual layout whose files are all small (rmqctl.store.queue_heads) are read, then screened
together as segment reductions over all their units: a queue whose units show none of check_queue's findings of
its own (a hole, a misplaced pre-blank unit, a unit the commitlog pass could not explain) gets its extent from the
arrays, and only what the commitlog pass found about it (consumequeue.track_findings). Every other queue, and every
queue the screen flags, goes through check_queue itself, so the findings are check_queue's, in queue order.
tests/test_verify_batch.py holds both ways equal on the fixtures, under damage and on random queues.
"""
from __future__ import annotations

from rmqctl.check import consumequeue as cqc
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.queue_heads import heads, plain_files, segments, within

GROUP_BYTES = 8 << 20      # units screened together: memory stays flat whatever the queues hold
_NONE = 2**62


def check_queues(store, root, queues, cq_file_size: int, tracks: dict, cl_min: int, cl_end: int, findings: list,
                 scanned: bool, cl_gaps) -> dict:
    """{(topic, queue id): check_queue's QueueResult} for `queues`, with check_queue's findings appended to
    `findings` in the order of `queues` (arguments as check_queue's)."""
    out: dict = {}
    # a unit into a missing commitlog file is reported per queue: a store with such a gap goes queue by queue
    screen = cq_file_size % UNIT_SIZE == 0 and not (scanned and cl_gaps)
    group = _Group(cq_file_size, cl_min, scanned)
    pending: list = []      # (key, directory, index in the group; None: check_queue, -1: no file)

    def flush():
        got = group.decide()
        for (topic, qid), d, gi in pending:
            track = tracks.get((topic, qid))
            res = None if gi is None else cqc.QueueResult() if gi < 0 else got[gi]
            if res is None:
                res = cqc.check_queue(root, topic, qid, cq_file_size, track, cl_min, cl_end, findings,
                                      commitlog_scanned=scanned, cl_gaps=cl_gaps,
                                      judged=store.queue_dir_plain(topic, qid))
            elif track is not None and scanned:
                cqc.track_findings(root, d, cq_file_size, track, res, topic, qid, findings)
            out[(topic, qid)] = res
        pending.clear()

    for key in queues:
        topic, qid = key
        d = root.joinpath("consumequeue", topic, str(qid))
        files = plain_files(store, topic, qid, d, cq_file_size) if screen else None
        got = heads(files, cq_file_size) if files else None
        if files == []:
            pending.append((key, d, -1))
        elif got is None:
            pending.append((key, d, None))
        else:
            pending.append((key, d, group.add(got, tracks.get(key))))
            if group.nbytes >= GROUP_BYTES:
                flush()
                group = _Group(cq_file_size, cl_min, scanned)
    flush()
    return out


class _Group:
    """Queues whose files were read whole (up to their hole), screened together."""

    def __init__(self, fs: int, cl_min: int, scanned: bool):
        self.fs, self.cl_min, self.scanned = fs, cl_min, scanned
        self.chunks: list = []      # the units of each file, in queue order
        self.starts: list = []      # that file's start
        self.first: list = []       # per queue: its first file (index into chunks)
        self.rec_q: list = []       # per queue: the first and last queue offsets the commitlog pass compared
        self.nbytes = 0

    def add(self, files: list, track) -> int:
        """A queue's files (queue_heads.heads) and its track; its index in the group."""
        self.first.append(len(self.chunks))
        for start, data in files:
            self.chunks.append(data)
            self.starts.append(start)
            self.nbytes += len(data)
        self.rec_q.append((track.first_q, track.last_q) if track is not None else (_NONE, -1))
        return len(self.first) - 1

    def decide(self) -> list:
        """Per queue of the group: its QueueResult as check_queue would give it, or None when check_queue may have
        a finding of the queue's own to report (it then checks the queue itself)."""
        import numpy as np

        from rmqctl.formats._derive import numpy_dtype
        from rmqctl.formats.consumequeue import ConsumeQueueUnit

        if not self.first:
            return []
        us, per_file = UNIT_SIZE, self.fs // UNIT_SIZE
        nq, nf = len(self.first), len(self.chunks)
        qfirst = np.array(self.first, np.int64)
        qlast = np.append(qfirst[1:], nf) - 1
        fq = np.repeat(np.arange(nq), qlast - qfirst + 1)              # queue of each file
        n = np.array([len(c) // us for c in self.chunks], np.int64)
        fstart = np.array(self.starts, np.int64)
        u = np.frombuffer(b"".join(self.chunks), numpy_dtype(ConsumeQueueUnit))
        ph = u["physical_offset"].astype(np.int64)
        sz = u["size"].astype(np.int64)
        tg = u["tags_code"].astype(np.int64)
        li = within(n)                                                  # unit index within its file
        fid = np.repeat(np.arange(nf), n)
        uq = fq[fid]                                                    # queue of each unit
        pos = np.arange(len(ph))
        qn = np.bincount(fq, weights=n, minlength=nq).astype(np.int64)  # units per queue
        valid = (ph >= 0) & (sz > 0)
        # each file's first invalid unit; the zeros after a file's data count as one
        first_inv = segments(np.minimum, np.where(valid, per_file, li), n, per_file)
        first_inv = np.where(n < per_file, np.minimum(first_inv, n), first_inv)
        last_ok = segments(np.maximum, np.where(valid, li, -1), n, -1)
        # a queue ends in its first file holding an invalid unit: a valid unit after that one is a hole
        stop = qlast + 1
        ends = np.flatnonzero(first_inv < per_file)
        if len(ends):
            qs, at = np.unique(fq[ends], return_index=True)
            stop[qs] = ends[at]
        flagged = np.zeros(nq, bool)
        has = stop <= qlast
        flagged[has] = last_ok[stop[has]] > first_inv[stop[has]]
        flagged |= np.bincount(fq[(np.arange(nf) > stop[fq]) & (last_ok >= 0)], minlength=nq) > 0
        # pre-blank units belong only in the queue's first file, before its first real unit
        pre = valid & (sz == cqc.PRE_BLANK_SIZE) & (ph == 0) & (tg == 0)
        real = valid & ~pre
        first_real = segments(np.minimum, np.where(real, pos, _NONE), qn, _NONE)
        misplaced = pre & ((fid != qfirst[uq]) | (pos > first_real[uq]))
        flagged |= np.bincount(uq[misplaced], minlength=nq) > 0
        q_of = fstart[fid] // us + li                                   # each unit's queue offset
        if self.scanned:
            # a real unit the commitlog pass did not compare, in a commitlog file not deleted: ahead or orphan
            lo, hi = np.array(self.rec_q, np.int64).reshape(-1, 2).T
            judge = real & (ph + sz > self.cl_min) & ((q_of < lo[uq]) | (q_of > hi[uq]))
            flagged |= np.bincount(uq[judge], minlength=nq) > 0
        last_real = segments(np.maximum, np.where(real, pos, -1), qn, -1)
        last_pre = segments(np.maximum, np.where(pre, pos, -1), qn, -1)
        min_valid, valid_end, max_end = np.zeros(nq, np.int64), np.zeros(nq, np.int64), np.full(nq, -1, np.int64)
        if len(ph):
            r, p = last_real >= 0, last_pre >= 0
            lr = last_real[r]
            min_valid[r] = q_of[first_real[r]]
            valid_end[r] = q_of[lr] + 1
            max_end[r] = ph[lr] + sz[lr]
            only_pre = p & ~r
            min_valid[only_pre] = q_of[last_pre[only_pre]] + 1
        return [None if fl else cqc.QueueResult(me, ve, mv)
                for fl, me, ve, mv in zip(flagged.tolist(), max_end.tolist(), valid_end.tolist(), min_valid.tolist())]
