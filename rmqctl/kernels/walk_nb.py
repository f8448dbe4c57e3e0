"""rmqctl.scanvec's window walk compiled by numba: one pass over the window's records following
TOTALSIZE, with the magic, the header/length formula, PHYSICALOFFSET, the body CRC and the __CRC32#
property checked per record in compiled code, stopping at the first record any check rejects, and the
header fields written to columns. What ends the walk, and SCHEDULE_TOPIC_XXXX records, stay with
rmqctl.scan.FileWalk exactly as for the numpy kernel (rmqctl.scanvec.walk_window); both kernels must
agree record for record and stop for stop (tests/test_kernel_numba.py).

The body CRC is a C function called from compiled code through a symbol bound at load time: ISA-L's
crc32_gzip_refl (python-isal) when installed, else zlib's crc32 from the system libz (RMQCTL_CRC=zlib
forces it), else a slice-by-8 table CRC compiled by numba (RMQCTL_CRC=table forces it). All three
compute zlib's CRC-32; the choice is checked against zlib.crc32 when the kernel loads.
"""
from __future__ import annotations

import ctypes
import os
import zlib

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types

from rmqctl.formats import commitlog as cl
from rmqctl.formats.properties import CRC32_RESERVED_LEN
from rmqctl.scan import HEAD_SIZE, MAX_RECORD_SIZE, MIN_RECORD_SIZE

NCOLS = 18   # the Batch columns after rel, in Batch's order (rmqctl.scanvec.Batch)
_SYMBOL = "rmqctl_kernel_crc32"
# x86-64 / arm64 calling conventions: zlib's crc32(uLong, const Bytef*, uInt) and ISA-L's
# crc32_gzip_refl(uint32_t, const unsigned char*, uint64_t) both take this; the result is masked to 32 bits
_SIG = types.uint64(types.uint64, types.uintp, types.uint64)
_crc = types.ExternalFunction(_SYMBOL, _SIG)
_CRC_PROTO = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64)

_V1 = cl.MESSAGE_MAGIC_CODE_V1.to_bytes(4, "big", signed=True)
_M0, _M1, _M2, _M3 = _V1
_M3_V2 = cl.MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big", signed=True)[3]
_V2 = cl.MESSAGE_MAGIC_CODE_V2
_LO, _HI, _HEAD = MIN_RECORD_SIZE, MAX_RECORD_SIZE, HEAD_SIZE
_RES = CRC32_RESERVED_LEN
_TAG = np.frombuffer(b"__CRC32#\x01", np.uint8).copy()


def _candidates():
    mode = os.environ.get("RMQCTL_CRC", "")
    if mode not in ("zlib", "table"):
        try:
            from isal import isal_zlib

            yield "isal", ctypes.CDLL(isal_zlib.__file__).crc32_gzip_refl
        except (ImportError, OSError, AttributeError):
            pass
    if mode != "table":
        for lib in ("libz.so.1", "libz.so", "libz.1.dylib", "libz.dylib"):
            try:
                yield "zlib", ctypes.CDLL(lib).crc32
            except (OSError, AttributeError):
                continue
    from rmqctl.kernels.crc_table_nb import crc32_table

    yield "table", crc32_table.address


def _bind_crc() -> str:
    """Bind the kernel's CRC symbol to the first implementation that computes zlib's CRC-32 here."""
    probe = b"123456789" * 7
    for name, fn in _candidates():
        addr = fn if isinstance(fn, int) else ctypes.cast(fn, ctypes.c_void_p).value
        if addr and _CRC_PROTO(addr)(0, probe, len(probe)) & 0xFFFFFFFF == zlib.crc32(probe):
            _llvm.add_symbol(_SYMBOL, addr)
            return name
    raise ImportError("no CRC-32 implementation for the numba kernel")


CRC_IMPL = _bind_crc()


@njit(cache=True, nogil=True, inline="always")
def _i32(b, p):
    v = (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _i64(b, p):
    hi = _i32(b, p)
    lo = (np.int64(b[p + 4]) << 24) | (np.int64(b[p + 5]) << 16) | (np.int64(b[p + 6]) << 8) | np.int64(b[p + 7])
    return (hi << 32) | lo


@njit(cache=True, nogil=True, inline="always")
def _i16(b, p):
    v = (np.int64(b[p]) << 8) | np.int64(b[p + 1])
    return v - (1 << 16) if v >= (1 << 15) else v


@njit(cache=True, nogil=True, inline="always")
def _crc32(b, a, n):
    return np.int64(_crc(np.uint64(0), np.uintp(b.ctypes.data) + np.uintp(a), np.uint64(n)) & np.uint64(0xFFFFFFFF))


_ARR = types.Array(types.uint8, 1, "C", readonly=True)
_OUT = types.Tuple((types.int64[::1], types.int64[:, ::1], types.int8[::1], types.int64))


@njit(_OUT(_ARR, types.int64, types.int64, types.boolean, types.boolean, types.boolean), cache=True, nogil=True)
def walk(b, nraw, base, check_phys, check_crc, check_prop_crc):
    """(rel, columns, prop_crc, k) of the records chained from b[0]: the first k are valid. `base` is
    the absolute offset of b[0]. Stops at the first record a check rejects, as the numpy kernel."""
    n = 0
    p = 0
    if nraw >= _HEAD:
        last = nraw - 8
        while p <= last:
            size = _i32(b, p)
            if size < _LO or size > _HI or p + size > nraw:
                break
            if b[p + 4] != _M0 or b[p + 5] != _M1 or b[p + 6] != _M2 or (b[p + 7] != _M3 and b[p + 7] != _M3_V2):
                break
            n += 1
            p += size
    rel = np.empty(n, np.int64)
    cols = np.empty((18, n), np.int64)
    pcrc = np.full(n, -1, np.int8)
    tag = _TAG
    p = 0
    k = 0
    while k < n:
        tot = _i32(b, p)
        rec_end = p + tot
        magic = _i32(b, p + 4)
        sysf = _i32(b, p + 36)
        phys = _i64(b, p + 28)
        st_ts_at = p + 48 + (20 if sysf & 0x10 else 8)
        after = st_ts_at + 8 + (20 if sysf & 0x20 else 8)
        if after + 16 > rec_end:
            break
        blen = _i32(b, after + 12)
        body_rel = after + 16
        t_at = body_rel + blen
        if blen < 0 or t_at + 1 > rec_end:
            break
        if magic == _V2:
            if t_at + 2 > rec_end:
                break
            tlen = _i16(b, t_at)
            topic_rel = t_at + 2
        else:
            tlen = np.int64(b[t_at])
            if tlen >= 128:
                tlen -= 256
            topic_rel = t_at + 1
        if tlen <= 0 or topic_rel + tlen + 2 > rec_end:
            break
        p_at = topic_rel + tlen
        plen = _i16(b, p_at)
        props_rel = p_at + 2
        if plen < 0 or props_rel + plen != rec_end:
            break
        if check_phys and phys != base + p:
            break
        crc = _i32(b, p + 8)
        if check_crc and (_crc32(b, body_rel, blen) & 0x7FFFFFFF) != crc:
            break
        pc = -1
        if plen >= _RES:
            tail = rec_end - _RES
            hit = True
            for j in range(9):
                if b[tail + j] != tag[j]:
                    hit = False
                    break
            if hit and b[rec_end - 1] == 2:
                want = 0
                scale = 1
                pc = 1
                for j in range(9, _RES - 1):
                    d = np.int64(b[tail + j]) - 48
                    if d < 0 or d > 9:
                        pc = 0
                        break
                    want += d * scale
                    scale *= 10
                if pc == 1 and (_crc32(b, p, tot - _RES) & 0x7FFFFFFF) != want:
                    pc = 0
            if pc == 0 and check_prop_crc:
                break
        pcrc[k] = pc
        rel[k] = p
        cols[0, k] = tot
        cols[1, k] = magic
        cols[2, k] = crc
        cols[3, k] = _i32(b, p + 12)
        cols[4, k] = _i32(b, p + 16)
        cols[5, k] = _i64(b, p + 20)
        cols[6, k] = phys
        cols[7, k] = sysf
        cols[8, k] = _i64(b, p + 40)
        cols[9, k] = _i64(b, st_ts_at)
        cols[10, k] = _i32(b, after)
        cols[11, k] = _i64(b, after + 4)
        cols[12, k] = body_rel
        cols[13, k] = blen
        cols[14, k] = topic_rel
        cols[15, k] = tlen
        cols[16, k] = props_rel
        cols[17, k] = plen
        k += 1
        p = rec_end
    return rel, cols, pcrc, k


class Kernel:
    """The loaded numba kernel (what rmqctl.kernels.walk_kernel returns)."""

    name = "numba"
    crc = CRC_IMPL

    @staticmethod
    def walk(b, nraw, base, check_phys, check_crc, check_prop_crc):
        return walk(b, nraw, base, check_phys, check_crc, check_prop_crc)
