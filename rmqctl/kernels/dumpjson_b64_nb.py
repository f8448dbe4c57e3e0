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
    one, two, three, four = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
    r = n % three
    e = n - r
    i = np.uint64(0)
    w = np.uint64(0)
    while i < e:
        v = (np.uint64(b[i]) << np.uint64(16)) | (np.uint64(b[i + one]) << np.uint64(8)) | np.uint64(b[i + two])
        h = (v >> np.uint64(12)) << one
        lo = (v & np.uint64(0xFFF)) << one
        out[w] = t2[h]
        out[w + one] = t2[h + one]
        out[w + two] = t2[lo]
        out[w + three] = t2[lo + one]
        w += four
        i += three
    if r == one:
        v = np.uint64(b[i])
        out[w] = t[v >> two]
        out[w + one] = t[(v & three) << four]
        out[w + two] = 61
        out[w + three] = 61
        w += four
    elif r == two:
        v = (np.uint64(b[i]) << np.uint64(8)) | np.uint64(b[i + one])
        out[w] = t[v >> np.uint64(10)]
        out[w + one] = t[(v >> four) & np.uint64(63)]
        out[w + two] = t[(v & np.uint64(15)) << two]
        out[w + three] = 61
        w += four
    outlen[0] = w
