"""`dump --json` lines rendered by numba: every line of a window written straight into one preallocated
uint8 buffer (rmqctl.dump_json_batch.CompiledRenderer calls it), byte for byte what rmqctl.render.message_json
gives (tests/test_dump_json_batch.py compares them on every fixture, every real-world file, records built
for every branch and under random damage).

Per record, in compiled code: the fixed key text (copied from `lits`, built once in Python), decimal
integers, IPv4 hosts, the upper-case hex msg_id, the topic and the properties object copied where they need
no escaping, then the body as base64 or hex. What this kernel does not cover is left to message_json by the
caller: the record is flagged in `slow` and its line left empty (its start equals the next one's). Those
are: a compressed body, an IPv6 host, PHYSICALOFFSET different from the position, a bad __CRC32#, a topic
with a byte JSON escapes or that is not ASCII, and properties outside the fast form (printable ASCII
`name\\x01value` pairs joined by \\x02, one trailing \\x02 allowed, no '"' or '\\', no empty name or value,
no name twice, at most 64 names). The numpy renderer (rmqctl.dump_json_batch.Renderer) has the same rule
but for topics over 255 bytes (per record there, copied here) and the 64 names (none there).
"""
from __future__ import annotations

import binascii
import ctypes
import os

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types

from rmqctl.formats.commitlog import MESSAGE_MAGIC_CODE_V2 as _V2

# Bodies as base64: libbase64's base64_encode(src, srclen, out, &outlen, flags) as pybase64 ships it (SIMD),
# called from compiled code through a symbol bound at load time, else the same function compiled by numba
# (rmqctl.kernels.dumpjson_b64_nb; RMQCTL_B64=table forces it); checked against binascii when bound.
_B64_SYMBOL = "rmqctl_dumpjson_b64"
_b64 = types.ExternalFunction(_B64_SYMBOL, types.void(types.uintp, types.uint64, types.uintp, types.uintp,
                                                      types.int32))
_B64_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                              ctypes.POINTER(ctypes.c_size_t), ctypes.c_int)


def _b64_candidates():
    if os.environ.get("RMQCTL_B64") != "table":
        try:
            from pybase64 import _pybase64

            yield "pybase64", ctypes.CDLL(_pybase64.__file__).base64_encode
        except (ImportError, OSError, AttributeError):
            pass
    from rmqctl.kernels.dumpjson_b64_nb import b64_encode

    yield "table", b64_encode.address


def _bind_b64() -> str:
    probes = [bytes(range(256)) * 4 + b"x" * k for k in range(4)] + [b"", b"a", b"ab"]
    for name, fn in _b64_candidates():
        addr = fn if isinstance(fn, int) else ctypes.cast(fn, ctypes.c_void_p).value
        if not addr:
            continue
        call = _B64_PROTO(addr)
        good = True
        for p in probes:
            want = binascii.b2a_base64(p, newline=False)
            got = ctypes.create_string_buffer(len(want) + 64)
            n = ctypes.c_size_t(0)
            call(p, len(p), got, ctypes.byref(n), 0)
            if got.raw[:n.value] != want:
                good = False
                break
        if good:
            _llvm.add_symbol(_B64_SYMBOL, addr)
            return name
    raise ImportError("no base64 encoder for the numba dump kernel")


B64_IMPL = _bind_b64()

_HEXU = np.frombuffer(b"0123456789ABCDEF", np.uint8).copy()
_HEXL = np.frombuffer(b"0123456789abcdef", np.uint8).copy()
_D2 = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()
_P10 = np.array([10 ** k for k in range(20)], np.uint64)

# the pieces of `lits`, in the order dump_json_batch.CompiledRenderer builds them
L_HEAD, L_SIZE, L_MAGIC, L_TOPIC, L_QID, L_QOFF, L_SYSF, L_TX, L_FLAG, L_BCRC, L_BORN_TS, L_BORN_HOST, \
    L_STORE_TS, L_STORE_HOST, L_RECON, L_PREP, L_MSGID, L_BLEN, L_PROPS, L_TAIL_ABSENT, L_TAIL_GOOD, L_END, \
    L_TX0 = range(23)
BODY_NONE, BODY_BASE64, BODY_HEX = 0, 1, 2
_MAX_NAMES = 64   # more properties than this in one record: message_json (the name check is quadratic)
NCOLS = 19      # rel, then the Batch columns in Batch's order (rmqctl.scanvec.Batch), prop_crc apart


@njit(cache=True, nogil=True, inline="always")
def _i32(b, p):
    v = (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _lit(out, w, lits, lo, k):
    return _copy(out, w, lits, lo[k], lo[k + 1] - lo[k])


@njit(cache=True, nogil=True, inline="always")
def _copy(out, w, src, a, n):
    """src[a:a+n] to out[w:]; returns the end. Unsigned indices: no negative-index check per byte (6x faster
    measured)."""
    d = np.uintp(w)
    s = np.uintp(a)
    e = s + np.uintp(n)
    while s < e:
        out[d] = src[s]
        d += np.uintp(1)
        s += np.uintp(1)
    return w + n


# Only the smallest helpers are inlined by numba (inline="always"); the others are left to LLVM: measured,
# the same speed and half the first compile (4 instead of 9 CPU s, once per compile cache).
@njit(cache=True, nogil=True)
def _int(out, w, v):
    """The decimal text of int64 v at out[w:]; returns the end."""
    d = np.uintp(w)
    if v < 0:
        out[d] = 45
        d += np.uintp(1)
        u = np.uint64(-(v + 1)) + np.uint64(1)      # also -2**63
    else:
        u = np.uint64(v)
    nd = np.uintp(1)
    while nd < 20 and u >= _P10[nd]:
        nd += np.uintp(1)
    e = d + nd
    q = e
    two = np.uintp(2)
    while u >= 100:
        t = u // np.uint64(100)
        r = np.uintp(u - t * np.uint64(100)) * two
        q -= two
        out[q] = _D2[r]
        out[q + np.uintp(1)] = _D2[r + np.uintp(1)]
        u = t
    if u >= 10:
        r = np.uintp(u) * two
        out[q - two] = _D2[r]
        out[q - np.uintp(1)] = _D2[r + np.uintp(1)]
    else:
        out[q - np.uintp(1)] = 48 + np.uint8(u)
    return np.int64(e)


@njit(cache=True, nogil=True)
def _hex(out, w, b, a, n, digits):
    """b[a:a+n] as hex text (digits: the 16 characters) at out[w:]; returns the end."""
    d = np.uintp(w)
    s = np.uintp(a)
    e = s + np.uintp(n)
    while s < e:
        c = b[s]
        out[d] = digits[c >> 4]
        out[d + np.uintp(1)] = digits[c & 15]
        d += np.uintp(2)
        s += np.uintp(1)
    return w + 2 * n


@njit(cache=True, nogil=True)
def _host(out, w, b, p):
    """ip.ip.ip.ip:port of the IPv4 host at b[p:p+8]."""
    for j in range(4):
        w = _int(out, w, np.int64(b[p + j]))
        out[w] = 46 if j < 3 else 58
        w += 1
    return _int(out, w, _i32(b, p + 4))


@njit(cache=True, nogil=True, inline="always")
def _plain(c):
    """A byte JSON writes as itself (printable ASCII but '"' and '\\')."""
    return 0x20 <= c < 0x7F and c != 0x22 and c != 0x5C


@njit(cache=True, nogil=True)
def _props(out, w, b, a, e, names):
    """The properties b[a:e] as a JSON object at out[w:] when in the fast form (module doc), returning the
    end; else -1. Unsigned indices throughout (no negative-index check per byte)."""
    one = np.uintp(1)
    if e > a and b[np.uintp(e - 1)] == 2:
        e -= 1                      # one trailing \x02 (the broker writes it before 4.9.2)
    d = np.uintp(w)
    if e == a:
        out[d] = 123
        out[d + one] = 125
        return w + 2
    out[d] = 123
    out[d + one] = 34
    d += np.uintp(2)
    nn = 0
    i = np.uintp(a)
    end = np.uintp(e)
    start = i          # where the current name or value starts
    in_value = False
    while i < end:
        c = b[i]
        if c == 1:
            if in_value or i == start:
                return -1
            # a name twice in one record: rendered by message_json (a dict keeps the last value)
            ln = i - start
            if nn == _MAX_NAMES:
                return -1
            for m in range(nn):
                s0 = np.uintp(names[2 * m])
                if np.uintp(names[2 * m + 1]) - s0 == ln:
                    same = True
                    for j in range(ln):
                        if b[s0 + np.uintp(j)] != b[start + np.uintp(j)]:
                            same = False
                            break
                    if same:
                        return -1
            names[2 * nn] = np.int64(start)
            names[2 * nn + 1] = np.int64(i)
            nn += 1
            out[d] = 34
            out[d + one] = 58
            out[d + np.uintp(2)] = 34
            d += np.uintp(3)
            in_value = True
            start = i + one
        elif c == 2:
            if not in_value or i == start:
                return -1
            out[d] = 34
            out[d + one] = 44
            out[d + np.uintp(2)] = 34
            d += np.uintp(3)
            in_value = False
            start = i + one
        elif _plain(c):
            out[d] = c
            d += one
        else:
            return -1
        i += one
    if not in_value or end == start:
        return -1
    out[d] = 34
    out[d + one] = 125
    return np.int64(d) + 2


_ARR = types.Array(types.uint8, 1, "C", readonly=True)
_SIG = types.int64(_ARR, types.int64[:, ::1], types.int8[::1], types.int64, _ARR, types.int64[::1], types.int64,
                   types.uint8[::1], types.int64[::1], types.uint8[::1], types.int64[::1], types.uint64[::1])


@njit(_SIG, cache=True, nogil=True)
def render(b, cols, pcrc, base, lits, lo, body, out, starts, slow, names, outlen):
    """Write the lines of the records in `cols` (NCOLS rows, a column per record; rel relative to b, base the
    absolute offset of b[0]) into out; starts[i] is where record i's line begins (starts[n]: the end, also
    returned); slow[i] = 1 for a record left to message_json (its line empty), 2 when only for its
    properties. `names`: scratch, 2 int64
    per name, 2 * _MAX_NAMES at least; outlen: scratch, one uint64."""
    n = cols.shape[1]
    w = 0
    for i in range(n):
        starts[i] = w
        p = cols[0, i]
        sysf = cols[8, i]
        pc = pcrc[i]
        tr = cols[15, i]
        tl = cols[16, i]
        ok = (sysf & 0x31) == 0 and cols[7, i] == base + p and pc != 0
        if ok:
            j = np.uintp(tr)
            while j < np.uintp(tr + tl):
                if not _plain(b[j]):
                    ok = False
                    break
                j += np.uintp(1)
        if not ok:
            slow[i] = 1
            continue
        slow[i] = 0
        w = _lit(out, w, lits, lo, L_HEAD)
        w = _int(out, w, base + p)
        w = _lit(out, w, lits, lo, L_SIZE)
        w = _int(out, w, cols[1, i])
        w = _lit(out, w, lits, lo, L_MAGIC)
        out[w] = 50 if cols[2, i] == _V2 else 49
        w = _lit(out, w + 1, lits, lo, L_TOPIC)
        w = _copy(out, w, b, tr, tl)
        w = _lit(out, w, lits, lo, L_QID)
        w = _int(out, w, cols[4, i])
        w = _lit(out, w, lits, lo, L_QOFF)
        w = _int(out, w, cols[6, i])
        w = _lit(out, w, lits, lo, L_SYSF)
        w = _int(out, w, sysf)
        w = _lit(out, w, lits, lo, L_TX)
        w = _lit(out, w, lits, lo, L_TX0 + ((sysf >> 2) & 3))
        w = _lit(out, w, lits, lo, L_FLAG)
        w = _int(out, w, cols[5, i])
        w = _lit(out, w, lits, lo, L_BCRC)
        w = _int(out, w, cols[3, i])
        w = _lit(out, w, lits, lo, L_BORN_TS)
        w = _int(out, w, cols[9, i])
        w = _lit(out, w, lits, lo, L_BORN_HOST)
        w = _host(out, w, b, p + 48)
        w = _lit(out, w, lits, lo, L_STORE_TS)
        w = _int(out, w, cols[10, i])
        w = _lit(out, w, lits, lo, L_STORE_HOST)
        w = _host(out, w, b, p + 64)
        w = _lit(out, w, lits, lo, L_RECON)
        w = _int(out, w, cols[11, i])
        w = _lit(out, w, lits, lo, L_PREP)
        w = _int(out, w, cols[12, i])
        w = _lit(out, w, lits, lo, L_MSGID)
        w = _hex(out, w, b, p + 64, 8, _HEXU)   # STOREHOST + STOREPORT + PHYSICALOFFSET (createMessageId)
        w = _hex(out, w, b, p + 28, 8, _HEXU)
        w = _lit(out, w, lits, lo, L_BLEN)
        bl = cols[14, i]
        w = _int(out, w, bl)
        w = _lit(out, w, lits, lo, L_PROPS)
        pr = cols[17, i]
        w = _props(out, w, b, pr, pr + cols[18, i], names)
        if w < 0:
            w = starts[i]
            slow[i] = 2
            continue
        w = _lit(out, w, lits, lo, L_TAIL_ABSENT if pc < 0 else L_TAIL_GOOD)
        br = cols[13, i]
        if body == BODY_BASE64:
            if bl:
                _b64(np.uintp(b.ctypes.data) + np.uintp(br), np.uint64(bl), np.uintp(out.ctypes.data) + np.uintp(w),
                     np.uintp(outlen.ctypes.data), np.int32(0))
                w += np.int64(outlen[0])
        elif body == BODY_HEX:
            w = _hex(out, w, b, br, bl, _HEXL)
        w = _lit(out, w, lits, lo, L_END)
    starts[n] = w
    return w
