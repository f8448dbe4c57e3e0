"""The per-record work of rebuild and recover compiled by numba (used when the numba kernel is selected,
rmqctl.kernels): the properties fields read in place (no copy into a segment buffer), topic numbering, index
items (UNIQ_KEY then the KEYS pieces, hashed as `topic#key` with Java's String.hashCode), IndexFile.putKey
over a run of items, and consume-queue units grouped by queue. Each function gives exactly what its numpy
counterpart in rmqctl.repair.vecdispatch / rmqctl.repair.rebuild_index gives (tests/test_rebuild_nb.py); the
cases the numpy path sends to the per-record rules (non-ASCII keys and tags, SCHEDULE_TOPIC_XXXX) are flagged
here and sent there too."""
from __future__ import annotations

import numpy as np
from numba import njit

_M32 = np.uint64(0xFFFFFFFF)


# --------------------------------------------------------------------------------------------------
# one pass per batch: the properties fields and the topics
#
# properties: segments between \x02 inside each record's field; a segment named K starts with K\x01 and
# has a non-empty value; the last such segment of a field wins (rmqctl.formats.properties). The first
# name's value is also hashed (Java String.hashCode, sign-extended: the TAGS tagsCode) with an ASCII flag.
# topics: records numbered by their topic bytes (exact: a hash finds candidates, the bytes decide).

@njit(cache=True, nogil=True)
def _fold(buf, v, s, L):
    """Java's hash step h = 31 h + c over buf[s:s+L] from v, mod 2^64 (so mod 2^32 too), four bytes per
    step (the multiplications of a step are independent); and the OR of the bytes (ASCII when < 128)."""
    e = s + L
    p = s
    hi = 0
    while p + 4 <= e:
        c0, c1, c2, c3 = buf[p], buf[p + 1], buf[p + 2], buf[p + 3]
        v = v * np.uint64(923521) + (np.uint64(c0) * np.uint64(29791) + np.uint64(c1) * np.uint64(961)
                                     + np.uint64(c2) * np.uint64(31) + np.uint64(c3))
        hi |= c0 | c1 | c2 | c3
        p += 4
    while p < e:
        c = buf[p]
        v = v * np.uint64(31) + np.uint64(c)
        hi |= c
        p += 1
    return v, hi


@njit(cache=True, nogil=True)
def _same(buf, a, b, L):
    for j in range(L):
        if buf[a + j] != buf[b + j]:
            return False
    return True


@njit(cache=True, nogil=True)
def _scan(buf, rel, plen, pats, pat_off, has, vs, vl, h0, ok0, trel, tlen, local, reps):
    K = len(pat_off) - 1
    n = len(rel)
    for i in range(n):
        a = rel[i]
        e = a + plen[i]
        s = a
        while s < e:
            t = s
            while t < e and buf[t] != 2:
                t += 1
            c0 = buf[s]
            for k in range(K):
                p0 = pat_off[k]
                m = pat_off[k + 1] - p0
                if c0 == pats[p0] and t - s > m:
                    ok = True
                    for j in range(1, m):
                        if buf[s + j] != pats[p0 + j]:
                            ok = False
                            break
                    if ok:
                        has[k, i] = True
                        vs[k, i] = s + m
                        vl[k, i] = t - s - m
                        break
            s = t + 1
        if has[0, i]:
            v, hi = _fold(buf, np.uint64(0), vs[0, i], vl[0, i])
            x = np.int64(v & np.uint64(0xFFFFFFFF))
            h0[i] = x - 4294967296 if x >= 2147483648 else x
            ok0[i] = hi < 128
    # topics
    size = 64
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, np.int64)
    hashes = np.zeros(size, np.uint64)
    nrep = 0
    for i in range(n):
        a = trel[i]
        L = tlen[i]
        if i > 0 and tlen[i - 1] == L and _same(buf, a, trel[i - 1], L):
            local[i] = local[i - 1]
            continue
        h = np.uint64(1469598103934665603)
        for j in range(L):
            h = (h ^ np.uint64(buf[a + j])) * np.uint64(1099511628211)
        h ^= np.uint64(L)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            r = table[slot]
            if r < 0:
                table[slot] = nrep
                hashes[slot] = h
                reps[nrep] = i
                local[i] = nrep
                nrep += 1
                break
            if hashes[slot] == h and tlen[reps[r]] == L and _same(buf, a, trel[reps[r]], L):
                local[i] = r
                break
            slot = (slot + 1) & (size - 1)
    return nrep


class Scan:
    """One batch's properties and topics: value(k) = (has, start, length) of names[k] per record (positions
    into buf); tags_hash/tags_ascii: the hash of names[0]'s value; local/reps: record i's topic number
    in the batch and the first record of each number."""

    def __init__(self, buf, rel, plen, trel, tlen, names: tuple[bytes, ...]):
        n = len(rel)
        K = len(names)
        pats = np.frombuffer(b"".join(nm + b"\x01" for nm in names), np.uint8).copy()
        off = np.zeros(K + 1, np.int64)
        np.cumsum([len(nm) + 1 for nm in names], out=off[1:])
        self.has = np.zeros((K, n), np.bool_)
        self.vs = np.zeros((K, n), np.int64)
        self.vl = np.zeros((K, n), np.int64)
        self.tags_hash = np.zeros(n, np.int64)
        self.tags_ascii = np.ones(n, np.bool_)
        self.local = np.zeros(n, np.int64)
        reps = np.zeros(n, np.int64)
        k = 0
        if n:
            k = _scan(buf, np.ascontiguousarray(rel, np.int64), np.ascontiguousarray(plen, np.int64), pats, off,
                      self.has, self.vs, self.vl, self.tags_hash, self.tags_ascii,
                      np.ascontiguousarray(trel, np.int64), np.ascontiguousarray(tlen, np.int64), self.local, reps)
        self.reps = reps[:k]


def props_values(buf, rel, plen, names: tuple[bytes, ...]):
    """(has, start, length) arrays of shape (len(names), n) for the properties fields buf[rel[i]:rel[i]+plen[i]]."""
    z = np.ones(len(rel), np.int64)
    sc = Scan(buf, rel, plen, np.zeros(len(rel), np.int64), z, names)
    return sc.has, sc.vs, sc.vl


# --------------------------------------------------------------------------------------------------
# index items (IndexService.buildIndex): UNIQ_KEY, then KEYS split on single spaces, empty pieces dropped

@njit(cache=True, nogil=True)
def _hash_key(buf, th, s, L):
    v, hi = _fold(buf, th, s, L)
    x = np.int64(v & np.uint64(0xFFFFFFFF))
    if x >= 2147483648:
        x -= 4294967296
    if x < 0:
        x = -x
    if x >= 2147483648:
        x = 0
    return x, hi < 128


@njit(cache=True, nogil=True)
def _fill_items(buf, rows, use, uh, us, ul, kh, ks, kl, th, item_row, item_hash, item_ok):
    c = 0
    for j in range(len(rows)):
        if not use[j]:
            continue
        i = rows[j]
        if uh[i]:
            item_row[c] = j
            item_hash[c], item_ok[c] = _hash_key(buf, th[j], us[i], ul[i])
            c += 1
        if kh[i]:
            s = ks[i]
            e = s + kl[i]
            a = s
            for p in range(s, e + 1):
                if p == e or buf[p] == 0x20:
                    if p > a:
                        item_row[c] = j
                        item_hash[c], item_ok[c] = _hash_key(buf, th[j], a, p - a)
                        c += 1
                    a = p + 1
    return c


def index_items(buf, rows, use, uh, us, ul, kh, ks, kl, th):
    """(item_row, item_hash, item_ok) for the records rows[j] with use[j] (not ROLLBACK): item_row indexes
    rows; item_hash is abs(Java hashCode of topic#key) as IndexService puts it (th[j]: the hash of the
    record's `topic#`); item_ok: the key is ASCII (else the per-record rules decide the record)."""
    rows = np.ascontiguousarray(rows, np.int64)
    use = np.ascontiguousarray(use, np.bool_)
    th = np.ascontiguousarray(th, np.uint64)
    # at most one item per UNIQ_KEY and one per KEYS piece (a piece and its space: 2 bytes)
    r = rows[use]
    m = int(uh[r].sum()) + int(((kl[r] + 1) // 2)[kh[r]].sum()) if len(r) else 0
    item_row = np.empty(m, np.int64)
    item_hash = np.empty(m, np.int64)
    item_ok = np.empty(m, np.bool_)
    c = _fill_items(buf, rows, use, uh, us, ul, kh, ks, kl, th, item_row, item_hash, item_ok) if m else 0
    return item_row[:c], item_hash[:c], item_ok[:c]


# --------------------------------------------------------------------------------------------------
# IndexFile.putKey for a run of items that fit the file

@njit(cache=True, nogil=True, inline="always")
def _be(out, o, v, width):
    """v's low `width` bytes, big-endian, at out[o:o + width]."""
    for q in range(width):
        out[o + q] = (v >> (8 * (width - 1 - q))) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _put_item(out, x, h, phy, ts, begin_ts0, begin_ts1, pre):
    b = begin_ts0 if x == 0 else begin_ts1
    d = ts - b
    if d < 0:
        d = 0
    else:
        d = d // 1000
    if b <= 0:
        d = 0
    elif d > 2147483647:
        d = 2147483647
    o = 20 * x
    _be(out, o, h, 4)
    _be(out, o + 4, phy, 8)
    _be(out, o + 12, d, 4)
    _be(out, o + 16, pre, 4)


@njit(cache=True, nogil=True)
def _put_keys(slots, S, h, phy, ts, n0, begin_ts0, begin_ts1, out):
    added = 0
    for x in range(len(h)):
        num = n0 + x
        slot = h[x] % S
        pre = np.int64(slots[slot])
        if pre <= 0 or pre > num:
            pre = 0
            added += 1
        slots[slot] = num
        _put_item(out, x, h[x], phy[x], ts[x], begin_ts0, begin_ts1, pre)
    return added


@njit(cache=True, nogil=True)
def _put_keys_blocked(slots, S, h, phy, ts, n0, begin_ts0, begin_ts1, out, bits):
    """_put_keys with the slot table visited one block of 2^bits slots at a time: the items are counted and
    placed by block (stable), and each block's items update the table in item order, after the block is read
    through once in address order when they are many (the hardware fetches ahead on that read; the updates
    then hit the cache instead of missing at random). Every slot sees the same items in the same order, so
    the result is _put_keys's."""
    k = len(h)
    nbk = ((S - 1) >> bits) + 1
    start = np.zeros(nbk + 1, np.int64)
    sl = np.empty(k, np.int32)
    for x in range(k):
        s = h[x] % S
        sl[x] = s
        start[(s >> bits) + 1] += 1
    for b in range(nbk):
        start[b + 1] += start[b]
    pos = start[:nbk].copy()
    ss = np.empty(k, np.int32)
    xs = np.empty(k, np.int32)
    for x in range(k):
        s = sl[x]
        b = s >> bits
        p = pos[b]
        ss[p] = s
        xs[p] = x
        pos[b] = p + 1
    pres = sl                  # each item's preIndexNo, in item order (the slot numbers are not needed again)
    added = 0
    touched = 0
    dense = (1 << bits) >> 7   # items from which a block is read through first (a cache line holds 16 slots)
    for b in range(nbk):
        if start[b + 1] - start[b] >= dense:
            for q in range(b << bits, min(S, (b + 1) << bits), 16):
                touched += slots[q]
        for j in range(start[b], start[b + 1]):
            s = ss[j]
            num = n0 + xs[j]
            pre = np.int64(slots[s])
            if pre <= 0 or pre > num:
                pre = 0
                added += 1
            slots[s] = num
            pres[xs[j]] = pre
    for x in range(k):
        _put_item(out, x, h[x], phy[x], ts[x], begin_ts0, begin_ts1, pres[x])
    return added, touched     # the sum read keeps the read-through from being compiled away


BLOCK_BITS = 14          # 64 KiB of slot table a block (measured 13-15 alike; 5 M slots: 306 blocks)
BLOCKED_ITEMS = 1 << 15  # fewer items pay less than the two extra passes save
SAMPLE = 8192            # items whose slots tell whether a run's keys scatter over the table


def scattered(h, S: int) -> bool:
    """Whether a run's first SAMPLE keys fall on more than half as many distinct 64-byte lines of the slot table as
    there are keys. Keys a broker writes are often near-sequential (UNIQ_KEY ends in a counter, KEYS are often
    numbered) and their hashes, so their slots, can cluster: on a store written by the broker 8192 keys fell on
    1217 lines, the one pass hit the cache and blocks cost 3 %. Where each key has a line of its own (7311 lines
    for 8192 keys on a generated store: neighbours by page, but spread over the whole table in a run), blocks pay
    (rebuild index 7 % faster on 6.4 GB)."""
    m = min(len(h), SAMPLE)
    lines = np.unique((np.asarray(h[:m], np.int64) % S) >> 4).size
    return 2 * lines > m


def put_keys(slots: np.ndarray, S: int, h, phy, ts, n0: int, begin_ts0: int, begin_ts1: int,
             bits: int | None = None):
    """Items n0, n0+1, ... of an index file in order: updates the slot table (int32) and returns (the
    20-byte big-endian items, how many found their slot empty). The first item is timed against
    begin_ts0 (the header's beginTimestamp before it is put), the others against begin_ts1. Long runs
    over a large table whose keys scatter go by blocks of 2^bits slots (BLOCK_BITS unless given; 0: one pass in
    item order)."""
    k = len(h)
    out = np.empty(20 * k, np.uint8)
    if not k:
        return out, 0
    if bits is None:
        bits = BLOCK_BITS if k >= BLOCKED_ITEMS and S >> BLOCK_BITS >= 8 and scattered(h, S) else 0
    args = (slots, np.int64(S), np.ascontiguousarray(h, np.int64), np.ascontiguousarray(phy, np.int64),
            np.ascontiguousarray(ts, np.int64), np.int64(n0), np.int64(begin_ts0), np.int64(begin_ts1), out)
    added = _put_keys_blocked(*args, np.int64(bits))[0] if bits else _put_keys(*args)
    return out, int(added)


# --------------------------------------------------------------------------------------------------
# a window's consume-queue units grouped by queue (rmqctl.repair.batch_dispatch._put_groups)

@njit(cache=True, nogil=True)
def _group_ids(keys, gid, cells):
    """gid[i]: the number of keys[i] (topic id << 32 | queue id) among the distinct keys in order of first
    appearance; returns (count, the row of each key's first appearance), or (-1, ...) when the keys span more
    than `cells` (topic, queue) pairs."""
    n = len(keys)
    mt = 0
    mq = 0
    for i in range(n):
        t = keys[i] >> 32
        q = keys[i] & 0xFFFFFFFF
        if t > mt:
            mt = t
        if q > mq:
            mq = q
    first = np.empty(n, np.int64)
    if (mt + 1) * (mq + 1) > cells:
        return -1, first[:0]
    table = np.full((mt + 1) * (mq + 1), -1, np.int64)
    ng = 0
    for i in range(n):
        c = (keys[i] >> 32) * (mq + 1) + (keys[i] & 0xFFFFFFFF)
        g = table[c]
        if g < 0:
            g = ng
            table[c] = g
            first[ng] = i
            ng += 1
        gid[i] = g
    return ng, first[:ng]


@njit(cache=True, nogil=True)
def _place(gid, rank, offs, sizes, codes, qoffs, mp, wend, simple, order, starts, nkeep, fast, last_end, packed):
    ng = len(mp)
    n = len(gid)
    for g in range(ng + 1):
        starts[g] = 0
    for i in range(n):
        starts[rank[gid[i]] + 1] += 1
    for g in range(ng):
        starts[g + 1] += starts[g]
    pos = starts[:ng].copy()
    for i in range(n):       # rows grouped by queue (groups in key order), commitlog order within each
        g = rank[gid[i]]
        order[pos[g]] = i
        pos[g] += 1
    for g in range(ng):
        kept = 0
        f = simple[g]
        for j in range(starts[g], starts[g + 1]):
            i = order[j]
            if mp[g] >= 0 and offs[i] + sizes[i] <= mp[g]:
                continue         # already in the queue: skipped
            q = qoffs[i]
            if not (q == 0 or q * 20 >= wend[g] + 20 * kept):
                f = False
            kept += 1
        nkeep[g] = kept
        fast[g] = f
        i = order[starts[g + 1] - 1]
        last_end[g] = offs[i] + sizes[i]
    for j in range(n):      # every unit, 20 bytes big-endian: offset, size, tagsCode
        i = order[j]
        _be(packed, 20 * j, offs[i], 8)
        _be(packed, 20 * j + 8, sizes[i], 4)
        _be(packed, 20 * j + 12, codes[i], 8)


def group_queues(keys):
    """(each row's key number by first appearance, that number's rank in key order, the first row of each key
    in key order), or None when the keys span too many (topic, queue) pairs for a direct table (then the numpy
    path groups them)."""
    gid = np.empty(len(keys), np.int64)
    ng, first = _group_ids(keys, gid, np.int64(1 << 22))
    if ng < 0:
        return None
    perm = np.argsort(keys[first])
    rank = np.empty(ng, np.int64)
    rank[perm] = np.arange(ng)
    return gid, rank, first[perm]


def place_groups(gid, rank, offs, sizes, codes, qoffs, mp, wend, simple):
    """The rows grouped by queue (`order`, group g = rows order[starts[g]:starts[g+1]]), how many of each group
    the queue does not hold yet (a suffix of the group), whether the group is appended as it comes (`simple` and
    no queue offset behind the write end), the end (offset + size) of each group's last record, and every row's
    unit packed in that order (20 bytes each)."""
    n, ng = len(gid), len(mp)
    order = np.empty(n, np.int64)
    starts = np.empty(ng + 1, np.int64)
    nkeep = np.empty(ng, np.int64)
    fast = np.empty(ng, np.bool_)
    last_end = np.empty(ng, np.int64)
    packed = np.empty(20 * n, np.uint8)
    i64 = lambda a: np.ascontiguousarray(a, np.int64)     # noqa: E731
    _place(gid, rank, i64(offs), i64(sizes), i64(codes), i64(qoffs), mp, wend, simple, order, starts, nkeep, fast,
           last_end, packed)
    return order, starts, nkeep, fast, last_end, packed


def warm() -> None:
    """Load (or compile, the first time) every function here on tiny inputs: a parent calls it before its
    workers fork, so they inherit the machine code instead of each loading it."""
    b = np.zeros(16, np.uint8)
    z = np.zeros(1, np.int64)
    one = np.ones(1, np.int64)
    Scan(b, z, z, z, one, (b"TAGS",))
    index_items(b, z, np.ones(1, np.bool_), np.ones(1, np.bool_), z, z, np.ones(1, np.bool_), z, one,
                np.zeros(1, np.uint64))
    put_keys(np.zeros(4, np.int32), 4, z, z, z, 1, 0, 0)
    put_keys(np.zeros(4, np.int32), 4, z, z, z, 1, 0, 0, bits=1)
    gid, rank, _ = group_queues(z)
    place_groups(gid, rank, z, z, z, z, z, z, np.ones(1, np.bool_))
