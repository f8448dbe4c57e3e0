"""A tiny broker-like writer for query tests: commitlog records (with end-of-file blanks), consume
queues (with pre-blank units) and index files built with IndexFile.putKey's algorithm (§4.5), at
small sizes so that several files, full index files and hash collisions happen with a few messages.
Independent of rmqctl's readers on purpose (plain struct), so the tests can catch them."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

BLANK = 0xCBD43194 - (1 << 32)
V1 = 0xDAA320A7 - (1 << 32)


def jhash(s: str) -> int:
    h = 0
    b = s.encode("utf-16-be")
    for i in range(0, len(b), 2):
        h = (31 * h + int.from_bytes(b[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def encode(topic, qid, qoff, phys, store_ts, body=b"x", props=None, sys_flag=0,
           store_host=bytes([10, 0, 0, 1]), store_port=10911, born_ts=None, crc=None):
    p = "".join(f"{k}\x01{v}\x02" for k, v in (props or {}).items()).encode()
    t = topic.encode()
    born = struct.pack(">4si", bytes([10, 0, 0, 9]), 5555)
    store = struct.pack(">4si", store_host, store_port)
    total = 91 + len(body) + len(t) + len(p)
    rec = struct.pack(">iiiiiqqiq", total, V1, zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc, qid, 0,
                      qoff, phys, sys_flag, born_ts if born_ts is not None else store_ts - 5) + born
    rec += struct.pack(">q", store_ts) + store + struct.pack(">iqi", 0, 0, len(body)) + body
    rec += struct.pack(">b", len(t)) + t + struct.pack(">h", len(p)) + p
    assert len(rec) == total
    return rec


class StoreBuilder:
    def __init__(self, root: Path, cl_size=4096, cq_units=8, slots=8, items=16):
        self.root = Path(root)
        self.cl_size, self.cq_size, self.slots, self.items = cl_size, cq_units * 20, slots, items
        self.cl = bytearray()            # logical commitlog bytes
        self.queues = {}                 # (topic, qid) -> list of units
        self.next_qoff = {}
        self.msgs = []                   # (phys, size, topic, qid, qoff, store_ts, props)
        self.index = []                  # list of dict(header=[...], slots=bytearray, items=bytearray)
        self.index_names = []

    @property
    def config(self):
        return {"mappedFileSizeCommitLog": self.cl_size, "mappedFileSizeConsumeQueue": self.cq_size,
                "maxHashSlotNum": self.slots, "maxIndexNum": self.items}

    def put(self, topic, qid, store_ts, body=b"x", props=None, index=True, cq=True, sys_flag=0, **kw):
        qoff = self.next_qoff.get((topic, qid), 0)
        phys = len(self.cl)
        rec = encode(topic, qid, qoff, phys, store_ts, body, props, sys_flag, **kw)
        room = self.cl_size - phys % self.cl_size
        if len(rec) + 8 > room:
            self.cl += struct.pack(">ii", room, BLANK) + bytes(room - 8)
            phys = len(self.cl)
            rec = encode(topic, qid, qoff, phys, store_ts, body, props, sys_flag, **kw)
        self.cl += rec
        self.next_qoff[(topic, qid)] = qoff + 1
        tags = jhash(props["TAGS"]) if props and props.get("TAGS") else 0
        if cq:
            self.queues.setdefault((topic, qid), []).append((qoff, phys, len(rec), tags))
        self.msgs.append((phys, len(rec), topic, qid, qoff, store_ts, dict(props or {})))
        if index:
            keys = []
            if props and props.get("UNIQ_KEY"):
                keys.append(props["UNIQ_KEY"])
            if props and props.get("KEYS"):
                keys += [k for k in props["KEYS"].split(" ") if k]
            for k in keys:
                self._put_key(f"{topic}#{k}", phys, store_ts)
        return phys

    def _new_index(self):
        prev = self.index[-1]["h"] if self.index else None
        h = [0, 0, 0, 0, 0, 1]
        if prev:
            h[1], h[3] = prev[1], prev[3]     # begin = end = previous file's end
            h[0], h[2] = prev[1], prev[3]
        self.index.append({"h": h, "slots": [0] * self.slots, "items": [(0, 0, 0, 0)]})
        self.index_names.append(f"2024010112000{len(self.index):04d}")

    def _put_key(self, key, phys, ts):
        if not self.index or self.index[-1]["h"][5] >= self.items:
            self._new_index()
        f = self.index[-1]
        h = f["h"]
        kh = abs(jhash(key))
        kh = 0 if kh >= 1 << 31 else kh
        slot = kh % self.slots
        sv = f["slots"][slot]
        if sv <= 0 or sv > h[5]:
            sv = 0
        diff = 0 if h[0] <= 0 else max(0, min((ts - h[0]) // 1000, 2**31 - 1))
        f["items"].append((kh, phys, diff, sv))
        f["slots"][slot] = h[5]
        if h[5] <= 1:
            h[2], h[0] = phys, ts
        if sv == 0:
            h[4] += 1
        h[5] += 1
        h[3], h[1] = phys, ts

    def write(self, abort=False):
        r = self.root
        (r / "commitlog").mkdir(parents=True, exist_ok=True)
        data = bytes(self.cl)
        for start in range(0, max(len(data), 1), self.cl_size):
            (r / "commitlog" / f"{start:020d}").write_bytes(data[start:start + self.cl_size].ljust(self.cl_size, b"\0"))
        for (topic, qid), units in self.queues.items():
            d = r / "consumequeue" / topic / str(qid)
            d.mkdir(parents=True, exist_ok=True)
            first = units[0][0]
            per = self.cq_size // 20
            buf = {}
            for qoff in range(first - first % per, first):    # pre-blank units before the first one
                buf[qoff] = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
            for qoff, phys, size, tags in units:
                buf[qoff] = struct.pack(">qiq", phys, size, tags)
            last = max(buf)
            for fstart in range(first - first % per, last + 1, per):
                body = b"".join(buf.get(q, bytes(20)) for q in range(fstart, fstart + per))
                (d / f"{fstart * 20:020d}").write_bytes(body)
        if self.index:
            (r / "index").mkdir(exist_ok=True)
        for name, f in zip(self.index_names, self.index):
            b = struct.pack(">qqqqii", *f["h"]) + struct.pack(f">{self.slots}i", *f["slots"])
            b += b"".join(struct.pack(">iqii", *it) for it in f["items"])
            (r / "index" / name).write_bytes(b.ljust(40 + 4 * self.slots + 20 * self.items, b"\0"))
        (r / "checkpoint").write_bytes(bytes(4096))
        if abort:
            (r / "abort").write_bytes(b"")
        return r
