"""`dump --json` of commitlog files on the batch path: the JSON Lines of a whole window of records built at
once from the batch kernel's arrays (rmqctl.scanvec), byte-identical to rendering each record with
rmqctl.render.message_json (tests/test_dump_json_batch.py compares both on every fixture, every
real-world file and under random damage).

Per window, three bulk steps and one join:
- every fixed field of every record (numbers, hosts, msg_id, the topic when it needs no escaping) is
  written into one uint8 matrix, a row per record, with fixed-width columns; digits come from array
  arithmetic, unused column cells hold 0 and are squeezed out in one boolean compaction (0 never occurs
  in the text: a topic or property holding a NUL needs escaping and takes the per-record path);
- the properties of all records are joined into one buffer, checked with array operations (the fast form
  is ASCII `name\\x01value\\x02...` with nothing to escape, no empty name or value, no repeated name) and
  turned into JSON objects with two bytes.replace over the whole buffer;
- the bodies are encoded with one C call each (binascii, or pybase64 when installed);
- the pieces of every line are interleaved with list slicing and joined once.
A record the bulk steps do not cover (compressed body, IPv6 host, a topic needing escapes, PHYSICALOFFSET
different from its position, a bad __CRC32#) is rendered by message_json from a FileWalk Record; a
properties field outside the fast form is rendered by json.dumps of the parsed dict, as message_json does.
Only numpy is needed; memory is bounded by the kernel's window.
"""
from __future__ import annotations

import binascii
import json
import os
from functools import partial
from pathlib import Path

import numpy as np

from rmqctl.errors import FormatError
from rmqctl.formats.commitlog import MESSAGE_MAGIC_CODE_V2, TRANSACTION_TYPE_NAMES
from rmqctl.formats.properties import parse_properties
from rmqctl.scan import FileWalk

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_P10 = np.array([10 ** k for k in range(20)], dtype=np.uint64)
_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)
# msg_id = STOREHOST(4) + STOREPORT(4) + PHYSICALOFFSET(8) of an IPv4 record (MessageDecoder.createMessageId)
_MSGID_AT = np.array(list(range(64, 72)) + list(range(28, 36)), np.int64)
_BORN_AT, _STORE_AT = 48, 64


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
    """The fixed part of every line as columns of one uint8 matrix (0 = no byte)."""

    def __init__(self, n: int):
        self.n, self.cols, self.width = n, [], 0

    def lit(self, text: str):
        a = np.frombuffer(text.encode(), np.uint8)
        self.cols.append(a)
        self.width += len(a)

    def block(self, blk: np.ndarray):
        self.cols.append(blk)
        self.width += blk.shape[1]

    def num(self, v: np.ndarray):
        self.block(_digits(v))

    def build(self) -> tuple[bytes, np.ndarray]:
        m = np.empty((self.n, self.width), np.uint8)
        c = 0
        for blk in self.cols:
            w = blk.shape[-1]
            m[:, c:c + w] = blk
            c += w
        keep = m != 0
        return m[keep].tobytes(), np.count_nonzero(keep, axis=1)


def _digits(v: np.ndarray) -> np.ndarray:
    """Decimal text of an int64 array as an (n, w) uint8 block, right-aligned, 0 before the text."""
    v = np.asarray(v, np.int64)
    neg = v < 0
    a = v.astype(np.uint64)
    anyneg = bool(neg.any())
    if anyneg:
        a = np.where(neg, ~a + np.uint64(1), a)
    nd = np.maximum(np.searchsorted(_P10, a, side="right"), 1)
    k = int(nd.max())
    w = int((nd + neg).max())
    d = (a[:, None] // _P10[:k][::-1][None, :]) % np.uint64(10)
    blk = np.zeros((len(v), w), np.uint8)
    blk[:, w - k:] = d.astype(np.uint8) + 48
    blk[np.arange(w)[None, :] < (w - nd)[:, None]] = 0
    if anyneg:
        i = np.flatnonzero(neg)
        blk[i, w - nd[i] - 1] = 45
    return blk


def _host(b: np.ndarray, p: np.ndarray, at: int, row: _Row):
    for j in range(4):
        row.num(b[p + at + j].astype(np.int64))
        row.lit("." if j < 3 else ":")
    port = (b[p + at + 4].astype(np.int64) << 24) | (b[p + at + 5].astype(np.int64) << 16) \
        | (b[p + at + 6].astype(np.int64) << 8) | b[p + at + 7].astype(np.int64)
    row.num(np.where(port >= 1 << 31, port - (1 << 32), port))


def _text_block(b: np.ndarray, rel: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [rel, rel+length) of each record as an (n, max length) block (0 after the end) and which
    records hold only characters JSON writes as themselves (printable ASCII but '"' and '\\')."""
    w = max(1, int(length.max()))
    j = np.arange(w)
    inside = j[None, :] < length[:, None]
    g = b[np.minimum(rel[:, None] + j[None, :], len(b) - 1)]
    g = np.where(inside, g, 0)
    bad = inside & ((g < 0x20) | (g > 0x7E) | (g == 0x22) | (g == 0x5C))
    return g, ~bad.any(axis=1)


def _props_fast(joined: bytes, n: int) -> np.ndarray:
    """Which of the n properties fields (joined with NUL, none holding a NUL) are in the fast form: after
    one trailing \\x02 is cut, empty or `name\\x01value` segments joined by \\x02, names and values non-empty
    printable ASCII without '"' or '\\', no name twice (module doc)."""
    x = np.frombuffer(joined, np.uint8)
    ok = np.ones(n, bool)
    if not len(x):
        return ok
    bad = ((x < 0x20) & (x > 2)) | (x > 0x7E) | (x == 0x22) | (x == 0x5C)
    if bad.any():
        ok[np.cumsum(x == 0)[bad]] = False
    sep = np.flatnonzero(x <= 2)
    s = np.concatenate(([0], x[sep], [0]))                  # a record start before, a record end after
    at = np.concatenate(([-1], sep, [len(x)]))
    prev, cur, gap = s[:-1], s[1:], np.diff(at)
    valid = ((prev == 0) & (cur == 0) & (gap == 1)) | ((gap > 1) & (
        (((prev == 0) | (prev == 2)) & (cur == 1)) | ((prev == 1) & ((cur == 2) | (cur == 0)))))
    z = np.cumsum(s == 0)[1:]
    rid = z - 1 - (cur == 0)                                 # the record each separator belongs to
    if not valid.all():
        ok[rid[~valid]] = False
    # a name twice in one record: equal (length, polynomial hash) sends the record to the slow path
    k = np.flatnonzero(cur == 1)
    if len(k):
        start, end = at[k] + 1, at[k + 1]
        pw, ipw = _powers(len(x) + 1)
        h0 = np.zeros(len(x) + 1, np.uint64)
        np.cumsum(x.astype(np.uint64) * pw[:len(x)], dtype=np.uint64, out=h0[1:])
        kh = (h0[end] - h0[start]) * ipw[start]
        r, ln = rid[k], end - start
        o = np.lexsort((kh, ln, r))
        r, ln, kh = r[o], ln[o], kh[o]
        same = (r[1:] == r[:-1]) & (ln[1:] == ln[:-1]) & (kh[1:] == kh[:-1])
        if same.any():
            ok[r[1:][same]] = False
    return ok


_PW: list = [np.ones(1, np.uint64), np.ones(1, np.uint64)]
_R = 0x9E3779B97F4A7C15


def _powers(n: int):
    """R**i and R**-i modulo 2**64 for i < n (R odd, so invertible)."""
    if len(_PW[0]) < n:
        m = max(n, 2 * len(_PW[0]))
        for j, r in enumerate((_R, pow(_R, -1, 1 << 64))):
            a = np.full(m, r, np.uint64)
            a[0] = 1
            _PW[j] = np.cumprod(a, dtype=np.uint64)
    return _PW[0], _PW[1]


class Renderer:
    """Renders windows (scanvec.Batch) of one commitlog file as JSON Lines text."""

    def __init__(self, fd: int, path: str, file_size: int, end: int, *, body: str, raw_body: bool,
                 check_crc: bool, schema: str = "rmqctl.dump/1"):
        self.fd, self.path, self.file_size, self.end = fd, path, file_size, end
        self.body, self.raw_body, self.check_crc, self.schema = body, raw_body, check_crc, schema
        self.topic_json: dict = {}
        tail = "" if body == "none" else f',"body_encoding":"{body}","body":' + ('"' if body != "text" else "")
        self.c_parts = [tail.encode(), (',"property_crc_ok":true' + tail).encode(),
                        (',"property_crc_ok":false' + tail).encode()]
        self.d_part = b'"}\n' if body in ("base64", "hex") else b"}\n"
        self.slow_records = 0

    def _record(self, file_start: int, pos: int, size: int):
        """The Record commitlog_file's FileWalk yields at pos (the batch kernel has accepted it)."""
        w = FileWalk(self.fd, file_start, self.file_size, pos, self.end, check_crc=self.check_crc, check_phys=True,
                     path=self.path, window=size)
        return next(iter(w))

    def render(self, bt, idx: np.ndarray | None = None) -> str:
        """The lines of the batch's records (all, or those at positions idx), as one str."""
        from rmqctl.render import message_json

        b = np.frombuffer(bt.raw, np.uint8)
        sl = slice(None) if idx is None else idx
        P = bt.rel[sl]
        n = len(P)
        if not n:
            return ""
        sysf = bt.sys_flag[sl]
        off = bt.file_start + bt.win_pos + P
        tlen, trel = bt.topic_length[sl], bt.topic_rel[sl]
        tg, tsimple = _text_block(b, trel, tlen)
        pcrc = bt.prop_crc[sl]
        slow = ((sysf & 0x31) != 0) | ~tsimple | (bt.physical_offset[sl] != off) | (pcrc == 0)
        row = _Row(n)
        row.lit(f'{{"schema":"{self.schema}","kind":"message","physical_offset":')
        row.num(off)
        row.lit(',"size":')
        row.num(bt.total_size[sl])
        row.lit(',"magic":"V')
        row.block(np.where(bt.magic_code[sl] == MESSAGE_MAGIC_CODE_V2, 50, 49).astype(np.uint8)[:, None])
        row.lit('","topic":"')
        row.block(tg.astype(np.uint8))
        row.lit('","queue_id":')
        row.num(bt.queue_id[sl])
        row.lit(',"queue_offset":')
        row.num(bt.queue_offset[sl])
        row.lit(',"sys_flag":')
        row.num(sysf)
        row.lit(',"transaction_type":"')
        names = [TRANSACTION_TYPE_NAMES[k].encode() for k in (0, 4, 8, 12)]
        tw = max(map(len, names))
        lut = np.zeros((4, tw), np.uint8)
        for i, nm in enumerate(names):
            lut[i, :len(nm)] = np.frombuffer(nm, np.uint8)
        row.block(lut[(sysf & 0xC) >> 2])
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
        hx = np.empty((n, 32), np.uint8)
        hx[:, 0::2] = _HEX[h >> 4]
        hx[:, 1::2] = _HEX[h & 15]
        row.block(hx)
        row.lit('","body_length":')
        row.num(bt.body_length[sl])
        row.lit(',"properties":')
        flat, lens = row.build()
        ends = np.cumsum(lens)
        mv = memoryview(flat)
        heads = list(map(mv.__getitem__, map(slice, (ends - lens).tolist(), ends.tolist())))

        # properties: one joined buffer, checked and converted in bulk
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
        conv = b'{"' + joined.replace(b"\x01", b'":"').replace(b"\x02", b'","').replace(b"\0", b'"}\0{"') + b'"}'
        props = conv.split(b"\0")
        for i in np.flatnonzero(pend_t == prel).tolist():
            props[i] = b"{}"
        for i in np.flatnonzero(~fast & ~slow).tolist():
            a, e = int(prel[i]), int(pend[i])
            props[i] = _dumps(parse_properties(bytes(raw[a:e]))).encode()

        cp = self.c_parts
        cparts = [cp[0], cp[1], cp[2]]
        pc = np.where(pcrc < 0, 0, np.where(pcrc > 0, 1, 2))
        carr = [cparts[i] for i in pc.tolist()]
        k = 4 if self.body != "none" else 3
        parts: list = [None] * (n * (k + 1))
        parts[0::k + 1] = heads
        parts[1::k + 1] = props
        parts[2::k + 1] = carr
        if self.body != "none":
            br = bt.body_rel[sl]
            bodies = map(raw.__getitem__, map(slice, br.tolist(), (br + bt.body_length[sl]).tolist()))
            if self.body == "base64":
                parts[3::k + 1] = list(map(_b64, bodies))
            elif self.body == "hex":
                parts[3::k + 1] = [bytes(x).hex().encode() for x in bodies]
            else:
                parts[3::k + 1] = [_dumps(bytes(x).decode("utf-8", errors="backslashreplace")).encode()
                                   for x in bodies]
        parts[k::k + 1] = [self.d_part] * n
        for i in np.flatnonzero(slow).tolist():
            pos = bt.win_pos + int(P[i])
            r = self._record(bt.file_start, pos, int(bt.total_size[sl][i]))
            parts[i * (k + 1):(i + 1) * (k + 1)] = [(message_json(r, self.body, self.raw_body, schema=self.schema)
                                                     + "\n").encode()] + [b""] * k
            self.slow_records += 1
        return b"".join(parts).decode("utf-8")


def commitlog_json(path, *, body: str = "base64", raw_body: bool = False, skip: int = 0, count: int | None = None,
                   topic: str | None = None, queue: int | None = None, check_crc: bool = True,
                   from_offset: int | None = None, file_start: int | None = None, window: int | None = None):
    """dumping.commitlog_file for --json: yields ("lines", str) for runs of records, then ("trailer", dict),
    the same lines and trailer as rendering commitlog_file's records with message_json."""
    from rmqctl import dumping
    from rmqctl.scanvec import WINDOW, walk_file
    from rmqctl.store.commitlog import open_ro

    path = Path(path)
    file_start = dumping.start_offset_of(path) if file_start is None else file_start
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError("empty file (0 bytes): a commitlog file is pre-allocated to its full size",
                              path=path, offset=0)
        start = 0 if from_offset is None else max(0, from_offset - file_start)
        win = window or WINDOW
        rd = Renderer(fd, str(path), size, size, body=body, raw_body=raw_body, check_crc=check_crc)
        gen = walk_file(fd, file_start, size, start, window=win, check_crc=check_crc, check_phys=True,
                        path=str(path), buf=bytearray(win))
        seen = shown = 0
        filtered = topic is not None or queue is not None or skip or count is not None
        while True:
            try:
                bt = next(gen)
            except StopIteration as e:
                stop = e.value
                break
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
                return
        yield "trailer", dumping.commitlog_trailer(fd, path, file_start, size, stop)
