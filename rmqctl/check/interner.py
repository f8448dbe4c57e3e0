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
        """Dense ids of the strings b[rel[i]:rel[i] + length[i]]; None when they cannot be interned here."""
        n = len(rel)
        if n == 0:
            return np.empty(0, np.int64)
        max_len = int(length.max())
        if max_len > 64 or int(length.min()) < 0:
            return None
        width = max(8, (max_len + 7) // 8 * 8)
        cols = np.arange(width)
        if len(b) >= width:
            # rows of `width` bytes starting at each string (one memcpy per row, no index matrix); a string
            # ending less than `width` bytes before the buffer's end reads from an earlier start and shifts
            rows = np.lib.stride_tricks.as_strided(b, (len(b) - width + 1, width), (1, 1))
            r0 = np.minimum(rel, len(b) - width)
            padded = rows[r0]
            sh = rel - r0
            if sh.any():
                k = np.flatnonzero(sh)
                idx = np.minimum(rel[k, None] + cols, len(b) - 1)
                padded[k] = b[idx]
        else:
            padded = b[np.minimum(rel[:, None] + cols, len(b) - 1)]
        min_len = int(length.min())
        if min_len == max_len:
            padded[:, max_len:] = 0
        else:
            padded[cols[None, :] >= length[:, None]] = 0
        words = padded.view(np.uint64)
        n_words = words.shape[1]
        h = length.astype(np.uint64)
        mult = np.uint64(HASH_MULTIPLIER)
        for k in range(n_words):
            h = h * mult ^ words[:, k]
        if n_words < 8:
            h = h * np.uint64(pow(HASH_MULTIPLIER, 8 - n_words, 1 << 64))
        for _ in range(2):
            pos = np.searchsorted(self.sorted_h, h)
            np.minimum(pos, max(len(self.sorted_h) - 1, 0), out=pos)
            found = self.sorted_h[pos] == h if len(self.sorted_h) else np.zeros(n, bool)
            if found.all():
                ids = self.sorted_id[pos]
                i0 = int(ids[0])
                if (ids == i0).all():
                    same = min_len == max_len == int(self.lens[i0]) and (words == self.rows[i0, :n_words]).all()
                else:
                    same = (words == self.rows[ids, :n_words]).all() and (self.lens[ids] == length).all()
                if same:
                    return ids
                return None      # a hash collision: let the caller group exactly
            new = np.flatnonzero(~found)
            uh, first = np.unique(h[new], return_index=True)
            if len(self.values) + len(uh) > self.limit:
                return None
            k0 = len(self.values)
            rows = np.zeros((len(uh), 8), np.uint64)
            rows[:, :n_words] = words[new[first]]
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
