"""CRC-32 (zlib's polynomial, reflected) by slice-by-8 tables, compiled by numba as a C-callable function:
the numba kernel's body CRC when neither ISA-L nor zlib's shared library loads (measured in
bench/bench_kernel.py against both). Imported only then."""
from __future__ import annotations

import numpy as np
from numba import carray, cfunc, types


def _tables() -> np.ndarray:
    t = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            c = int(t[k - 1, i])
            t[k, i] = (c >> 8) ^ int(t[0, c & 0xFF])
    return t


_T = _tables()


@cfunc(types.uint64(types.uint64, types.CPointer(types.uint8), types.uint64), cache=True, nogil=True)
def crc32_table(crc, ptr, n):
    b = carray(ptr, (n,))
    t = _T
    c = np.uint32(~np.uint32(crc & 0xFFFFFFFF))
    i = 0
    while i + 8 <= n:
        one = c ^ (np.uint32(b[i]) | (np.uint32(b[i + 1]) << 8) | (np.uint32(b[i + 2]) << 16)
                   | (np.uint32(b[i + 3]) << 24))
        two = np.uint32(b[i + 4]) | (np.uint32(b[i + 5]) << 8) | (np.uint32(b[i + 6]) << 16) \
            | (np.uint32(b[i + 7]) << 24)
        c = (t[7, one & 0xFF] ^ t[6, (one >> 8) & 0xFF] ^ t[5, (one >> 16) & 0xFF] ^ t[4, one >> 24]
             ^ t[3, two & 0xFF] ^ t[2, (two >> 8) & 0xFF] ^ t[1, (two >> 16) & 0xFF] ^ t[0, two >> 24])
        i += 8
    while i < n:
        c = t[0, (c ^ b[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return np.uint64(~c & np.uint32(0xFFFFFFFF))
