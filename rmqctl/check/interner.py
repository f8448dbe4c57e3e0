"""Short byte strings -> dense ids for a whole batch at once, in numpy (topics, TAGS values)."""
from __future__ import annotations

import numpy as np


HASH_MULTIPLIER = 0x9E3779B97F4A7C15


class Interner:
    """Short byte strings (at most 64 bytes) -> dense ids, a batch at a time, with no Python work per
    string and no sort once the strings are known: the zero-padded bytes are hashed as 8 uint64 words,
    looked up in a sorted table of known hashes, and every row is compared exactly with its entry's
    bytes. New strings are added (up to `limit` entries; then None, and the caller groups per batch)."""

    def __init__(self, limit: int = 1 << 16):
        self.limit = limit
        self.sorted_h = np.empty(0, np.uint64)
        self.sorted_id = np.empty(0, np.int64)
        self.rows = np.zeros((0, 8), np.uint64)
        self.lens = np.empty(0, np.int64)
        self.values: list = []

    def ids(self, b, rel, length):
        n = len(rel)
        if n == 0:
            return np.empty(0, np.int64)
        L = int(length.max())
        if L > 64 or int(length.min()) < 0:
            return None
        W = max(8, (L + 7) // 8 * 8)
        cols = np.arange(W)
        if len(b) >= W:
            # rows of W bytes starting at each string (one memcpy per row, no index matrix); a string
            # ending less than W bytes before the buffer's end reads from an earlier start and shifts
            rows = np.lib.stride_tricks.as_strided(b, (len(b) - W + 1, W), (1, 1))
            r0 = np.minimum(rel, len(b) - W)
            G = rows[r0]
            sh = rel - r0
            if sh.any():
                k = np.flatnonzero(sh)
                idx = np.minimum(rel[k, None] + cols, len(b) - 1)
                G[k] = b[idx]
        else:
            G = b[np.minimum(rel[:, None] + cols, len(b) - 1)]
        Lmin = int(length.min())
        if Lmin == L:
            G[:, L:] = 0
        else:
            G[cols[None, :] >= length[:, None]] = 0
        V = G.view(np.uint64)
        w = V.shape[1]
        h = length.astype(np.uint64)
        M = np.uint64(HASH_MULTIPLIER)
        for k in range(w):
            h = h * M ^ V[:, k]
        if w < 8:
            h = h * np.uint64(pow(HASH_MULTIPLIER, 8 - w, 1 << 64))
        for _ in range(2):
            pos = np.searchsorted(self.sorted_h, h)
            np.minimum(pos, max(len(self.sorted_h) - 1, 0), out=pos)
            found = self.sorted_h[pos] == h if len(self.sorted_h) else np.zeros(n, bool)
            if found.all():
                ids = self.sorted_id[pos]
                i0 = int(ids[0])
                if (ids == i0).all():
                    same = Lmin == L == int(self.lens[i0]) and (V == self.rows[i0, :w]).all()
                else:
                    same = (V == self.rows[ids, :w]).all() and (self.lens[ids] == length).all()
                if same:
                    return ids
                return None      # a hash collision: let the caller group exactly
            new = np.flatnonzero(~found)
            uh, first = np.unique(h[new], return_index=True)
            if len(self.values) + len(uh) > self.limit:
                return None
            k0 = len(self.values)
            rows = np.zeros((len(uh), 8), np.uint64)
            rows[:, :w] = V[new[first]]
            self.rows = np.concatenate((self.rows, rows))
            self.lens = np.concatenate((self.lens, length[new[first]]))
            for f in new[first].tolist():
                a = int(rel[f])
                self.values.append(bytes(b[a:a + int(length[f])]))
            hs = np.concatenate((self.sorted_h, uh))
            ids = np.concatenate((self.sorted_id, np.arange(k0, k0 + len(uh))))
            o = np.argsort(hs, kind="stable")
            self.sorted_h, self.sorted_id = hs[o], ids[o]
        return None
