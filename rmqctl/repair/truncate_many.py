"""rebuild_cq.truncate_state for many plain queues at once: the same QueueState per queue, with the units of
every queue's last files decided as a few numpy passes over all of them instead of a dozen numpy calls per
queue (a store of a thousand topics holds 8,192 queues of a few dozen units each, where those calls cost more
than reading the files).

Only the usual layout takes this way: a queue directory inside the store, holding nothing but regular files named
by their start offset, each a multiple of mappedFileSizeConsumeQueue, contiguous, each exactly that size, whose
last files hold their units in one data extent of at most SMALL_FILE bytes followed by nothing but a hole. Any
other queue (a link, a stray, a short or missing file, a long queue, data after a hole), and every queue of a store
with consume-queue ext files, goes through truncate_state itself. tests/test_truncate_many.py holds both ways equal
on random queues.
"""
from __future__ import annotations

import errno
import os

from rmqctl.formats import OFFSET_NAME
from rmqctl.formats import consumequeue as cqf
from rmqctl.repair import rebuild_cq as RC
from rmqctl.store.files import MappedFile, inside

GROUP_BYTES = 8 << 20      # units decided together: memory stays flat whatever the queues hold
# a file holding more units than this (3,276) goes through truncate_state: the arrays of the group cost more passes
# per unit than truncate_state's own, which win back their per-queue cost past about this size
SMALL_FILE = 64 << 10


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
        files = _plain_files(store, topic, qid, d, fs)
        heads = _heads(files, fs) if files is not None else None
        if heads is None:
            out[key] = RC.truncate_state(store, topic, qid, cut)
            continue
        st = out[key] = RC.QueueState(topic, qid, d, fs, files)
        if files:
            group.add(st, heads)
            if group.nbytes >= GROUP_BYTES:
                group.decide()
                group = _Group(fs, cut)
    group.decide()
    return out


def _plain_files(store, topic: str, qid: int, d, fs: int) -> list | None:
    """The queue's files as FileQueue.scan gives them, when the queue has the usual layout (module doc); else
    None."""
    entries = store.queue_dir_entries(topic, qid)
    if entries is None or not (store.queue_dir_plain(topic, qid) or inside(d, store.root)):
        return None
    files = []
    for e in entries:
        if e.is_symlink() or not e.is_file(follow_symlinks=False) or not OFFSET_NAME.match(e.name):
            return None
        start, size = int(e.name), e.stat(follow_symlinks=False).st_size
        if start % fs or size != fs:
            return None
        files.append(MappedFile(d / e.name, start, size))
    files.sort(key=lambda f: f.start)
    for a, b in zip(files, files[1:]):
        if b.start != a.start + fs:
            return None
    return files


def _head(path, fs: int) -> bytes | None:
    """The bytes of a queue file up to the end of its first data extent, when no data follows it and it ends
    within SMALL_FILE bytes (the usual file of a store of many queues: a few units, then one hole to the end;
    zeros after the units are trimmed by _Group); else None."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            h = min(os.lseek(fd, 0, os.SEEK_HOLE), fs)
            if h < fs:
                os.lseek(fd, h, os.SEEK_DATA)
                return None         # data after the first hole
        except OSError as e:        # ENXIO: nothing but the hole after h; else no SEEK_HOLE here
            if e.errno != errno.ENXIO:
                return None
        return os.pread(fd, h, 0) if h <= SMALL_FILE else None
    finally:
        os.close(fd)


def _heads(files: list, fs: int) -> list | None:
    """(start, units) of the last three files (the broker's recovery reads those), each padded to whole units;
    None when one is not a small usual file (_head)."""
    heads = []
    for f in files[max(0, len(files) - 3):]:
        data = _head(f.path, fs)
        if data is None:
            return None
        if len(data) % RC.UNIT_SIZE:        # a data extent ends at a page: the unit it cuts ends in the hole
            data = data.ljust(len(data) + RC.UNIT_SIZE - len(data) % RC.UNIT_SIZE, b"\0")
        heads.append((f.start, data))
    return heads


class _Group:
    """Queues whose last files are read, then decided together."""

    def __init__(self, fs: int, cut: int | None):
        self.fs, self.cut = fs, cut
        self.states: list = []
        self.chunks: list = []      # the units of each file read, in queue order
        self.starts: list = []      # that file's start
        self.first: list = []       # per queue: its first file read (index into chunks)
        self.nbytes = 0

    def add(self, st, heads: list) -> None:
        """The queue and its last files' units (_heads)."""
        self.states.append(st)
        self.first.append(len(self.chunks))
        for start, data in heads:
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
        ph, sz, tg = u["phys"].astype(np.int64), u["size"].astype(np.int64), u["tags"].astype(np.int64)
        live = (ph != 0) | (sz != 0) | (tg != 0)
        li = _within(n)                                  # unit index within its file
        # each file's units end at its last non-zero one, as load_units reads them
        last_live = _segments(np.maximum, np.where(live, li, -1), n, -1)
        if (last_live + 1 != n).any():
            keep = li <= np.repeat(last_live, n)
            ph, sz, tg, live, li = ph[keep], sz[keep], tg[keep], live[keep], li[keep]
            n = last_live + 1
        fid = np.repeat(np.arange(nf), n)
        valid = (ph >= 0) & (sz > 0) & (ph < limit)
        pre = (ph == 0) & (sz == cqf.PRE_BLANK_SIZE)
        # the units of each file before its first invalid one
        n_ok = np.minimum(_segments(np.minimum, np.where(valid, per_file, li), n, per_file), n)
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
        low = _segments(np.minimum, np.where(below, ph, 2**62), qn, 2**62)
        last_real = _segments(np.maximum, np.where(kept & ~pre, np.arange(len(ph)), -1), qn, -1)
        max_phys = np.full(nq, -1, np.int64)
        has = last_real >= 0
        max_phys[has] = ph[last_real[has]] + sz[last_real[has]]
        seen = np.maximum(_segments(np.maximum, ph, qn, -1), -1)
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


def _within(counts):
    """0..count-1 for each segment of `counts`, concatenated."""
    import numpy as np

    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total) - np.repeat(starts, counts)


def _segments(ufunc, values, counts, empty):
    """ufunc reduced over each segment of `values` (consecutive segments of `counts` elements); `empty` for an
    empty one."""
    import numpy as np

    out = np.full(len(counts), empty, np.int64)
    some = counts > 0
    if some.any():
        out[some] = ufunc.reduceat(values, (np.cumsum(counts) - counts)[some])
    return out
