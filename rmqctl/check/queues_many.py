"""verify's per-queue checks (consumequeue.check_queue) over many queues at once. A store of a thousand topics
holds 8,192 queues of a few dozen units each, where check_queue's two dozen numpy calls and its file judgements
cost more per queue than reading the files.

The queues of the usual layout whose files are all small (rmqctl.store.queue_heads) are read, then screened
together as segment reductions over all their units: a queue whose units show none of check_queue's findings of
its own (a hole, a misplaced pre-blank unit, a unit the commitlog pass could not explain) gets its extent from the
arrays, and only what the commitlog pass found about it (consumequeue.track_findings). Every other queue, and every
queue the screen flags, goes through check_queue itself, so the findings are check_queue's, in queue order.
tests/test_queues_many.py holds both ways equal on random queues and on queues of one finding each,
tests/test_verify_batch.py on the fixtures and under damage.
"""
from __future__ import annotations

from rmqctl.check import consumequeue as cqc
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.queue_heads import read_usual, segments

GROUP_BYTES = 8 << 20      # units screened together: memory stays flat whatever the queues hold
_NONE = 2**62


def check_queues(store, queues, cq_file_size: int, tracks: dict, cl_min: int, cl_end: int, findings: list,
                 scanned: bool, cl_gaps) -> dict:
    """{(topic, queue id): check_queue's QueueResult} for `queues` of the store, with check_queue's findings
    appended to `findings` in the order of `queues` (arguments as check_queue's)."""
    out: dict = {}
    root = store.root
    # a unit into a missing commitlog file is reported per queue: a store with such a gap goes queue by queue
    screen = cq_file_size % UNIT_SIZE == 0 and not (scanned and cl_gaps)
    group = _Group(cq_file_size, cl_min, scanned)
    pending: list = []      # (key, index in the group; None: check_queue, -1: no file)

    def flush():
        got = group.decide()
        for (topic, qid), gi in pending:
            track = tracks.get((topic, qid))
            res = None if gi is None else cqc.QueueResult() if gi < 0 else got[gi]
            if res is None:
                res = cqc.check_queue(root, topic, qid, cq_file_size, track, cl_min, cl_end, findings,
                                      commitlog_scanned=scanned, cl_gaps=cl_gaps,
                                      judged=store.queue_dir_plain(topic, qid))
            elif track is not None and scanned:
                cqc.track_findings(root, root.joinpath("consumequeue", topic, str(qid)), cq_file_size, track, res,
                                   topic, qid, findings)
            out[(topic, qid)] = res
        pending.clear()

    for key in queues:
        topic, qid = key
        got = read_usual(store, topic, qid, cq_file_size) if screen else None
        if got is None:
            pending.append((key, None))
        elif not got[0]:
            pending.append((key, -1))
        else:
            pending.append((key, group.add(got[1], tracks.get(key))))
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
        """A queue's files (start, data) (queue_heads.read_usual) and its track; its index in the group."""
        self.first.append(len(self.chunks))
        for start, data in files:
            self.chunks.append(data)
            self.starts.append(start)
            self.nbytes += len(data)
        self.rec_q.append((track.first_q, track.last_q) if track is not None else (_NONE, -1))
        return len(self.first) - 1

    def decide(self) -> list:
        """Per queue of the group: its QueueResult as check_queue would give it, or None when check_queue may have
        a finding of the queue's own to report (it then checks the queue itself).

        A queue with no such finding has a simple shape: its valid units are its first units, up to the first
        invalid one (every file before that one full of valid units), its pre-blank units lead them, and the rest
        are real. So after a few passes over the units (which are valid, where each file's first invalid and last
        valid unit lie, which are pre-blank), a queue's figures come from its files' figures."""
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
        fpos = np.cumsum(n) - n                                         # each file's first unit, in the group
        u = np.frombuffer(b"".join(self.chunks), numpy_dtype(ConsumeQueueUnit))
        size = u["size"]
        valid = (u["physical_offset"] >= 0) & (size > 0)
        pos = np.arange(len(u))
        # each file's first invalid unit (the zeros after a file's data count as one) and last valid one
        first_inv = segments(np.minimum, np.where(valid, _NONE, pos), n, _NONE) - fpos
        first_inv = np.minimum(first_inv, np.where(n < per_file, n, per_file))
        last_ok = segments(np.maximum, np.where(valid, pos, -1), n, -1) - fpos
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
        # where each queue's valid units end (exclusive, in the group); they start at its first unit
        qpos = fpos[qfirst]
        end = np.where(has, fpos[np.minimum(stop, nf - 1)] + first_inv[np.minimum(stop, nf - 1)],
                       fpos[qlast] + n[qlast])
        # pre-blank units belong only in the queue's first file, before its first real unit: they must lead it
        cand = np.flatnonzero(size == cqc.PRE_BLANK_SIZE)
        pre = cand[(u["physical_offset"][cand] == 0) & (u["tags_code"][cand] == 0)]
        npre = np.zeros(nq, np.int64)
        if len(pre):
            pq = np.searchsorted(qpos, pre, "right") - 1
            npre = np.bincount(pq, minlength=nq)
            rank = np.arange(len(pre)) - (np.cumsum(npre) - npre)[pq]
            first_end = fpos[qfirst] + n[qfirst]
            misplaced = (pre != qpos[pq] + rank) | (pre >= first_end[pq])
            flagged |= np.bincount(pq[misplaced], minlength=nq) > 0
        q0 = np.array(self.starts, np.int64)[qfirst] // us              # queue offset of each queue's first unit
        real = end > qpos + npre
        qa, qb = q0 + npre, q0 + (end - qpos) - 1                       # the real units' queue offsets
        if self.scanned:
            # a real unit the commitlog pass did not compare, in a commitlog file not deleted: ahead or orphan
            lo, hi = np.array(self.rec_q, np.int64).reshape(-1, 2).T
            if self.cl_min <= 0:        # every real unit ends above it
                flagged |= real & ((qa < lo) | (qb > hi))
            else:
                live = np.concatenate(([0], np.cumsum(u["physical_offset"].astype(np.int64)
                                                      + size.astype(np.int64) > self.cl_min)))
                # units before lo and after hi, as positions in the group: [qa, lo) and (hi, qb]
                below = np.minimum(qb, lo - 1)
                above = np.maximum(qa, hi + 1)
                p0 = qpos + npre
                n_below = np.where(real & (below >= qa), live[np.clip(p0 + below - qa + 1, 0, len(u))]
                                   - live[np.clip(p0, 0, len(u))], 0)
                n_above = np.where(real & (above <= qb), live[np.clip(end, 0, len(u))]
                                   - live[np.clip(p0 + above - qa, 0, len(u))], 0)
                flagged |= (n_below > 0) | (n_above > 0)
        max_end = np.full(nq, -1, np.int64)
        if real.any():
            last = end[real] - 1
            max_end[real] = u["physical_offset"][last].astype(np.int64) + size[last]
        min_valid = np.where(real | (npre > 0), q0 + npre, 0)
        valid_end = np.where(real, qb + 1, 0)
        return [None if fl else cqc.QueueResult(me, ve, mv)
                for fl, me, ve, mv in zip(flagged.tolist(), max_end.tolist(), valid_end.tolist(), min_valid.tolist())]
