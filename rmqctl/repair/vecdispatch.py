"""The broker's dispatch rules computed per scanvec Batch as numpy arrays: the commitlog walk of
CommitLog.records done with rmqctl.scanvec, and for every record of a batch its consume-queue unit
(goes-to-CQ mask, tagsCode) and its index keys (UNIQ_KEY, then KEYS split on ' ', hashed as
`topic#key` with Java's String.hashCode).

Properties are never parsed into dicts on the fast path. A batch's property fields are gathered into
one buffer, each preceded by \\x02, so a property is exactly a segment between two \\x02 and
`parse_properties`' rules become array operations: a segment named K is one that starts with
b"K\\x01" and has a non-empty value (the value runs to the next \\x02 and may hold \\x01); the last
such segment wins. Hashes of ASCII values are the polynomial sum c_j * 31^(n-1-j) mod 2^32 done with
np.add.reduceat. Records where that shortcut is not exact -- a non-ASCII key or tag (Java hashes
UTF-16 units of the decoded string), SCHEDULE_TOPIC_XXXX with a DELAY -- go through the per-record
rules of rmqctl.dispatch with parse_properties, so the output is the broker's in every case.
"""
from __future__ import annotations

import numpy as np

from rmqctl import dispatch as D
from rmqctl.formats import commitlog as cl
from rmqctl.formats.index import java_string_hash
from rmqctl.formats import properties as P
from rmqctl.formats.properties import parse_properties
from rmqctl.scan import BLANK_RECORD
from rmqctl.scanvec import walk_file
from rmqctl.store.commitlog import FileEnd, data_estimate, open_ro

_M32 = np.uint64(0xFFFFFFFF)
_POW31: np.ndarray | None = None
_SCHED = D.SCHEDULE_TOPIC.encode()


def _pow31(n: int) -> np.ndarray:
    """31^k mod 2^32 for k < n (uint64)."""
    global _POW31
    if _POW31 is None or len(_POW31) < n:
        m = max(n, 1 << 16)
        p = np.empty(m, np.uint64)
        v = 1
        for k in range(m):     # once per process (65536 steps)
            p[k] = v
            v = (v * 31) & 0xFFFFFFFF
        _POW31 = p
    return _POW31


# --------------------------------------------------------------------------------------------------
# the walk

def batches(store, files, start=None, end=None, *, check_crc=True, check_phys=True, check_prop_crc=True,
            walk=None, progress=None, reuse=True):
    """CommitLog.records(start, end, ...) as scanvec Batches: across files, go on after a BLANK, stop
    after any other end; one FileEnd per visited file in walk.ends. reuse: every window is read into one
    buffer (no fresh pages per window), so a batch is valid only until the next one is asked for; every
    consumer here copies what it keeps."""
    fsize = store.config.commitlog_file_size
    expect_walk(store, files, start, end)
    window = window_size()
    buf = bytearray(window) if reuse else None
    for f in files:
        if end is not None and f.start >= end:
            return
        if start is not None and f.start + fsize <= start:
            continue
        pos = 0 if start is None or start <= f.start else start - f.start
        with open_ro(f.path) as fd:
            limit = min(f.size, fsize)
            if end is not None:
                limit = min(limit, end - f.start)
            gen = walk_file(fd, f.start, f.size, pos, limit, check_crc=check_crc, check_phys=check_phys,
                            check_prop_crc=check_prop_crc, path=str(f.path), buf=buf, window=window)
            n, last = 0, None
            while True:
                try:
                    b = next(gen)
                except StopIteration as e:
                    stop = e.value
                    break
                n += len(b)
                last = int(b.offset[-1])
                if progress:
                    progress.advance(int(b.total_size.sum()))
                yield b
            if walk is not None:
                walk.ends.append(FileEnd(f, stop, n, last))
        if stop.kind != BLANK_RECORD:
            return


# measured on 1 KiB messages: the compiled walk and dispatch save ~1 CPU s per GiB over numpy, numba's load
# (cached kernels) costs ~0.3-0.6 CPU s: past this many bytes auto picks numba from the first window
PAYS_AFTER = 512 << 20


# the numba kernel walks and dispatches each window while it is still in the CPU's cache: 4 MiB windows
# (measured per record against 8 MiB: walk 300 -> 200 ns, properties pass 190 -> 130 ns at 2 MiB; 4 MiB then
# beat 2 MiB by whole command on 4 and 32 queues, the per-window Python work paid half as often)
NB_WINDOW = 4 << 20


def window_size() -> int:
    """The window a rebuild/recover walk reads at a time, for the kernel in use."""
    from rmqctl.scanvec import WINDOW

    return NB_WINDOW if rebuild_kernel() is not None else WINDOW


def expect_walk(store, files, start=None, end=None, jobs: int = 1, range_bytes: int | None = None) -> None:
    """Tell the kernel choice (RMQCTL_KERNEL=auto) how many bytes a pass over [start, end) will walk, shared by
    `jobs` processes in ranges of `range_bytes` at most: what decides is each one's share, as for verify (on 16
    cores a 3 GiB rebuild finished sooner on numpy workers than after numba's load in the parent, measured), or
    the largest range a process may get when ranges are few (many queues: whole files)."""
    from rmqctl.kernels import expect_walk as expect

    fsize = store.config.commitlog_file_size
    spans = []
    for f in files:
        lo = f.start if start is None else max(f.start, start)
        hi = f.start + min(f.size, fsize)
        if end is not None:
            hi = min(hi, end)
        spans.append(max(0, hi - lo))
    share = sum(spans) // max(1, jobs)
    if jobs > 1 and range_bytes and spans and share < PAYS_AFTER <= min(range_bytes, max(spans)):
        # every file but the last is full: the last one's records end where its zeros start (lo: where the walk
        # enters it, from the loop)
        last = files[-1]
        spans[-1] = min(spans[-1], max(0, last.start + data_estimate(str(last.path), min(last.size, fsize)) - lo))
        share = max(share, min(range_bytes, max(spans)))
    expect(share, PAYS_AFTER)


# --------------------------------------------------------------------------------------------------
# properties as segments

class Props:
    """The property fields of one batch as one buffer: record i's field at [bstart[i]+1, bstart[i]+1+len),
    every field preceded by \\x02 and followed by at least one (padding is more \\x02: empty segments,
    which parse_properties ignores)."""

    def __init__(self, batch):
        u8 = np.frombuffer(batch.raw, np.uint8)
        L = batch.props_length.astype(np.int64)
        n = len(L)
        self.n = n
        lmax = int(L.max()) if n else 0
        W = lmax + 2
        if n and n * W <= 2 * int(L.sum()) + n * 16 + (1 << 20):
            # fixed-width rows: one row copy per record out of a sliding-window view of the window
            src = batch.props_rel.astype(np.int64) - 1          # the byte before: becomes the leading \x02
            lim = len(u8) - W
            near_end = src > lim
            view = np.lib.stride_tricks.sliding_window_view(u8, W) if lim >= 0 else None
            M = view[np.where(near_end, 0, src) if view is not None else np.zeros(n, np.int64)].copy() \
                if view is not None else np.zeros((n, W), np.uint8)
            for i in np.flatnonzero(near_end).tolist():
                s0 = int(src[i])
                M[i, :len(u8) - s0] = u8[s0:]
            M[:, 0] = 2
            M[np.arange(W)[None, :] > L[:, None]] = 2
            self.bstart = np.arange(n, dtype=np.int64) * W
            self.buf = M.reshape(-1)
            seps = np.flatnonzero(self.buf == 2)
            self.seg_rec = seps[:-1] // W
        else:
            self.bstart = np.zeros(n, np.int64)
            if n:
                np.cumsum(L[:-1] + 1, out=self.bstart[1:])
            total = int(L.sum()) + n + 1
            buf = np.full(total, 2, np.uint8)
            if total > n + 1:
                rep = np.repeat(batch.props_rel.astype(np.int64) - (self.bstart + 1), L)
                dst = np.arange(len(rep), dtype=np.int64) + np.repeat(np.arange(n, dtype=np.int64) + 1, L)
                buf[dst] = u8[dst + rep]
            self.buf = buf
            seps = np.flatnonzero(buf == 2)
            self.seg_rec = np.searchsorted(self.bstart, seps[:-1], "right") - 1
        self.seg_start = seps[:-1] + 1
        self.seg_end = seps[1:]

    def value(self, name: bytes):
        """(has, start, length) per record of the last non-empty property `name` (parse_properties rules)."""
        cache = self.__dict__.setdefault("_values", {})
        v = cache.get(name)
        if v is None:
            v = cache[name] = self._value(name)
        return v

    def _value(self, name: bytes):
        pat = np.frombuffer(name + b"\x01", np.uint8)
        k = len(pat)
        s, e, buf = self.seg_start, self.seg_end, self.buf
        m = (e - s) > k
        if m.any():
            cand = np.flatnonzero(m)
            cs = s[cand]
            ok = np.ones(len(cand), bool)
            for j in range(k):
                ok &= buf[cs + j] == pat[j]
            hit = cand[ok]
        else:
            hit = np.empty(0, np.int64)
        has = np.zeros(self.n, bool)
        vs = np.zeros(self.n, np.int64)
        vl = np.zeros(self.n, np.int64)
        if len(hit):
            r = self.seg_rec[hit]
            last = np.ones(len(hit), bool)
            last[:-1] = r[1:] != r[:-1]
            hit, r = hit[last], r[last]
            has[r] = True
            vs[r] = s[hit] + k
            vl[r] = e[hit] - (s[hit] + k)
        return has, vs, vl


class PropsNB:
    """Props read in place by the numba kernel (rmqctl.kernels.rebuild_nb.Scan): the same value() answers, with
    positions into the window itself (buf is the window, record i's field at bstart[i]+1), the names
    dispatch asks for found in one pass over the fields that also numbers the topics and hashes TAGS."""

    NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", P.INNER_MULTI_QUEUE_OFFSET.encode("ascii"), P.DUP_INFO.encode("ascii"))

    def __init__(self, batch, nb):
        self.n = len(batch.props_rel)
        self.nb = nb
        self.buf = np.frombuffer(batch.raw, np.uint8)
        self.rel = np.ascontiguousarray(batch.props_rel, np.int64)
        self.plen = np.ascontiguousarray(batch.props_length, np.int64)
        self.bstart = self.rel - 1
        sc = self.scan = nb.Scan(self.buf, self.rel, self.plen, batch.topic_rel, batch.topic_length, self.NAMES)
        self._values = {nm: (sc.has[k], sc.vs[k], sc.vl[k]) for k, nm in enumerate(self.NAMES)}

    def value(self, name: bytes):
        v = self._values.get(name)
        if v is None:
            has, vs, vl = self.nb.props_values(self.buf, self.rel, self.plen, (name,))
            v = self._values[name] = (has[0], vs[0], vl[0])
        return v


def rebuild_kernel():
    """rmqctl.kernels.rebuild_nb when the numba kernel is in use (RMQCTL_KERNEL), else None."""
    from rmqctl.kernels import rebuild_kernel as k

    return k()


def props_of(batch):
    """The batch's properties (Props, or PropsNB with the numba kernel), made once per batch."""
    d = getattr(batch, "__dict__", None)        # None: a batch type without a __dict__ (no caching)
    p = d.get("_props") if d is not None else None
    if p is None:
        nb = rebuild_kernel()
        p = PropsNB(batch, nb) if nb is not None else Props(batch)
        if d is not None:
            d["_props"] = p
    return p


_POWF: dict = {}


def _powf(L: int) -> np.ndarray:
    """31^(L-1-j) mod 2^32 for j < L, as float64 (exact: < 2^32)."""
    v = _POWF.get(L)
    if v is None:
        v = _POWF[L] = _pow31(L)[:L][::-1].astype(np.float64)
    return v


def hash_ranges(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray):
    """Java String.hashCode (mod 2^32, as uint64) of each ASCII byte range, and whether the range is ASCII.

    Ranges of one length L are rows of a matrix (strided gather) hashed by one float64 matrix-vector
    product with 31^(L-1-j) mod 2^32: every term is < 2^39 and L <= 8192 terms stay below 2^53, so
    the float sum is the exact integer. Other cases: per byte, summed with np.add.reduceat."""
    from rmqctl.kernels import dispatch_kernel

    nbk = dispatch_kernel()        # the numba kernel's compiled loop (RMQCTL_KERNEL)
    if nbk is not None:
        return nbk.hash_ranges(buf, starts, lens)
    n = len(starts)
    h = np.zeros(n, np.uint64)
    ascii_ok = np.ones(n, bool)
    lens = lens.astype(np.int64)
    T = int(lens.sum())
    if not T:
        return h, ascii_ok
    ls = np.unique(lens)
    if len(ls) <= 64 and int(ls[-1]) <= 8192:
        starts = starts.astype(np.int64)
        for L in ls.tolist():
            if L == 0:
                continue
            rows = np.flatnonzero(lens == L)
            M = np.lib.stride_tricks.sliding_window_view(buf, L)[starts[rows]]
            ascii_ok[rows] = M.max(axis=1) < 128
            h[rows] = (M.astype(np.float64) @ _powf(L)).astype(np.uint64) & _M32
        return h, ascii_ok
    nz = lens > 0
    seg0 = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=seg0[1:])
    within = np.arange(T, dtype=np.int64) - np.repeat(seg0, lens)
    c = buf[np.repeat(starts.astype(np.int64), lens) + within].astype(np.uint64)
    expo = np.repeat(lens, lens) - 1 - within
    prod = c * _pow31(int(lens.max()))[expo]
    at = seg0[nz]
    h[nz] = np.add.reduceat(prod, at) & _M32
    ascii_ok[nz] = np.maximum.reduceat(c, at) < 128
    return h, ascii_ok


def _signed32(h: np.ndarray) -> np.ndarray:
    v = h.astype(np.int64)
    return np.where(v >= 1 << 31, v - (1 << 32), v)


# --------------------------------------------------------------------------------------------------
# per-batch topic ids

class Topics:
    """Topic strings of a whole run, numbered. Per batch, records are grouped by topic length and
    their topic bytes compared as fixed-width rows (np.unique on the rows: exact, no hashing)."""

    def __init__(self):
        self.ids: dict[bytes, int] = {}
        self.names: list[str] = []
        self.hash: list[int] = []

    def _id(self, tb: bytes) -> int:
        i = self.ids.get(tb)
        if i is None:
            i = self.ids[tb] = len(self.names)
            t = tb.decode("utf-8", errors="replace")
            self.names.append(t)
            self.hash.append(java_string_hash(t + "#") & 0xFFFFFFFF)
        return i

    def of(self, batch) -> np.ndarray:
        u8 = np.frombuffer(batch.raw, np.uint8)
        p = props_of(batch) if len(batch.topic_rel) and rebuild_kernel() is not None else None
        if isinstance(p, PropsNB):
            local, reps = p.scan.local, p.scan.reps
            # one lookup per distinct topic of the batch (a store of many topics meets thousands per batch)
            mv = memoryview(u8)
            ids = np.asarray([self._id(bytes(mv[a:a + n]))
                              for a, n in zip(batch.topic_rel[reps].tolist(), batch.topic_length[reps].tolist())],
                             np.int64)
            return ids[local]
        tl = batch.topic_length.astype(np.int64)
        tr = batch.topic_rel.astype(np.int64)
        out = np.empty(len(tl), np.int64)
        for L in np.unique(tl).tolist():
            rows = np.flatnonzero(tl == L) if len(tl) and (tl[0] != L or tl[-1] != L or (tl != L).any()) \
                else np.arange(len(tl))
            M = u8[tr[rows, None] + np.arange(L)]
            if (M == M[0]).all():
                out[rows] = self._id(M[0].tobytes())
                continue
            uniq, inv = np.unique(M.view(f"V{L}").ravel(), return_inverse=True)
            ids = np.asarray([self._id(bytes(u)) for u in uniq], np.int64)
            out[rows] = ids[inv.ravel()]
        return out


# --------------------------------------------------------------------------------------------------
# consume queue units

_TAG_CACHE: dict = {}


def tags_codes(batch, props: Props, topic_ids: np.ndarray, topics: Topics, delay_levels,
               rows: np.ndarray) -> np.ndarray:
    """tagsCode of the records `rows` of the batch (int64)."""
    has, vs, vl = props.value(b"TAGS")
    has, vs, vl = has[rows], vs[rows], vl[rows]
    if isinstance(props, PropsNB):
        code, ok = props.scan.tags_hash[rows], props.scan.tags_ascii[rows]
    else:
        h, ok = hash_ranges(props.buf, vs, np.where(has, vl, 0))
        code = np.where(has, _signed32(h), 0)
    slow = has & ~ok
    sched_id = topics.ids.get(_SCHED)
    if sched_id is not None:
        slow |= topic_ids[rows] == sched_id
    for j in np.flatnonzero(slow).tolist():
        i = int(rows[j])
        p = parse_properties(props.buf[props.bstart[i] + 1:props.bstart[i] + 1 + int(batch.props_length[i])]
                             .tobytes())
        code[j] = D.tags_code(topics.names[int(topic_ids[i])], p, int(batch.store_timestamp[i]), delay_levels)
    return code


def has_multi_dispatch(batch) -> bool:
    """Whether any record of the batch may carry multi-dispatch offsets (cheap byte search)."""
    return D.MULTI_OFFSET_PROPERTY in batch.raw


def multi_targets(batch, props: Props, rows: np.ndarray, topic_ids: np.ndarray, topics: Topics, enable_lmq: bool):
    """Multi-dispatch targets (ConsumeQueue.multiDispatchLmqQueue) of the records `rows`: arrays
    (position into rows, target topic id, target queue id, target queue offset), or None."""
    has, _, _ = props.value(P.INNER_MULTI_QUEUE_OFFSET.encode("ascii"))
    cand = np.flatnonzero(has[rows])
    if not len(cand):
        return None
    pos, tid, qid, qoff = [], [], [], []
    for j in cand.tolist():
        i = int(rows[j])
        p = parse_properties(props.buf[props.bstart[i] + 1:props.bstart[i] + 1 + int(batch.props_length[i])]
                             .tobytes())
        for name, q, o in D.lmq_targets(topics.names[int(topic_ids[i])], int(batch.queue_id[i]), p, enable_lmq):
            pos.append(j)
            tid.append(topics._id(name.encode("utf-8")))
            qid.append(q)
            qoff.append(o)
    if not pos:
        return None
    a = lambda v: np.asarray(v, np.int64)     # noqa: E731
    return a(pos), a(tid), a(qid), a(qoff)


def cq_mask(batch) -> np.ndarray:
    t = batch.sys_flag & cl.TRANSACTION_MASK
    return (t == cl.TRANSACTION_NOT_TYPE) | (t == cl.TRANSACTION_COMMIT_TYPE)


def groups(keys: np.ndarray):
    """(key, row indices in order) for each distinct key of an int64 array."""
    if not len(keys):
        return
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(k)].tolist()):
        yield int(k[a]), order[a:b]


# --------------------------------------------------------------------------------------------------
# index keys

def index_items(batch, props: Props, topic_ids: np.ndarray, topics: Topics, rows: np.ndarray):
    """(item_row, item_hash) for the records `rows` (positions into the batch, increasing): every
    key IndexService.buildIndex puts, in its order; item_row indexes `rows`."""
    rows = np.asarray(rows, np.int64)
    not_rb = (batch.sys_flag[rows] & cl.TRANSACTION_MASK) != cl.TRANSACTION_ROLLBACK_TYPE
    uh, us, ul = props.value(b"UNIQ_KEY")
    kh, ks, kl = props.value(b"KEYS")
    buf = props.buf
    if isinstance(props, PropsNB):
        th = np.asarray(topics.hash, np.uint64)[topic_ids[rows]] if len(rows) else np.empty(0, np.uint64)
        item_row, h, ok = props.nb.index_items(buf, rows, not_rb, uh, us, ul, kh, ks, kl, th)
        return _non_ascii_items(batch, props, topic_ids, topics, rows, item_row, h, ok)
    uh, us, ul, kh, ks, kl = uh[rows] & not_rb, us[rows], ul[rows], kh[rows] & not_rb, ks[rows], kl[rows]
    # KEYS pieces: split each value at spaces, drop empty pieces
    kidx = np.flatnonzero(kh)
    p_row = np.empty(0, np.int64)
    p_s = p_l = p_row
    if len(kidx):
        vs, ve = ks[kidx], ks[kidx] + kl[kidx]
        sp = np.flatnonzero(buf == 0x20)
        r = np.searchsorted(vs, sp, "right") - 1
        inside = (r >= 0) & (sp < ve[np.maximum(r, 0)])
        sp, r = sp[inside], r[inside]
        starts = np.concatenate([vs, sp + 1])
        ends = np.concatenate([sp, ve])
        owner = np.concatenate([kidx, kidx[r]])
        o1, o2 = np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable")
        starts, ends, owner = starts[o1], ends[o2], owner[o1]
        keep = ends > starts
        p_row, p_s, p_l = owner[keep], starts[keep], (ends - starts)[keep]
    u_row = np.flatnonzero(uh)
    item_row = np.concatenate([u_row, p_row])
    item_s = np.concatenate([us[u_row], p_s])
    item_l = np.concatenate([ul[u_row], p_l])
    kind = np.concatenate([np.zeros(len(u_row), np.int8), np.ones(len(p_row), np.int8)])
    order = np.lexsort((item_s, kind, item_row))
    item_row, item_s, item_l = item_row[order], item_s[order], item_l[order]
    hv, ok = hash_ranges(buf, item_s, item_l)
    tid = topic_ids[rows[item_row]]
    th = np.asarray(topics.hash, np.uint64)[tid] if len(tid) else np.empty(0, np.uint64)
    full = ((th * _pow31(int(item_l.max()) + 1 if len(item_l) else 1)[item_l]) & _M32) + hv
    h = _signed32(full & _M32)
    h = np.abs(h)
    h = np.where(h >= 1 << 31, 0, h)
    return _non_ascii_items(batch, props, topic_ids, topics, rows, item_row, h, ok)


def _non_ascii_items(batch, props, topic_ids, topics, rows, item_row, h, ok):
    """Records with a non-ASCII key: their items from the per-record rules on the decoded strings."""
    buf = props.buf
    bad = np.unique(item_row[~ok])
    if len(bad):
        # non-ASCII keys: the per-record rules on the decoded strings
        keep = ~np.isin(item_row, bad)
        rr, hh = [item_row[keep]], [h[keep]]
        from rmqctl.repair.rebuild_index import _jhash

        for j in bad.tolist():
            i = int(rows[j])
            p = parse_properties(buf[props.bstart[i] + 1:props.bstart[i] + 1 + int(batch.props_length[i])].tobytes())
            t = topics.names[int(topic_ids[i])]
            ks_ = [_jhash(f"{t}#{k}") for k in D.index_keys(p)]
            rr.append(np.full(len(ks_), j, np.int64))
            hh.append(np.asarray(ks_, np.int64))
        item_row = np.concatenate(rr)
        h = np.concatenate(hh)
        o = np.argsort(item_row, kind="stable")
        item_row, h = item_row[o], h[o]
    return item_row, h
