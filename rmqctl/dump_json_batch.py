"""`dump --json` of commitlog files on the batch path: the JSON Lines of a whole window of records built at
once from the batch kernel's arrays (rmqctl.scanvec), byte-identical to rendering each record with
rmqctl.render.message_json (tests/test_dump_json_batch.py compares both on every fixture, every
real-world file, records built for every branch and under random damage). dumping.commitlog_json calls it
after a file's first 4 MiB of records (a small file never loads numpy).

Per window (2 MiB), three bulk steps and one join:
- every fixed field of every record up to "properties" (numbers, hosts, msg_id, the topic when it needs no
  escaping) is written into one uint8 matrix, a row per record: the literal text and every column whose
  value is the same in all rows come from one template row; digits come from array arithmetic (four per
  division, from a table); unused cells hold 0 and one bytes.translate squeezes them out (0 never occurs in
  the text: a topic holding a NUL needs escaping and takes the per-record path);
- the properties of all records are joined with NUL into one buffer, checked in bulk (the fast form is
  printable ASCII `name\\x01value\\x02...` with nothing to escape, no empty name or value, no name twice) and
  turned into JSON objects by three bytes.replace over the whole buffer;
- the bodies are encoded with one C call each (pybase64 when installed, else binascii);
- the pieces of every line (head, properties, body) are interleaved with list slicing and joined once.
A record the bulk steps do not cover (compressed body, IPv6 host, a topic needing escapes or longer than 255
bytes, PHYSICALOFFSET different from its position, a bad __CRC32#) is rendered by message_json from the
Record FileWalk yields there; a properties field outside the fast form by json.dumps of the parsed dict, as
message_json does. Only numpy is needed; memory is bounded by the window.

Two renderers: CompiledRenderer (numba: rmqctl.kernels.dumpjson_nb writes every line of a window into one
reused buffer, ~4x less CPU) when numba loads and the file is long (_compiled: RMQCTL_KERNEL, 256 MiB
ahead), else Renderer (the numpy steps above, the fallback). Both give message_json's bytes.
"""
from __future__ import annotations

import binascii
import json
import os
from functools import partial
from pathlib import Path

import numpy as np

from rmqctl.formats.commitlog import MESSAGE_MAGIC_CODE_V2, TRANSACTION_TYPE_NAMES
from rmqctl.formats.properties import parse_properties
from rmqctl.scan import FileWalk

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_P10 = np.array([10 ** k for k in range(20)], dtype=np.uint64)
# msg_id = STOREHOST(4) + STOREPORT(4) + PHYSICALOFFSET(8) of an IPv4 record (MessageDecoder.createMessageId)
_MSGID_AT = np.array(list(range(64, 72)) + list(range(28, 36)), np.int64)
_BORN_AT, _STORE_AT = 48, 64
DUMP_WINDOW = 2 << 20    # measured: 2 MiB windows keep a window's pieces in cache (8 MiB: 35 % slower, 512 KiB: 15 %)


def _b64_encoder():
    try:
        import pybase64

        if pybase64.b64encode(b"\xff\x00a") == binascii.b2a_base64(b"\xff\x00a", newline=False):
            return pybase64.b64encode
    except ImportError:
        pass
    return partial(binascii.b2a_base64, newline=False)


_b64 = _b64_encoder()


class _Row:
    """The fixed part of every line as columns of one uint8 matrix (0 = no byte), with each row's length:
    the literal text is one template row copied to every row, then each variable block is written."""

    def __init__(self, n: int):
        self.n, self.text, self.blocks, self.width, self.fixed = n, [], [], 0, 0
        self.lens = np.zeros(n, np.int64)

    def lit(self, text):
        self.text.append(text.encode() if isinstance(text, str) else bytes(text))
        self.width += len(self.text[-1])
        self.fixed += len(self.text[-1])

    def block(self, blk: np.ndarray, lens):
        self.blocks.append((self.width, blk))
        self.text.append(bytes(blk.shape[1]))
        self.width += blk.shape[1]
        self.lens += lens

    def num(self, v: np.ndarray):
        if (v == v[0]).all():               # the same in every row (flags, hosts, lengths): template text
            self.lit(str(int(v[0])))
        else:
            self.block(*_digits(v))

    def same(self, blk: np.ndarray, lens) -> None:
        """A block, or template text when every row holds the same bytes (never NUL)."""
        if (blk == blk[0]).all() and 0 not in blk[0]:
            self.lit(blk[0].tobytes())
        else:
            self.block(blk, lens)

    def build(self) -> tuple[bytes, np.ndarray]:
        m = np.empty((self.n, self.width), np.uint8)
        m[:] = np.frombuffer(b"".join(self.text), np.uint8)
        for c, blk in self.blocks:
            m[:, c:c + blk.shape[1]] = blk
        lens = self.lens + self.fixed
        data = m.tobytes()
        if int(lens.sum()) != len(data):
            data = data.translate(None, b"\0")
        return data, lens


_LUT4 = np.frombuffer("".join(f"{i:04d}" for i in range(10000)).encode(), np.uint32)
_TEN4 = np.uint64(10000)


def _digits(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal text of an int64 array as an (n, w) uint8 block, right-aligned, 0 before the text; and
    each row's text length. Four digits per division, from a table."""
    v = np.asarray(v, np.int64)
    n = len(v)
    neg = v < 0
    anyneg = bool(neg.any())
    a = v.astype(np.uint64)
    if anyneg:
        a = np.where(neg, ~a + np.uint64(1), a)      # the magnitude, also of -2**63
    nd = np.maximum(np.searchsorted(_P10, a, side="right"), 1)
    chunks = (int(nd.max()) + 3) // 4
    q = np.empty((n, chunks), np.uint32)
    for c in range(chunks - 1, -1, -1):
        a, r = np.divmod(a, _TEN4)
        q[:, c] = _LUT4[r]
    blk = q.view(np.uint8)
    w = 4 * chunks
    if anyneg:
        blk = np.concatenate((np.zeros((n, 1), np.uint8), blk), axis=1)
        w += 1
    if int(nd.min()) < w:
        blk[np.arange(w)[None, :] < (w - nd)[:, None]] = 0
    if anyneg:
        i = np.flatnonzero(neg)
        blk[i, w - nd[i] - 1] = 45
    return blk, nd + neg


def _lut3(sep: str) -> tuple[np.ndarray, np.ndarray]:
    t = np.zeros((256, 4), np.uint8)
    for i in range(256):
        x = f"{i}{sep}".encode()
        t[i, 4 - len(x):] = np.frombuffer(x, np.uint8)
    return t, np.array([len(str(i)) + 1 for i in range(256)], np.int64)


_DOT, _COLON = _lut3("."), _lut3(":")
_HEX2 = np.frombuffer("".join(f"{i:02X}" for i in range(256)).encode(), np.uint16)


def _host(b: np.ndarray, p: np.ndarray, at: int, row: _Row):
    """ip.ip.ip.ip:port of an IPv4 host at record offset `at`."""
    ip = b[p[:, None] + np.arange(at, at + 4)[None, :]]
    if (ip == ip[0]).all():
        row.lit(".".join(map(str, ip[0].tolist())) + ":")
    else:
        row.block(_DOT[0][ip[:, :3]].reshape(len(p), 12), _DOT[1][ip[:, :3]].sum(axis=1))
        row.block(_COLON[0][ip[:, 3]], _COLON[1][ip[:, 3]])
    port = (b[p + at + 4].astype(np.int64) << 24) | (b[p + at + 5].astype(np.int64) << 16) \
        | (b[p + at + 6].astype(np.int64) << 8) | b[p + at + 7].astype(np.int64)
    row.num(np.where(port >= 1 << 31, port - (1 << 32), port))


def _text_block(b: np.ndarray, rel: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [rel, rel+length) of each record as an (n, max length) block (0 after the end) and which
    records hold only characters JSON writes as themselves (printable ASCII but '"' and '\\'); the
    other rows are left empty."""
    w = max(1, min(int(length.max()), _TEXT_MAX))
    j = np.arange(w)
    inside = j[None, :] < length[:, None]
    g = b[np.minimum(rel[:, None] + j[None, :], len(b) - 1)]
    g = np.where(inside, g, 0).astype(np.uint8)
    ok = ~(inside & (_CLS[g] != 0)).any(axis=1) & (length <= w)
    g[~ok] = 0                      # rendered per record: an empty cell, so that row lengths stay right
    return g, ok


_TEXT_MAX = 255        # a longer (V2) topic takes the per-record path: the block stays small


_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_LOW = np.array([(1 << (8 * i)) - 1 for i in range(9)], np.uint64)      # the first i bytes of a little-endian word
_CLS = np.zeros(256, np.uint8)          # 0: written as itself in a JSON string, 1: needs an escape or is
_CLS[:0x20] = 1                         # not ASCII (rendered per record), 2: NUL or a properties separator
_CLS[0x7F:] = 1
_CLS[[0x22, 0x5C]] = 1
_CLS[[0, 1, 2]] = 2
_PLAIN_OR_SEP = bytes(i for i in range(256) if _CLS[i] != 1)


def _props_fast(joined: bytes, n: int) -> np.ndarray:
    """Which of the n properties fields (joined with NUL, none holding a NUL) are in the fast form: after
    one trailing \\x02 is cut, empty or `name\\x01value` segments joined by \\x02, names and values non-empty
    printable ASCII without '"' or '\\', no name twice (module doc)."""
    x = np.frombuffer(joined, np.uint8)
    ok = np.ones(n, bool)
    if not len(x):
        return ok
    if joined.translate(None, _PLAIN_OR_SEP):             # a byte that needs an escape, or not ASCII
        bad = _CLS[x] == 1
        ok[np.cumsum(x == 0)[bad]] = False
    sep = np.flatnonzero(x <= 2)
    s = np.concatenate(([0], x[sep], [0]))                  # a record start before, a record end after
    at = np.concatenate(([-1], sep, [len(x)]))
    prev, cur, gap = s[:-1], s[1:], np.diff(at)
    valid = ((prev == 0) & (cur == 0) & (gap == 1)) | ((gap > 1) & (
        (((prev == 0) | (prev == 2)) & (cur == 1)) | ((prev == 1) & ((cur == 2) | (cur == 0)))))
    rid = np.cumsum(s == 0)[1:] - 1 - (cur == 0)             # the record each separator belongs to
    if not valid.all():
        ok[rid[~valid]] = False
    # a name twice in one record: equal fingerprints (length, first 8 bytes) send it to the per-record path
    # (equal names always collide; unequal ones rarely, and then only cost time); names are in record order,
    # so each is compared with the next few of its record
    k = np.flatnonzero(cur == 1)
    if len(k) > 1:
        start, ln = at[k] + 1, gap[k] - 1
        xz = np.concatenate((x, np.zeros(8, np.uint8)))
        w8 = np.ndarray((len(x),), np.dtype("<u8"), xz, 0, (1,))     # the 8 bytes from every position
        fp = (w8[start] & _LOW[np.minimum(ln, 8)]) ^ (ln.astype(np.uint64) * _M2)
        r = rid[k]
        per = np.bincount(r)
        most = int(per.max())
        if most <= 32:
            for d in range(1, most):
                same = (r[d:] == r[:-d]) & (fp[d:] == fp[:-d])
                if same.any():
                    ok[r[d:][same]] = False
        else:
            o = np.lexsort((fp, r))
            r, fp = r[o], fp[o]
            same = (r[1:] == r[:-1]) & (fp[1:] == fp[:-1])
            ok[r[1:][same]] = False
    return ok


class Renderer:
    """Renders windows (scanvec.Batch) of one commitlog file as JSON Lines (UTF-8 bytes)."""

    def __init__(self, fd: int, path: str, file_size: int, end: int, *, body: str, raw_body: bool,
                 check_crc: bool, schema: str = "rmqctl.dump/1"):
        self.fd, self.path, self.file_size, self.end = fd, path, file_size, end
        self.body, self.raw_body, self.check_crc, self.schema = body, raw_body, check_crc, schema
        tail = "" if body == "none" else f',"body_encoding":"{body}","body":' + ('"' if body != "text" else "")
        # what follows the properties object, by __CRC32# state (-1 absent, 1 good, 0 bad)
        self.c_parts = {-1: tail.encode(), 1: (',"property_crc_ok":true' + tail).encode(),
                        0: (',"property_crc_ok":false' + tail).encode()}
        self.d_part = b'"}\n' if body in ("base64", "hex") else b"}\n"    # closes a line
        self.slow_records = self.slow_props = 0

    def _record(self, file_start: int, pos: int, size: int):
        """The Record commitlog_file's FileWalk yields at pos (the batch kernel has accepted it)."""
        w = FileWalk(self.fd, file_start, self.file_size, pos, self.end, check_crc=self.check_crc, check_phys=True,
                     path=self.path, window=size)
        return next(iter(w))

    def render(self, bt, idx: np.ndarray | None = None) -> bytes:
        """The lines of the batch's records (all, or those at positions idx)."""
        from rmqctl.render import message_json

        b = np.frombuffer(bt.raw, np.uint8)
        sl = slice(None) if idx is None else idx
        P = bt.rel[sl]
        n = len(P)
        if not n:
            return b""
        sysf = bt.sys_flag[sl]
        off = bt.file_start + bt.win_pos + P
        tg, tsimple = _text_block(b, bt.topic_rel[sl], bt.topic_length[sl])
        pcrc = bt.prop_crc[sl]
        slow = ((sysf & 0x31) != 0) | ~tsimple | (bt.physical_offset[sl] != off) | (pcrc == 0)
        d = self.d_part
        # each head starts with the previous line's end: `d` + fields up to "properties":
        row = _Row(n)
        row.lit(d.decode() + f'{{"schema":"{self.schema}","kind":"message","physical_offset":')
        row.num(off)
        row.lit(',"size":')
        row.num(bt.total_size[sl])
        row.lit(',"magic":"V')
        row.same(np.where(bt.magic_code[sl] == MESSAGE_MAGIC_CODE_V2, 50, 49).astype(np.uint8)[:, None], 1)
        row.lit('","topic":"')
        row.same(tg, np.where(tsimple, bt.topic_length[sl], 0))
        row.lit('","queue_id":')
        row.num(bt.queue_id[sl])
        row.lit(',"queue_offset":')
        row.num(bt.queue_offset[sl])
        row.lit(',"sys_flag":')
        row.num(sysf)
        row.lit(',"transaction_type":"')
        tx = (sysf & 0xC) >> 2
        if (tx == tx[0]).all():
            row.lit(_TX[0][tx[0]][:_TX[1][tx[0]]])
        else:
            row.block(_TX[0][tx], _TX[1][tx])
        row.lit('","flag":')
        row.num(bt.flag[sl])
        row.lit(',"body_crc":')
        row.num(bt.body_crc[sl])
        row.lit(',"body_crc_ok":' + ("true" if self.check_crc else "null") + ',"born_timestamp":')
        row.num(bt.born_timestamp[sl])
        row.lit(',"born_host":"')
        Pc = np.where(slow, 0, P)       # IPv6 records are rendered per record: keep their gathers in range
        _host(b, Pc, _BORN_AT, row)
        row.lit('","store_timestamp":')
        row.num(bt.store_timestamp[sl])
        row.lit(',"store_host":"')
        _host(b, Pc, _STORE_AT, row)
        row.lit('","reconsume_times":')
        row.num(bt.reconsume_times[sl])
        row.lit(',"prepared_transaction_offset":')
        row.num(bt.prepared_transaction_offset[sl])
        row.lit(',"msg_id":"')
        h = b[Pc[:, None] + _MSGID_AT[None, :]]
        if (h[:, :8] == h[0, :8]).all():        # the store host and port: usually one per window
            row.lit(h[0, :8].tobytes().hex().upper())
            h = h[:, 8:]
        row.same(_HEX2[h].view(np.uint8), 2 * h.shape[1])
        row.lit('","body_length":')
        row.num(bt.body_length[sl])
        row.lit(',"properties":')
        flat, lens = row.build()
        ends = np.cumsum(lens)
        starts = ends - lens
        starts[0] += len(d)                        # the first line has no line before it
        after_slow = np.flatnonzero(slow[:-1]) + 1
        starts[after_slow] += len(d)               # a record rendered per record ends its own line
        heads = list(map(flat.__getitem__, map(slice, starts.tolist(), ends.tolist())))

        # properties: one joined buffer, checked and converted in bulk; what follows them joins in
        # when every record has the same __CRC32# state
        raw = memoryview(bt.raw)
        prel, plen = bt.props_rel[sl], bt.props_length[sl]
        pend = prel + plen
        trim = plen > 0
        trim[trim] = b[pend[trim] - 1] == 2        # one trailing \x02 (the broker writes it before 4.9.2)
        pend_t = pend - trim
        pslices = list(map(raw.__getitem__, map(slice, prel.tolist(), pend_t.tolist())))
        joined = b"\0".join(pslices)
        nul = None
        if joined.count(0) != n - 1:              # a field holding a NUL: rendered per record below
            nul = np.array([0 in x for x in pslices], bool)
            for i in np.flatnonzero(nul).tolist():
                pslices[i] = b""
            joined = b"\0".join(pslices)
        fast = _props_fast(joined, n)
        if nul is not None:
            fast &= ~nul
        uniform = bool((pcrc == pcrc[0]).all())
        cp = self.c_parts[int(pcrc[0])] if uniform else b""
        props = joined.replace(b"\x01", b'":"').replace(b"\x02", b'","').replace(b"\0", b'"}' + cp + b'\0{"') \
            .split(b"\0")
        props[0] = b'{"' + props[0]
        props[-1] += b'"}' + cp
        for i in np.flatnonzero(pend_t == prel).tolist():
            props[i] = b"{}" + cp
        for i in np.flatnonzero(~fast & ~slow).tolist():
            self.slow_props += 1
            props[i] = _dumps(parse_properties(bytes(raw[int(prel[i]):int(pend[i])]))).encode() + cp

        k = 2 + (not uniform) + (self.body != "none")       # pieces per record
        parts: list = [None] * (n * k)
        parts[0::k] = heads
        parts[1::k] = props
        if not uniform:
            c = self.c_parts
            parts[2::k] = [c[v] for v in pcrc.tolist()]
        if self.body != "none":
            br = bt.body_rel[sl]
            bodies = map(raw.__getitem__, map(slice, br.tolist(), (br + bt.body_length[sl]).tolist()))
            if self.body == "base64":
                parts[k - 1::k] = list(map(_b64, bodies))
            elif self.body == "hex":
                parts[k - 1::k] = [x.hex().encode() for x in bodies]
            else:
                parts[k - 1::k] = [_dumps(bytes(x).decode("utf-8", errors="backslashreplace")).encode()
                                   for x in bodies]
        if not slow[-1]:
            parts.append(d)
        for i in np.flatnonzero(slow).tolist():
            pos = bt.win_pos + int(P[i])
            r = self._record(bt.file_start, pos, int(bt.total_size[sl][i]))
            line = (message_json(r, self.body, self.raw_body, schema=self.schema) + "\n").encode()
            parts[i * k:(i + 1) * k] = [d + line if i and not slow[i - 1] else line] + [b""] * (k - 1)
            self.slow_records += 1
        return b"".join(parts)


class CompiledRenderer(Renderer):
    """Renderer whose windows are written by the numba kernel (rmqctl.kernels.dumpjson_nb) into one reused
    buffer: every line in compiled code, but those the kernel leaves to message_json (its module doc).
    Bodies as text go to the numpy renderer (their escaping stays with json)."""

    def __init__(self, *a, kernel=None, **kw):
        super().__init__(*a, **kw)
        if kernel is None:
            from rmqctl.kernels import dumpjson_nb as kernel
        self.k = k = kernel
        tail = self.c_parts
        pieces = [f'{{"schema":"{self.schema}","kind":"message","physical_offset":', ',"size":', ',"magic":"V',
                  '","topic":"', '","queue_id":', ',"queue_offset":', ',"sys_flag":', ',"transaction_type":"',
                  '","flag":', ',"body_crc":',
                  ',"body_crc_ok":' + ("true" if self.check_crc else "null") + ',"born_timestamp":',
                  ',"born_host":"', '","store_timestamp":', ',"store_host":"', '","reconsume_times":',
                  ',"prepared_transaction_offset":', ',"msg_id":"', '","body_length":', ',"properties":',
                  tail[-1], tail[1], self.d_part, *(TRANSACTION_TYPE_NAMES[t] for t in (0, 4, 8, 12))]
        enc = [x.encode() if isinstance(x, str) else x for x in pieces]
        self.lits = np.frombuffer(b"".join(enc), np.uint8)
        self.lo = np.cumsum([0] + [len(x) for x in enc]).astype(np.int64)
        self.mode = {"none": k.BODY_NONE, "base64": k.BODY_BASE64, "hex": k.BODY_HEX}.get(self.body)
        self.out = np.empty(0, np.uint8)
        self.names = np.empty(2 * k._MAX_NAMES, np.int64)
        self.outlen = np.zeros(1, np.uint64)

    def render(self, bt, idx: np.ndarray | None = None) -> bytes:
        if self.mode is None:
            return super().render(bt, idx)
        from rmqctl.render import message_json

        cols = np.stack((bt.rel, bt.total_size, bt.magic_code, bt.body_crc, bt.queue_id, bt.flag, bt.queue_offset,
                         bt.physical_offset, bt.sys_flag, bt.born_timestamp, bt.store_timestamp, bt.reconsume_times,
                         bt.prepared_transaction_offset, bt.body_rel, bt.body_length, bt.topic_rel, bt.topic_length,
                         bt.props_rel, bt.props_length))
        pcrc = bt.prop_crc
        if idx is not None:
            cols, pcrc = np.ascontiguousarray(cols[:, idx]), pcrc[idx]
        n = cols.shape[1]
        if not n:
            return b""
        # what the lines can take at most: the key text and 14 numbers, 2 hosts and a msg_id per record;
        # the topic; properties grow at most 3x; base64 or hex bodies at most 2x (+4)
        cap = n * (len(self.lits) + 420) + int(cols[16].sum()) + 3 * int(cols[18].sum()) + 2 * int(cols[14].sum())
        if len(self.out) < cap:
            self.out = np.empty(cap + (cap >> 3), np.uint8)
        starts = np.empty(n + 1, np.int64)
        slow = np.empty(n, np.uint8)
        w = self.k.render(np.frombuffer(bt.raw, np.uint8), cols, np.ascontiguousarray(pcrc, np.int8),
                          bt.file_start + bt.win_pos, self.lits, self.lo, self.mode, self.out, starts, slow,
                          self.names, self.outlen)
        if not slow.any():
            return memoryview(self.out)[:w]     # no copy: valid until the next window (lines() doc)
        mv = memoryview(self.out)
        parts, prev = [], 0
        for i in np.flatnonzero(slow).tolist():
            a = int(starts[i])
            parts.append(mv[prev:a])
            prev = a
            r = self._record(bt.file_start, bt.win_pos + int(cols[0, i]), int(cols[1, i]))
            parts.append((message_json(r, self.body, self.raw_body, schema=self.schema) + "\n").encode())
            if slow[i] == 2:
                self.slow_props += 1
            else:
                self.slow_records += 1
        parts.append(mv[prev:w])
        return b"".join(parts)


def _compiled(size_ahead: int, body: str = "base64"):
    """The compiled renderer's kernel when it is to be used, else None (the numpy renderer): RMQCTL_KERNEL=
    numpy never, numba always (a usage error when it cannot load), auto once the bytes ahead in this file
    plus those this process has rendered reach COMPILED_AFTER, or when numba is loaded already, and never
    for bodies as text (the numpy renderer writes those either way); a numba that does not import or cannot
    cache its compilation: None, silently."""
    import sys

    from rmqctl import kernels

    want = kernels.requested()
    if want == "numpy" or (want == "auto" and (body == "text" or (size_ahead + _rendered[0] < COMPILED_AFTER
                                                                  and sys.modules.get("numba") is None))):
        return None
    k = None
    if kernels.load_now() is not None:
        try:
            from rmqctl.kernels import dumpjson_nb as k
        except Exception:   # noqa: BLE001 -- numba unusable here: the numpy renderer (same bytes)
            k = None
    if k is None and want == "numba":
        from rmqctl.errors import UsageError

        raise UsageError(kernels._NEEDS_NUMBA, field=kernels.ENV)
    return k


def _ahead(fd: int, start: int, size: int) -> int:
    """How many bytes of records may follow `start`, for _compiled: size - start when the 64 KiB just before
    start + COMPILED_AFTER hold a non-zero byte (records are contiguous, so that many are ahead), else 0:
    the file's records end before (the active commitlog file, zero-filled after its last record), and
    loading numba would cost more than it saves. One read."""
    if size - start < COMPILED_AFTER:
        return size - start
    probe = os.pread(fd, _PROBE, start + COMPILED_AFTER - _PROBE)
    return size - start if probe.count(0) != len(probe) else 0


_PROBE = 64 << 10
# Measured (1 KiB messages, CPU s): loading numba and the cached kernels costs ~0.65 s per process; the numpy
# renderer takes ~4.0 s per GiB, the compiled one (walk included) ~0.6 s: it pays back after ~190 MiB.
COMPILED_AFTER = 256 << 20
_rendered = [0]         # bytes of records this process has rendered with the numpy renderer


_TX = (np.zeros((4, 8), np.uint8), np.zeros(4, np.int64))
for _k, _name in TRANSACTION_TYPE_NAMES.items():
    _TX[0][_k >> 2, :len(_name)] = np.frombuffer(_name.encode(), np.uint8)
    _TX[1][_k >> 2] = len(_name)


def lines(fd: int, path: Path, file_start: int, size: int, start: int, *, seen: int = 0, shown: int = 0,
          skip: int = 0, count: int | None = None, topic: str | None = None, queue: int | None = None,
          body: str = "base64", raw_body: bool = False, check_crc: bool = True, window: int | None = None,
          stats: dict | None = None):
    """The rest of dumping.commitlog_json from `start` (a record boundary, `seen`/`shown` records counted
    so far): ("lines", bytes) for the records of each window (bytes or a memoryview of the compiled
    renderer's buffer, valid until the next item: write it, or copy it, before asking for more). Returns the
    walk's final scan.Stop, or None when `count` records have been shown before it."""
    from rmqctl.scanvec import walk_file

    win = window or DUMP_WINDOW
    k = _compiled(_ahead(fd, start, size), body)
    kw = dict(body=body, raw_body=raw_body, check_crc=check_crc)
    rd = Renderer(fd, str(path), size, size, **kw) if k is None else \
        CompiledRenderer(fd, str(path), size, size, kernel=k, **kw)
    if stats is not None:
        stats["renderer"] = rd
    gen = walk_file(fd, file_start, size, start, window=win, check_crc=check_crc, check_phys=True,
                    path=str(path), buf=bytearray(win))
    filtered = topic is not None or queue is not None or skip > seen or count is not None
    while True:
        try:
            bt = next(gen)
        except StopIteration as e:
            stop = e.value
            break
        if k is None:
            _rendered[0] += int(bt.rel[-1] + bt.total_size[-1])
        if not filtered:
            yield "lines", rd.render(bt)
            continue
        sel = np.ones(len(bt), bool)
        if queue is not None:
            sel &= bt.queue_id == queue
        if topic is not None:
            sel &= np.array([t == topic for t in bt.topics()], bool)
        idx = np.flatnonzero(sel)
        drop = max(0, min(len(idx), skip - seen))
        seen += len(idx)
        idx = idx[drop:]
        over = False
        if count is not None and shown + len(idx) > count:
            idx, over = idx[:count - shown], True
        shown += len(idx)
        if len(idx):
            yield "lines", rd.render(bt, idx)
        if over:
            return None
    return stop
