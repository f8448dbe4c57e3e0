"""Fault injection on a COPY of a store (docs/faults.md F01-F18), shared by the verify and recover tests.

Usage:
    root = copy_store(fixture_store_dir, tmp_path / "store")    # never inject into a committed fixture
    hit = flip_body_bit(root)                                    # -> Injected(path, offset, what)
    ... run rmqctl on root, assert it names hit.path and hit.offset ...

Every injector takes the store root (the directory holding commitlog/), changes bytes in place and
returns an `Injected` saying which file and which offset a correct tool must name:
  * commitlog faults: path = the commitlog file, offset = ABSOLUTE commitlog offset of the record
    (= file start + position), because that is how the broker and rmqctl address records;
  * every other file: offset = byte position inside that file.
Records are located with rmqctl's own reader only to pick a target; the mutation itself is plain
byte writing, so a reader bug cannot hide a fault. Pass `file_size=` when the store's commitlog
file size cannot be inferred from its files (e.g. after deleting them).

`make_store()` writes a small synthetic store with the spec's byte layout (docs/store-format.md)
for tests that must run without the Java oracle; fixture stores from the oracle are preferred.
Functions here are a stable API: add new ones, don't change signatures.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Injected", "RecordRef", "copy_store", "commitlog_files", "commitlog_records", "pick_record",
    "flip_body_bit", "flip_header_bit", "flip_property_bit", "torn_tail", "zero_page",
    "stale_record_after_end", "remove_middle_commitlog", "zero_length_last_file",
    "cq_unit_wrong_offset", "cq_ahead", "cq_behind", "index_chain_cycle", "checkpoint_garbage",
    "truncate_config", "hold_lock", "make_store", "crc_zero_body", "damage_topic",
]


@dataclass(frozen=True)
class Injected:
    path: Path      # the file a correct report names
    offset: int     # absolute commitlog offset for commitlog faults, else byte position in `path`
    what: str       # short description, for test messages

    def __str__(self) -> str:
        return f"{self.path}: offset {self.offset}: {self.what}"


@dataclass(frozen=True)
class RecordRef:
    path: Path
    file_start: int
    pos: int            # position inside the file
    size: int
    queue_id: int
    queue_offset: int
    topic: str
    body_pos: int       # position of the body inside the file
    body_len: int
    props_pos: int      # position of the properties bytes inside the file
    props_len: int

    @property
    def offset(self) -> int:
        return self.file_start + self.pos


# -- locating things ------------------------------------------------------------------------------
def copy_store(src, dst) -> Path:
    """Copy a store directory (symlinks copied as links). Returns dst as a Path."""
    dst = Path(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def tree_hashes(root: Path) -> dict:
    """sha256 of every file under a store, the quarantine excluded: what undo must give back."""
    out = {}
    for dp, dns, fns in os.walk(root):
        dns[:] = [d for d in dns if d != "rmqctl-quarantine"]
        for fn in fns:
            p = Path(dp) / fn
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def commitlog_files(root) -> list[Path]:
    d = Path(root) / "commitlog"
    return sorted(p for p in d.iterdir() if p.name.isdigit() and len(p.name) == 20)


def _file_size(root, file_size):
    if file_size:
        return file_size
    sizes = [p.stat().st_size for p in commitlog_files(root)]
    return max(sizes)


def commitlog_records(root, *, file_size: int | None = None) -> list[RecordRef]:
    """Every valid message record of the commitlog, in offset order (small stores only)."""
    from rmqctl.scan import FileWalk

    out = []
    for p in commitlog_files(root):
        start = int(p.name)
        fd = os.open(p, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for r in FileWalk(fd, start, size, 0, min(size, _file_size(root, file_size)), check_phys=True):
                born6, store6 = bool(r.sys_flag & 0x10), bool(r.sys_flag & 0x20)
                body_pos = r.offset - start + 48 + (20 if born6 else 8) + 8 + (20 if store6 else 8) + 16
                plen = len(r.properties_raw)
                out.append(RecordRef(p, start, r.offset - start, r.total_size, r.queue_id, r.queue_offset,
                                     r.topic, body_pos, r.body_length, r.offset - start + r.total_size - plen, plen))
        finally:
            os.close(fd)
    return out


def pick_record(root, where: str = "middle", *, file_size: int | None = None, body: bool = False,
                props: bool = False) -> RecordRef:
    """A record in the middle of the commitlog (or 'first'/'last'); body/props: must have a non-empty one."""
    recs = [r for r in commitlog_records(root, file_size=file_size)
            if (not body or r.body_len > 0) and (not props or r.props_len > 0)]
    if not recs:
        raise ValueError(f"no suitable record in {root}")
    if where == "first":
        return recs[0]
    if where == "last":
        return recs[-1]
    # middle of a middle file when there are several files (F03: "file N-2")
    files = sorted({r.path for r in recs})
    if len(files) >= 3:
        in_file = [r for r in recs if r.path == files[len(files) - 3]]
        return in_file[len(in_file) // 2]
    return recs[len(recs) // 2]


def _xor_byte(path: Path, pos: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ mask]))


# -- commitlog faults -----------------------------------------------------------------------------
def flip_body_bit(root, rec: RecordRef | None = None, *, bit: int = 0) -> Injected:
    """F03: flip one bit in the middle of a message body (body CRC mismatch)."""
    rec = rec or pick_record(root, body=True)
    _xor_byte(rec.path, rec.body_pos + rec.body_len // 2, 1 << bit)
    return Injected(rec.path, rec.offset, "bit flip in body")


HEADER_FIELDS = {"total_size": 3, "magic": 7, "queue_offset": 27, "physical_offset": 35, "sys_flag": 39}


def flip_header_bit(root, rec: RecordRef | None = None, *, field: str = "total_size", mask: int = 0x04) -> Injected:
    """Flip one bit in a header field (default: TOTALSIZE's low byte -> length formula mismatch).
    field: total_size | magic | queue_offset | physical_offset | sys_flag (byte = its last byte)."""
    rec = rec or pick_record(root)
    _xor_byte(rec.path, rec.pos + HEADER_FIELDS[field], mask)
    return Injected(rec.path, rec.offset, f"bit flip in header field {field}")


def flip_property_bit(root, rec: RecordRef | None = None) -> Injected:
    """F02: set bit 7 of the first properties byte: the body CRC stays valid, the properties become
    invalid UTF-8 (and a __CRC32# tail, where present, no longer matches)."""
    rec = rec or pick_record(root, props=True)
    _xor_byte(rec.path, rec.props_pos, 0x80)
    return Injected(rec.path, rec.offset, "bit flip in properties")


def damage_topic(root, rec: RecordRef | None = None, *, index: int = -2, to: bytes = b"\0") -> Injected:
    """Overwrite one byte of a record's topic (no CRC covers it): the record stays valid and names a topic
    that cannot be a directory (a NUL byte, a '/'). The topic bytes end 2 bytes before the properties."""
    rec = rec or pick_record(root)
    raw = rec.topic.encode()
    pos = rec.props_pos - 2 - len(raw) + (index % len(raw))
    with open(rec.path, "r+b") as f:
        f.seek(pos)
        f.write(to)
    return Injected(rec.path, rec.offset, f"topic byte {index % len(raw)} set to {to!r}")


def torn_tail(root, *, keep: int = 24) -> Injected:
    """F01: the last record keeps its first `keep` bytes (TOTALSIZE, magic, ...), the rest is zeros."""
    rec = pick_record(root, "last")
    with open(rec.path, "r+b") as f:
        f.seek(rec.pos + keep)
        f.write(b"\0" * (rec.size - keep))
    return Injected(rec.path, rec.offset, "torn last record")


def zero_page(root, rec: RecordRef | None = None, *, length: int = 4096) -> Injected:
    """A zeroed page inside a file: `length` zero bytes starting at the start of a middle record.
    The first record a reader finds bad is `rec` itself."""
    rec = rec or pick_record(root)
    with open(rec.path, "r+b") as f:
        f.seek(rec.pos)
        f.write(b"\0" * length)
    return Injected(rec.path, rec.offset, f"{length} zero bytes")


def stale_record_after_end(root, *, gap: int = 0) -> Injected:
    """F04: copy an earlier valid record (CRC intact, PHYSICALOFFSET of its old place) to `gap` bytes
    after the last record of the last file, as left by a truncation that did not zero the tail."""
    recs = commitlog_records(root)
    last = recs[-1]
    src = next(r for r in recs if r.path == last.path and r is not last) if any(
        r.path == last.path for r in recs[:-1]) else recs[0]
    with open(src.path, "rb") as f:
        f.seek(src.pos)
        raw = f.read(src.size)
    pos = last.pos + last.size + gap
    with open(last.path, "r+b") as f:
        f.seek(pos)
        f.write(raw)
    return Injected(last.path, last.file_start + pos, "stale valid-looking record after the end")


def remove_middle_commitlog(root) -> Injected:
    """F08 / R30: delete a middle commitlog file. offset = its start offset (the gap begins there)."""
    files = commitlog_files(root)
    if len(files) < 3:
        raise ValueError("need at least 3 commitlog files")
    victim = files[len(files) // 2]
    victim.unlink()
    return Injected(victim, int(victim.name), "missing middle commitlog file")


def zero_length_last_file(root, *, file_size: int | None = None) -> Injected:
    """F06 / R6: a new last commitlog file of 0 bytes (created, never sized)."""
    files = commitlog_files(root)
    fs = _file_size(root, file_size)
    p = files[-1].with_name(f"{int(files[-1].name) + fs:020d}")
    p.touch()
    return Injected(p, int(p.name), "zero-length last file")


# -- consume queue faults ---------------------------------------------------------------------------
def _cq_files(root, topic, qid) -> list[Path]:
    """The queue's files: consumequeue/, else batchconsumequeue/ (a 5.x BatchCQ topic, 46-byte units)."""
    d = Path(root) / "consumequeue" / topic / str(qid)
    if not d.is_dir() and (Path(root) / "batchconsumequeue" / topic / str(qid)).is_dir():
        d = Path(root) / "batchconsumequeue" / topic / str(qid)
    return sorted(p for p in d.iterdir() if p.name.isdigit())


def _unit_size(path: Path) -> int:
    return 46 if "batchconsumequeue" in Path(path).parts else 20


def _busiest_queue(root) -> tuple[str, int]:
    from collections import Counter

    c = Counter((r.topic, r.queue_id) for r in commitlog_records(root))
    return c.most_common(1)[0][0]


def _valid_units(path: Path):
    data = path.read_bytes()
    out = []
    us = _unit_size(path)
    for i in range(len(data) // us):
        phys, size, tags = struct.unpack_from(">qiq", data, i * us)
        base, n = struct.unpack_from(">qh", data, i * us + 28) if us == 46 else (0, 1)
        if phys >= 0 and size > 0 and base >= 0 and n > 0:
            out.append((i, phys, size, tags))
        else:
            break
    return out


def cq_unit_wrong_offset(root, topic: str | None = None, qid: int | None = None, *, delta: int = 1) -> Injected:
    """F11: the middle valid unit of a queue points `delta` bytes away from its message."""
    if topic is None:
        topic, qid = _busiest_queue(root)
    for p in _cq_files(root, topic, qid):
        units = _valid_units(p)
        if units and not (units[0][2] == 0x7FFFFFFF):
            i, phys, size, tags = units[len(units) // 2]
            at = i * _unit_size(p)
            with open(p, "r+b") as f:
                f.seek(at)
                f.write(struct.pack(">q", phys + delta))
            return Injected(p, at, "CQ unit pointing at the wrong offset")
    raise ValueError("no consume queue unit found")


def cq_ahead(root, topic: str | None = None, qid: int | None = None, *, count: int = 2) -> Injected:
    """F09: append `count` units after a queue's last unit pointing past the commitlog's end."""
    if topic is None:
        topic, qid = _busiest_queue(root)
    last = _cq_files(root, topic, qid)[-1]
    units = _valid_units(last)
    _, phys, size, tags = units[-1]
    end = max(r.offset + r.size for r in commitlog_records(root))
    us = _unit_size(last)
    pos = len(units) * us
    with open(last, "r+b") as f:
        if us == 46:     # batch unit: store time, msgBaseOffset, batchSize continue the last unit
            f.seek(pos - 26)
            ts, base, n = struct.unpack(">qqh", f.read(18))
        f.seek(pos)
        for k in range(count):
            f.write(struct.pack(">qiq", end + k * size, size, tags) if us == 20 else
                    struct.pack(">qiqqqhii", end + k * size, size, tags, ts, base + n * (k + 1), n, -1, 0))
    return Injected(last, pos, "CQ units beyond the commitlog end")


def cq_behind(root, topic: str | None = None, qid: int | None = None, *, count: int = 2) -> Injected:
    """F10: zero the last `count` units of a queue (messages in the commitlog, not dispatched).
    offset = byte position of the first zeroed unit in its CQ file."""
    if topic is None:
        topic, qid = _busiest_queue(root)
    files = _cq_files(root, topic, qid)
    last = files[-1]
    units = _valid_units(last)
    if len(units) < count:
        raise ValueError("queue too short")
    us = _unit_size(last)
    pos = (len(units) - count) * us
    with open(last, "r+b") as f:
        f.seek(pos)
        f.write(b"\0" * (count * us))
    return Injected(last, pos, "CQ behind the commitlog")


# -- index, checkpoint, config, lock ------------------------------------------------------------------
def index_chain_cycle(root, *, hash_slot_num: int | None = None) -> Injected:
    """F14: make an older item of a chain point back at the chain's head (a prevIndex cycle).
    offset = byte position of the modified item. Needs a slot with a chain of >= 2 items; when there
    is none, item 1 is made to point at the newest item instead (pre > own number)."""
    idx = sorted(p for p in (Path(root) / "index").iterdir() if p.name.isdigit())[0]
    data = idx.read_bytes()
    count = struct.unpack_from(">i", data, 36)[0]
    if hash_slot_num is None:
        hash_slot_num = (len(data) - 40) // 84  # the broker's default ratio maxIndexNum = 4 * maxHashSlotNum
    items = 40 + 4 * hash_slot_num
    target = None
    for n in range(count - 1, 1, -1):
        pre = struct.unpack_from(">i", data, items + 20 * n + 16)[0]
        if pre > 0:
            target = (pre, n)   # item `pre` will point forward to n, and n points at pre: a cycle
            break
    if target is None:
        target = (1, count - 1)
    victim, head = target
    pos = items + 20 * victim + 16
    with open(idx, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">i", head))
    return Injected(idx, items + 20 * victim, "index prevIndex cycle")


def checkpoint_garbage(root, *, seed: int = 1) -> Injected:
    """F13: overwrite the checkpoint's 40 bytes of fields with garbage (negative / far-future values)."""
    import random

    rnd = random.Random(seed)
    p = Path(root) / "checkpoint"
    garbage = bytes([0xFF, 0x7F]) + bytes(rnd.randrange(256) for _ in range(38))
    with open(p, "r+b") as f:
        f.write(garbage)
    return Injected(p, 0, "checkpoint garbage")


def truncate_config(root, name: str = "consumerOffset.json", *, with_bak: bool = True) -> Injected:
    """F15/F16 (R4): truncate config/<name> to 0 bytes. with_bak=True makes sure an intact .bak holds
    the previous content; with_bak=False removes the .bak (the broker would start with EMPTY tables)."""
    p = Path(root) / "config" / name
    bak = p.with_name(p.name + ".bak")
    if with_bak and not bak.exists():
        shutil.copyfile(p, bak)
    if not with_bak and bak.exists():
        bak.unlink()
    p.write_bytes(b"")
    return Injected(p, 0, f"{name} truncated to 0 bytes" + (" (.bak intact)" if with_bak else " (no .bak)"))


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
time.sleep(600)
"""


@contextmanager
def hold_lock(root):
    """F18: a separate live process holds the broker's lock (fcntl on byte 0 of store/lock), like
    a running broker. Yields the lock path; the process is killed on exit."""
    path = Path(root) / "lock"
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if line.strip() != "locked":
            raise RuntimeError("lock holder failed to start")
        yield path
    finally:
        proc.kill()
        proc.wait()


# -- a synthetic store (spec layout) ---------------------------------------------------------------
def _jhash(s: str) -> int:
    h = 0
    b = s.encode("utf-16-be", errors="surrogatepass")
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def crc_zero_body(prefix: bytes) -> bytes:
    """prefix + 4 bytes chosen so that zlib.crc32(body) & 0x7FFFFFFF == 0 (F05 / R16: a valid
    message whose CRC really is 0). CRC32 is affine in the appended bits: solve over GF(2)."""
    base = zlib.crc32(prefix + b"\0\0\0\0")
    cols = []
    for i in range(32):
        x = (1 << i).to_bytes(4, "big")
        cols.append(zlib.crc32(prefix + x) ^ base)
    # solve sum(bit_i * cols[i]) == base (so that crc == 0), Gaussian elimination on 32x32
    rows = [(cols[i], 1 << i) for i in range(32)]
    basis: list[tuple[int, int]] = []
    for v, m in rows:
        for bv, bm in basis:
            if v ^ bv < v:
                v, m = v ^ bv, m ^ bm
        if v:
            basis.append((v, m))
            basis.sort(reverse=True)
    target, sol = base, 0
    for bv, bm in basis:
        if target ^ bv < target:
            target, sol = target ^ bv, sol ^ bm
    if target:
        raise ValueError("no solution")
    body = prefix + sol.to_bytes(4, "big")
    assert zlib.crc32(body) & 0x7FFFFFFF == 0
    return body


def _props(d: dict) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in d.items()).encode()


def _record(*, topic: str, qid: int, qoff: int, phys: int, body: bytes, props: bytes, born_ts: int,
            store_ts: int, sys_flag: int = 0, prop_crc: bool = False) -> bytes:
    born = (b"\x20\x01\x0d\xb8" + b"\0" * 11 + b"\x01") if sys_flag & 0x10 else b"\xc0\xa8\x01\x0a"
    store = b"\xc0\xa8\x01\x14"
    tb = topic.encode()
    if prop_crc:
        props = props + b"\0" * 20
    total = (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + 4 + 8 + len(store) + 4 + 4 + 8
             + 4 + len(body) + 1 + len(tb) + 2 + len(props))
    rec = bytearray()
    rec += struct.pack(">iiiiiqqiq", total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, qid, 0, qoff, phys,
                       sys_flag, born_ts)
    rec += born + struct.pack(">i", 54321) + struct.pack(">q", store_ts) + store + struct.pack(">i", 10911)
    rec += struct.pack(">iqi", 0, 0, len(body)) + body + struct.pack(">b", len(tb)) + tb
    rec += struct.pack(">h", len(props)) + props
    if prop_crc:
        crc = zlib.crc32(bytes(rec[:total - 20])) & 0x7FFFFFFF
        digits = ""
        for _ in range(10):
            digits += chr(48 + crc % 10) if crc > 0 else "0"
            crc //= 10
        rec[total - 20:] = b"__CRC32#\x01" + digits.encode() + b"\x02"
    assert len(rec) == total
    return bytes(rec)


def make_store(root, *, messages: int = 400, file_size: int = 32 * 1024, cq_units: int = 64,
               hash_slots: int = 512, index_num: int = 2048, prop_crc_every: int = 7, abort: bool = False,
               t0: int = 1_700_000_000_000, queues: int = 2) -> Path:
    """A clean, self-consistent synthetic store: several commitlog files ending in BLANK records, two
    topics x 2 queues, one SCHEDULE_TOPIC_XXXX delay message, one PREPARED transaction message (in no
    CQ), an IPv6 born host, a message whose body CRC is really 0, __CRC32# tails on every
    `prop_crc_every`-th message, consume queues with several files, one index file, a checkpoint
    and config/*.json (+ .bak). Store config: mappedFileSizeCommitLog=file_size,
    mappedFileSizeConsumeQueue=cq_units*20, maxHashSlotNum=hash_slots, maxIndexNum=index_num. `queues`: queues
    per topic (many queues with few records each: verify's per-queue bookkeeping per batch)."""
    root = Path(root)
    for d in ("commitlog", "consumequeue", "index", "config"):
        (root / d).mkdir(parents=True, exist_ok=True)
    delay_ms = [1000, 5000, 10000, 30000]
    files: list[bytearray] = [bytearray(file_size)]
    pos, phys_base = 0, 0
    qoffs: dict[tuple, int] = {}
    cq: dict[tuple, list] = {}
    index_items: list[tuple] = []   # (key_hash, phys, store_ts)
    last_ts = t0
    for i in range(messages):
        topic, qid = (("TopicA", i % queues) if i % 3 else ("TopicB", i % queues))
        sys_flag, extra = 0, {}
        if i == 5:
            topic, qid, extra = "SCHEDULE_TOPIC_XXXX", 2, {"DELAY": "3", "REAL_TOPIC": "TopicA", "REAL_QID": "0"}
        if i == 9:
            sys_flag = 0x4   # PREPARED: no consume queue, indexed
        if i == 11:
            sys_flag = 0x10  # IPv6 born host
        body = crc_zero_body(b"crc-zero-") if i == 13 else (f"body-{i}-".encode() * (1 + i % 5))
        store_ts = t0 + i * 1500
        props = {"UNIQ_KEY": f"C0A8010A30391B6D3586{i:012X}", "TAGS": f"Tag{i % 4}", "KEYS": f"k{i} o{i % 10}",
                 **extra}
        key = (topic, qid)
        qoff = 0 if sys_flag & 0xC == 0x4 else qoffs.get(key, 0)
        rec = _record(topic=topic, qid=qid, qoff=qoff, phys=phys_base + pos, body=body, props=_props(props),
                      born_ts=store_ts - 3, store_ts=store_ts, sys_flag=sys_flag,
                      prop_crc=prop_crc_every > 0 and i % prop_crc_every == 0)
        if len(rec) + 8 > file_size - pos:
            files[-1][pos:pos + 8] = struct.pack(">ii", file_size - pos, -875286124)
            files.append(bytearray(file_size))
            phys_base += file_size
            pos = 0
            rec = _record(topic=topic, qid=qid, qoff=qoff, phys=phys_base, body=body, props=_props(props),
                          born_ts=store_ts - 3, store_ts=store_ts, sys_flag=sys_flag,
                          prop_crc=prop_crc_every > 0 and i % prop_crc_every == 0)
        files[-1][pos:pos + len(rec)] = rec
        phys = phys_base + pos
        pos += len(rec)
        last_ts = store_ts
        if sys_flag & 0xC != 0x4:
            qoffs[key] = qoff + 1
            if topic == "SCHEDULE_TOPIC_XXXX":
                tags = store_ts + delay_ms[2]
            else:
                tags = _jhash(props["TAGS"])
            cq.setdefault(key, []).append((phys, len(rec), tags))
        for k in [props["UNIQ_KEY"], *props["KEYS"].split(" ")]:
            h = abs(_jhash(f"{topic}#{k}"))
            index_items.append((0 if h >= 1 << 31 else h, phys, store_ts))
    for n, buf in enumerate(files):
        (root / "commitlog" / f"{n * file_size:020d}").write_bytes(bytes(buf))
    cq_size = cq_units * 20
    for (topic, qid), units in cq.items():
        d = root / "consumequeue" / topic / str(qid)
        d.mkdir(parents=True, exist_ok=True)
        raw = b"".join(struct.pack(">qiq", *u) for u in units)
        for start in range(0, max(len(raw), 1), cq_size):
            (d / f"{start:020d}").write_bytes(raw[start:start + cq_size].ljust(cq_size, b"\0"))
    # index: one file, put algorithm of §4.5 (first file: beginTimestamp 0 for the first item)
    slots = [0] * hash_slots
    items = [b"\0" * 20]
    begin_ts, begin_phy, count, slot_count = 0, 0, 1, 0
    for kh, phys, ts in index_items[:index_num - 1]:
        s = kh % hash_slots
        sv = slots[s] if 0 < slots[s] <= count else 0
        td = 0 if begin_ts <= 0 else max(0, min((ts - begin_ts) // 1000, 2**31 - 1))
        items.append(struct.pack(">iqii", kh, phys, td, sv))
        slots[s] = count
        if count <= 1:
            begin_phy, begin_ts = phys, ts
        if sv == 0:
            slot_count += 1
        count += 1
        end_phy, end_ts = phys, ts
    idx = bytearray(40 + 4 * hash_slots + 20 * index_num)
    idx[0:40] = struct.pack(">qqqqii", begin_ts, end_ts, begin_phy, end_phy, slot_count, count)
    idx[40:40 + 4 * hash_slots] = b"".join(struct.pack(">i", v) for v in slots)
    ipos = 40 + 4 * hash_slots
    idx[ipos:ipos + 20 * len(items)] = b"".join(items)
    (root / "index" / time.strftime("%Y%m%d%H%M%S000", time.localtime(t0 / 1000))).write_bytes(bytes(idx))
    # checkpoint: everything flushed and dispatched up to the last message
    last_rec_start = phys_base + pos - len(rec)
    ck = struct.pack(">qqqqq", last_ts, last_ts, 0, 0, last_rec_start).ljust(4096, b"\0")
    (root / "checkpoint").write_bytes(ck)
    (root / "lock").write_bytes(b"lock")
    if abort:
        (root / "abort").write_bytes(b"")
    _write_configs(root, qoffs)
    return root


def _write_configs(root: Path, qoffs: dict) -> None:
    cfg = root / "config"
    topics = {t: {"attributes": {}, "order": False, "perm": 6, "readQueueNums": 2, "topicFilterType": "SINGLE_TAG",
                  "topicName": t, "topicSysFlag": 0, "writeQueueNums": 2} for t in ("TopicA", "TopicB")}
    dv = {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000}
    (cfg / "topics.json").write_text(json.dumps({"dataVersion": dv, "topicConfigTable": topics}, indent="\t"))
    groups = {"GroupA": {"groupName": "GroupA", "consumeEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1}}
    (cfg / "subscriptionGroup.json").write_text(json.dumps({"dataVersion": dv, "subscriptionGroupTable": groups},
                                                           indent="\t"))
    # committed offsets: GroupA consumed half of each queue; numeric keys unquoted like fastjson
    body = ",\n".join(
        f'\t\t"{t}@GroupA":{{' + ",".join(f"{q}:{qoffs.get((t, q), 0) // 2}" for q in (0, 1)) + "\n\t\t}"
        for t in ("TopicA", "TopicB"))
    text = ('{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},'
            f'\n\t"offsetTable":{{\n{body}\n\t}}\n}}')
    (cfg / "consumerOffset.json").write_text(text)
    (cfg / "consumerOffset.json.bak").write_text(text)
    (cfg / "delayOffset.json").write_text('{\n\t"offsetTable":{3:1\n\t}\n}')
