"""rebuild_cq.truncate_state for many plain queues at once: the same QueueState per queue, with the units of
every queue's last files decided as a few numpy passes over all of them instead of a dozen numpy calls per
queue (a store of a thousand topics holds 8,192 queues of a few dozen units each, where those calls cost more
than reading the files).

Only a queue of the usual layout whose last files are small takes this way (rmqctl.store.queue_heads). Any other
queue (a link, a stray, a short or missing file, a long queue, data after a hole), and every queue of a store with
consume-queue ext files, goes through truncate_state itself. tests/test_truncate_many.py holds both ways equal
on random queues.
"""
from __future__ import annotations

import os

from rmqctl.formats import consumequeue as cqf
from rmqctl.repair import rebuild_cq as RC
from rmqctl.store.files import MappedFile
from rmqctl.store.queue_heads import read_usual, segments, trim_zero_units, within

GROUP_BYTES = 8 << 20      # units decided together: memory stays flat whatever the queues hold


def truncate_many(store, keys, cut: int | None) -> dict:
    """{(topic, queue id): rebuild_cq.truncate_state(store, topic, queue id, cut)} for plain queues, in the
    order of `keys` (topics of batch consume queues are the caller's to route elsewhere)."""
    if store.config.enable_cq_ext:
        return {k: RC.truncate_state(store, k[0], k[1], cut) for k in keys}
    fs = store.config.cq_file_size
    base = store.consumequeue_dir
    out: dict = {}
    group = _Group(fs, cut)
    for key in keys:
        topic, qid = key
        d = base.joinpath(topic, str(qid))
        got = read_usual(store, topic, qid, fs, last=3)
        if got is None:
            out[key] = RC.truncate_state(store, topic, qid, cut)
            continue
        files, data = got
        st = out[key] = RC.QueueState(topic, qid, d, fs, [MappedFile(d / os.path.basename(p), s, fs)
                                                          for s, p in files])
        if files:
            group.add(st, data)
            if group.nbytes >= GROUP_BYTES:
                group.decide()
                group = _Group(fs, cut)
    group.decide()
    return out


class _Group:
    """Queues whose last three files (the broker's recovery reads those) are read, then decided together."""

    def __init__(self, fs: int, cut: int | None):
        self.fs, self.cut = fs, cut
        self.states: list = []
        self.chunks: list = []      # the units of each file read, in queue order
        self.starts: list = []      # that file's start
        self.first: list = []       # per queue: its first file read (index into chunks)
        self.nbytes = 0

    def add(self, st, files: list) -> None:
        """The queue and its last files' (start, units) (queue_heads.read_usual)."""
        self.states.append(st)
        self.first.append(len(self.chunks))
        for start, data in files:
            self.chunks.append(data)
            self.starts.append(start)
            self.nbytes += len(data)

    def decide(self) -> None:
        """truncate_state's fields of every queue of the group, as its loops over the files give them. A file's
        units, and a queue's, lie together in file order: per file and per queue figures are segment
        reductions (ufunc.reduceat)."""
        import numpy as np

        if not self.states:
            return
        us, per_file = RC.UNIT_SIZE, self.fs // RC.UNIT_SIZE
        limit = self.cut if self.cut is not None else 2**62
        nq, nf = len(self.states), len(self.chunks)
        qfirst = np.array(self.first, np.int64)
        qlast = np.append(qfirst[1:], nf) - 1            # every queue here has a file
        fq = np.repeat(np.arange(nq), qlast - qfirst + 1)          # queue of each file
        n = np.array([len(c) // us for c in self.chunks], np.int64)
        fstart = np.array(self.starts, np.int64)
        u = np.frombuffer(b"".join(self.chunks), RC.units_dtype())
        # each file's units end at its last non-zero one, as load_units reads them
        u, n = trim_zero_units(u, n)
        ph, sz, tg = u["phys"].astype(np.int64), u["size"].astype(np.int64), u["tags"].astype(np.int64)
        live = (ph != 0) | (sz != 0) | (tg != 0)
        li = within(n)                                  # unit index within its file
        fid = np.repeat(np.arange(nf), n)
        valid = (ph >= 0) & (sz > 0) & (ph < limit)
        pre = (ph == 0) & (sz == cqf.PRE_BLANK_SIZE)
        # the units of each file before its first invalid one
        n_ok = np.minimum(segments(np.minimum, np.where(valid, per_file, li), n, per_file), n)
        # the walk of a queue's files stops at the first one not full of valid units (else at its last file)
        notfull = n_ok < per_file
        nf_at = np.flatnonzero(notfull)
        stop = qlast.copy()
        if len(nf_at):
            qs, at = np.unique(fq[nf_at], return_index=True)
            stop[qs] = nf_at[at]
        keep_end = fstart[stop] + n_ok[stop] * us
        fstop = stop[fq][fid]
        nok = n_ok[fid]
        kept = (fid < fstop) | ((fid == fstop) & (li < nok))
        dropped = ~kept
        qn = np.bincount(fq, weights=n, minlength=nq).astype(np.int64)      # units per queue
        ndrop = np.bincount(fq[fid[dropped & live]], minlength=nq)
        below = dropped & valid & ~pre
        low = segments(np.minimum, np.where(below, ph, 2**62), qn, 2**62)
        last_real = segments(np.maximum, np.where(kept & ~pre, np.arange(len(ph)), -1), qn, -1)
        max_phys = np.full(nq, -1, np.int64)
        has = last_real >= 0
        max_phys[has] = ph[last_real[has]] + sz[last_real[has]]
        seen = np.maximum(segments(np.maximum, ph, qn, -1), -1)
        full_stop = ~notfull[stop]
        for st, ke, sp, nd, lo, mp, fl in zip(self.states, keep_end.tolist(), seen.tolist(), ndrop.tolist(),
                                               low.tolist(), max_phys.tolist(), full_stop.tolist()):
            st.seen_phys, st.dropped_units, st.max_phys = sp, nd, mp
            st.dropped_valid_below = lo if lo < 2**62 else None
            st.kept_any = ke > st.files[0].start
            st.keep_end = ke if st.kept_any else 0
            # the file holding keep_end was read, and is a full file: only a full last file leaves none
            st.tail_zero = nd == 0 and not fl
            st.start_from_existing()
