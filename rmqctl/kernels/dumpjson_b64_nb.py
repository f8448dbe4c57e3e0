"""Base64 (standard alphabet, '=' padding, no newline) compiled by numba as a C-callable function with
libbase64's base64_encode signature: what rmqctl.kernels.dumpjson_nb calls for bodies when pybase64's
SIMD encoder is not installed. Imported only then."""
from __future__ import annotations

import numpy as np
from numba import carray, cfunc, types

_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8).copy()
_PAIRS = np.empty(8192, np.uint8)          # every 12-bit group as its two characters
for _i in range(4096):
    _PAIRS[2 * _i] = _B64[_i >> 6]
    _PAIRS[2 * _i + 1] = _B64[_i & 63]


@cfunc(types.void(types.CPointer(types.uint8), types.uint64, types.CPointer(types.uint8), types.CPointer(types.uint64),
                  types.int32), cache=True, nogil=True)
def b64_encode(src, n, dst, outlen, flags):
    b = carray(src, (n,))
    out = carray(dst, ((n + 2) // 3 * 4,))
    t2 = _PAIRS
    t = _B64
    e = n - n % 3
    i = np.uint64(0)
    w = np.uint64(0)
    while i < e:
        v = (np.uint64(b[i]) << 16) | (np.uint64(b[i + 1]) << 8) | np.uint64(b[i + 2])
        h = (v >> 12) << 1
        lo = (v & 0xFFF) << 1
        out[w] = t2[h]
        out[w + 1] = t2[h + 1]
        out[w + 2] = t2[lo]
        out[w + 3] = t2[lo + 1]
        w += 4
        i += 3
    r = n % 3
    if r == 1:
        v = np.uint64(b[i])
        out[w] = t[v >> 2]
        out[w + 1] = t[(v & 3) << 4]
        out[w + 2] = 61
        out[w + 3] = 61
        w += 4
    elif r == 2:
        v = (np.uint64(b[i]) << 8) | np.uint64(b[i + 1])
        out[w] = t[v >> 10]
        out[w + 1] = t[(v >> 4) & 63]
        out[w + 2] = t[(v & 15) << 2]
        out[w + 3] = 61
        w += 4
    outlen[0] = w
