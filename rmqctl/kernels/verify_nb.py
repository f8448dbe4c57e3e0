"""verify's per-record checks after the walk (rmqctl.check.commitlog_batch.RangeScan), compiled by numba:
one pass over each record's properties (structure, TAGS hash, multi-dispatch marker), topic interning, queue
numbers, queue-offset continuity and the comparison of every record with its consume-queue unit. What is rare
(a suspicious field, a TAGS value that is not ASCII or not alone, a new topic or queue, a consume queue read
unit by unit) is handed back to Python, which decides it as the numpy path does. Used by
rmqctl.check.commitlog_nb when the numba kernel is selected; proven equal to the numpy path in
tests/test_verify_kernel.py."""
from __future__ import annotations

import numpy as np
from numba import njit

from rmqctl.dispatch import MULTI_OFFSET_PROPERTY

# flags per record (props_scan)
SUSPICIOUS = 1      # properties structure needs the full check: no final separator, non-ASCII, \x02\x02
TAGS_PARSE = 2      # TAGS twice or not at a segment start: parse every property (as the broker)
TAGS_VALUE = 4      # TAGS value not ASCII: hash it in Python (decode, or parse when undecodable)
MULTI = 8           # INNER_MULTI_QUEUE_OFFSET\x01 in the field

_MULTI = np.frombuffer(MULTI_OFFSET_PROPERTY, np.uint8).copy()
_FNV0 = 0xCBF29CE484222325
_FNVP = 0x100000001B3
_M64 = (1 << 64) - 1


_LOW3 = np.uint64(0x0303030303030303)
_HIGH = np.uint64(0x8080808080808080)


@njit(cache=True, nogil=True)
def props_scan(b, w, prel, plen, flags, tags):
    """Per record: flags (above) and the Java String.hashCode of its TAGS value (0 without TAGS; valid where
    neither TAGS flag is set). Every "TAGS\x01" and "INNER_MULTI_QUEUE_OFFSET\x01" ends at a \x01, so the
    names are compared only there. `w`: b's first len(b) // 8 * 8 bytes as little-endian uint64 words; an
    aligned word with no byte below 3 and none from 0x80 on (one test for the 8) holds nothing to look at."""
    pat = _MULTI
    m = len(pat)
    for i in range(len(prel)):
        a = prel[i]
        e = a + plen[i]
        f = 0
        if e > a and b[e - 1] != 2:
            f |= SUSPICIOUS
        cnt = 0
        hit = -1
        j = a
        while j < e:
            if (j & 7) == 0 and j + 8 <= e:
                x = w[j >> 3]
                if ((x - _LOW3) & ~x & _HIGH) == 0 and (x & _HIGH) == 0:
                    j += 8
                    continue
            c = b[j]
            if c > 2 and c < 0x80:
                j += 1
                continue
            if c >= 0x80:
                f |= SUSPICIOUS
            elif c == 2:
                if j > a and b[j - 1] == 2:
                    f |= SUSPICIOUS
            elif c == 1:
                if j - 4 >= a and b[j - 1] == 0x53 and b[j - 2] == 0x47 and b[j - 3] == 0x41 and b[j - 4] == 0x54:
                    cnt += 1
                    hit = j - 4
                elif j - m + 1 >= a and b[j - 1] == pat[m - 2]:
                    ok = True
                    for k in range(m - 1):
                        if b[j - m + 1 + k] != pat[k]:
                            ok = False
                            break
                    if ok:
                        f |= MULTI
            j += 1
        h = np.int64(0)
        if cnt > 1 or (cnt == 1 and hit != a and b[hit - 1] != 2):
            f |= TAGS_PARSE
        elif cnt == 1:
            v = np.int64(0)
            j = hit + 5
            while j < e:
                c = b[j]
                if c == 2:
                    break
                if c >= 0x80:
                    f |= TAGS_VALUE
                v = (v * 31 + c) & 0xFFFFFFFF
                j += 1
            h = v
            if h >= 1 << 31:
                h -= 1 << 32
        flags[i] = f
        tags[i] = h


@njit(cache=True, nogil=True, inline="always")
def _fnv(buf, a, n):
    h = np.uint64(_FNV0)
    for j in range(a, a + n):
        h = (h ^ np.uint64(buf[j])) * np.uint64(_FNVP)
    return h


@njit(cache=True, nogil=True)
def topic_ids(b, trel, tlen, start, tab, pool, e_off, e_len, e_tn, e_bad, ids, bad):
    """Topic number (and bytes-not-UTF-8) of records start.. from the table of known topic byte strings;
    returns the index of the first record whose topic is not in the table (len(trel) when all are)."""
    mask = len(tab) - 1
    pa = -1
    pl = -1
    pe = -1
    for i in range(start, len(trel)):
        a = trel[i]
        n = tlen[i]
        e = -1
        if pe >= 0 and n == pl:
            e = pe
            for j in range(n):
                if b[a + j] != b[pa + j]:
                    e = -1
                    break
        if e < 0:
            s = np.int64(_fnv(b, a, n) & np.uint64(mask))
            while True:
                x = tab[s]
                if x < 0:
                    break
                if e_len[x] == n:
                    o = e_off[x]
                    same = True
                    for j in range(n):
                        if pool[o + j] != b[a + j]:
                            same = False
                            break
                    if same:
                        e = x
                        break
                s = (s + 1) & mask
            if e < 0:
                return i
        ids[i] = e_tn[e]
        bad[i] = e_bad[e]
        pa, pl, pe = a, n, e
    return len(trel)


class TopicTable:
    """Topic byte strings -> (topic number, bytes not UTF-8), looked up by topic_ids (open addressing)."""

    def __init__(self):
        self.tab = np.full(64, -1, np.int64)
        self.pool = np.zeros(1024, np.uint8)
        self.used = 0
        self.e_off = np.zeros(16, np.int64)
        self.e_len = np.zeros(16, np.int64)
        self.e_tn = np.zeros(16, np.int64)
        self.e_bad = np.zeros(16, np.bool_)
        self.n = 0

    @staticmethod
    def _hash(tb: bytes) -> int:
        h = _FNV0
        for c in tb:
            h = ((h ^ c) * _FNVP) & _M64
        return h

    def _place(self, k: int, h: int) -> None:
        mask = len(self.tab) - 1
        s = h & mask
        while self.tab[s] >= 0:
            s = (s + 1) & mask
        self.tab[s] = k

    def add(self, tb: bytes, tn: int, bad: bool) -> None:
        k = self.n
        if k == len(self.e_off):
            for name in ("e_off", "e_len", "e_tn", "e_bad"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate((a, np.zeros_like(a))))
        if self.used + len(tb) > len(self.pool):
            self.pool = np.concatenate((self.pool, np.zeros(max(len(self.pool), len(tb)), np.uint8)))
        self.pool[self.used:self.used + len(tb)] = np.frombuffer(tb, np.uint8)
        self.e_off[k], self.e_len[k], self.e_tn[k], self.e_bad[k] = self.used, len(tb), tn, bad
        self.used += len(tb)
        self.n += 1
        if 2 * self.n > len(self.tab):
            self.tab = np.full(2 * len(self.tab), -1, np.int64)
            for x in range(self.n):
                o = int(self.e_off[x])
                self._place(x, self._hash(bytes(self.pool[o:o + int(self.e_len[x])])))
        else:
            self._place(k, self._hash(tb))

    def lookup(self, b, trel, tlen, start, ids, bad) -> int:
        return topic_ids(b, trel, tlen, start, self.tab, self.pool, self.e_off, self.e_len, self.e_tn, self.e_bad,
                         ids, bad)


@njit(cache=True, nogil=True)
def queue_numbers(tn, qid, ks, kn, g):
    """Queue number of every row from the sorted known keys (topic number << 32 | queue id); -1 where unknown.
    Returns the number of unknown rows."""
    unknown = 0
    nk = len(ks)
    pk = np.int64(-1)
    pg = -1
    for r in range(len(tn)):
        key = (tn[r] << 32) | (qid[r] & 0xFFFFFFFF)
        if pg >= 0 and key == pk:
            g[r] = pg
            continue
        lo = 0
        hi = nk
        while lo < hi:
            mid = (lo + hi) >> 1
            if ks[mid] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < nk and ks[lo] == key:
            pg = kn[lo]
            pk = key
            g[r] = pg
        else:
            g[r] = -1
            pg = -1
            unknown += 1
    return unknown


@njit(cache=True, nogil=True)
def track(g, qoff, off, first_q, last_q, next_q, count, first_phys, gaps, prev_out):
    """Queue-offset continuity of the rows in commitlog order (every row one unit: INNER_NUM 1). Returns the
    rows that jump (prev_out[r]: the offset expected there)."""
    out = np.empty(len(g), np.int64)
    k = 0
    for r in range(len(g)):
        q = g[r]
        if count[q] == 0:
            first_q[q] = qoff[r]
            first_phys[q] = off[r]
        else:
            p = next_q[q]
            if p >= 0 and qoff[r] != p:
                gaps[q] += 1
                out[k] = r
                prev_out[r] = p
                k += 1
        count[q] += 1
        last_q[q] = qoff[r]
        next_q[q] = qoff[r] + 1
    return out[:k]


@njit(cache=True, nogil=True)
def local_queues(g, cmp, qoff, lq, order, qmin, qmax, nrows, mark):
    """Number the queues of the compared rows in order of first appearance (lq per row, -1 for rows not
    compared; order: their queue numbers), with their smallest and largest queue offset and row count. `mark`
    (one slot per queue, all -1) is all -1 again on return. Returns the number of local queues."""
    m = 0
    for r in range(len(g)):
        if not cmp[r]:
            lq[r] = -1
            continue
        q = g[r]
        x = mark[q]
        v = qoff[r]
        if x < 0:
            x = mark[q] = m
            order[m] = q
            qmin[m] = qmax[m] = v
            nrows[m] = 0
            m += 1
        elif v < qmin[x]:
            qmin[x] = v
        elif v > qmax[x]:
            qmax[x] = v
        nrows[x] += 1
        lq[r] = x
    for x in range(m):
        mark[order[x]] = -1
    return m


_QMAX = ((1 << 62) - 1) // 20     # a larger queue offset's byte position is absurd (a damaged QUEUEOFFSET)


@njit(cache=True, nogil=True)
def plan(order, qmin, qmax, nrows, m, cqfs, c_f0, c_p0, c_n, c_at, w_start, w_base, w_j0, w_end, todo):
    """Where compare finds each local queue's units (its w_* entries) when the queue's cached consume-queue
    piece (rmqctl.check.cq_units.CqPool: c_f0 .. c_at per queue number) holds its offsets qmin..qmax. The
    others are left to Python, in todo (returns how many): w_end -1, one unit at a time (a negative or absurd
    offset, offsets crossing a consume-queue file or scattered), or -2, the piece is read first."""
    k = 0
    for x in range(m):
        q = order[x]
        lo = qmin[x]
        hi = qmax[x]
        w_end[x] = -1
        if lo < 0 or hi > _QMAX:
            todo[k] = x
            k += 1
            continue
        b0 = lo * 20
        b1 = hi * 20
        f0 = b0 - b0 % cqfs
        if f0 != b1 - b1 % cqfs or hi - lo > 4 * nrows[x] + 1024:
            todo[k] = x
            k += 1
            continue
        p0 = b0 - f0
        p1 = b1 - f0 + 20
        if q < len(c_f0) and c_f0[q] == f0 and c_p0[q] <= p0 and p1 <= c_p0[q] + 20 * c_n[q]:
            w_base[x] = f0 + c_p0[q]
            w_j0[x] = 0
            w_end[x] = c_n[q]
            w_start[x] = c_at[q]
        else:
            w_end[x] = -2
            todo[k] = x
            k += 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _be(buf, p, n):
    v = np.int64(0)
    for j in range(n):
        v = (v << 8) | np.int64(buf[p + j])
    if n == 4 and v >= 1 << 31:
        v -= 1 << 32
    return v


@njit(cache=True, nogil=True)
def compare(lq, g, qoff, off, tot, tags, units, w_start, w_base, w_j0, w_end, preset, pp, ps, pt, has_floor,
            floor, missing, mismatches, up, us, ut):
    """Each compared row (lq >= 0) against its unit, from the local queue's cached consume-queue piece: unit j =
    (queue offset * 20 - w_base) // 20 of the piece is there when j < w_end, its big-endian 20 bytes at
    units[w_start + 20 * (j - w_j0)] (w_end < 0: the row's unit was looked up in Python, in preset/pp/ps/pt).
    Counts missing and mismatching units per queue; returns (kind, row) events in row order (kind 0 missing,
    1 mismatch) with up/us/ut filled."""
    ev = np.empty((len(lq), 2), np.int64)
    k = 0
    for r in range(len(lq)):
        x = lq[r]
        if x < 0:
            continue
        n = w_end[x]
        if n < 0:
            present = preset[r]
            p, s, t = pp[r], ps[r], pt[r]
        else:
            j = (qoff[r] * 20 - w_base[x]) // 20
            present = j < n
            p = s = t = 0
            if present:
                a = w_start[x] + 20 * (j - w_j0[x])
                p = _be(units, a, 8)
                s = _be(units, a + 8, 4)
                t = _be(units, a + 12, 8)
        up[r], us[r], ut[r] = p, s, t
        q = g[r]
        if not present or p < 0 or s <= 0:
            missing[q] += 1
            ev[k, 0] = 0
            ev[k, 1] = r
            k += 1
        elif p != off[r] or s != tot[r] or (t != tags[r] and (not has_floor or t > floor)):
            mismatches[q] += 1
            ev[k, 0] = 1
            ev[k, 1] = r
            k += 1
    return ev[:k]


def warm() -> None:
    """Load every kernel above (from the compile cache) with the argument types verify passes: called before
    verify's workers fork, so they inherit the loaded code instead of each loading it."""
    i64, b = np.zeros(1, np.int64), np.zeros(8, np.uint8)
    z = lambda: np.zeros(1, np.int64)    # noqa: E731
    props_scan(b, b.view(np.uint64), i64, i64, np.zeros(1, np.int8), z())
    TopicTable().lookup(b, i64, i64, 0, z(), np.zeros(1, np.bool_))
    queue_numbers(i64, i64, i64, i64, z())
    track(i64, i64, i64, z(), z(), z(), z(), z(), z(), z())
    local_queues(i64, np.zeros(1, np.bool_), i64, z(), z(), z(), z(), z(), np.full(1, -1, np.int64))
    plan(i64, i64, i64, i64, 1, 1280, i64, i64, i64, i64, z(), z(), z(), z(), z())
    compare(np.full(1, -1, np.int64), i64, i64, i64, i64, i64, b, i64, i64, i64, i64, np.zeros(1, np.bool_), i64,
            i64, i64, False, 0, z(), z(), z(), z(), z())
