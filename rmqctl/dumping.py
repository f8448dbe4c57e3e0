"""Dump: every store file kind as a stream of plain dicts (one per record/unit), then a trailer
that accounts for every byte after the valid prefix. The CLI renders these as text or JSON Lines.

Each generator yields dicts with a "kind" key; the last one has kind "trailer" (valid bytes, what
follows them) and, when the file is damaged, a "problem" (the first bad offset and why).
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

from rmqctl.errors import FormatError, UsageError
from rmqctl.formats import batch_consumequeue as bcqf, checkpoint as ckf, consumequeue as cqf
from rmqctl.formats import consumequeue_ext as extf, index as ixf, timer as tf
from rmqctl.formats._derive import field_names, struct_format
from rmqctl.scan import FileWalk, NORMAL_STOPS, is_zero, last_nonzero
from rmqctl.store.commitlog import open_ro
from rmqctl.store.files import read_bytes

KIND_NAMES = ("commitlog", "consumequeue", "consumequeue_ext", "batchconsumequeue", "index", "checkpoint",
              "abort", "lock", "timerlog", "timerwheel", "timercheck", "compaction_log", "compaction_cq",
              "config", "dledger_data", "dledger_index", "dledger_checkpoint")


def _codec(decl):
    return struct.Struct(struct_format(decl)), field_names(decl)


CQ_UNIT, CQ_FIELDS = _codec(cqf.ConsumeQueueUnit)
BCQ_UNIT, BCQ_FIELDS = _codec(bcqf.BatchConsumeQueueUnit)
EXT_HEAD, EXT_FIELDS = _codec(extf.CqExtUnitHead)
CHECKPOINT, CHECKPOINT_FIELDS = _codec(ckf.Checkpoint)
TIMERLOG_UNIT, TIMERLOG_FIELDS = _codec(tf.TimerLogUnit)
WHEEL_SLOT, WHEEL_FIELDS = _codec(tf.TimerWheelSlot)
TIMERCHECK, TIMERCHECK_FIELDS = _codec(tf.TimerCheckpoint)
READ_BATCH = 1 << 20


def start_offset_of(path: Path) -> int:
    name = path.name
    return int(name) if name.isdigit() else 0


def _tail(fd, valid_end: int, size: int) -> dict:
    """Describe the bytes after the valid prefix: all zero (normal padding) or not."""
    if valid_end >= size:
        return {"valid_bytes": size, "trailing_bytes": 0, "trailing": "none"}
    if is_zero(fd, valid_end, size):
        return {"valid_bytes": valid_end, "trailing_bytes": size - valid_end, "trailing": "zeros"}
    last = last_nonzero(fd, valid_end, size)
    return {"valid_bytes": valid_end, "trailing_bytes": size - valid_end, "trailing": "invalid",
            "invalid_from": valid_end, "invalid_to": last}


def trailer_text(t: dict, path) -> str:
    """One line accounting for the bytes after the records (every "trailing" value a dumper yields)."""
    from rmqctl.terminal import escape

    p, kind, valid, n = escape(path), t["trailing"], t["valid_bytes"], t.get("trailing_bytes", 0)
    if kind == "none":
        return f"# {p}: {valid} valid bytes, nothing after"
    if kind == "zeros":
        return f"# {p}: {n} zero bytes after the last record at offset {valid}"
    if kind == "blank":
        return f"# {p}: BLANK record (end of file) at offset {valid}, {n} bytes to the end of the file"
    if kind == "end_filler":
        return f"# {p}: end-of-file filler at offset {valid}, {n} bytes to the end of the file"
    if "invalid_from" in t:
        return (f"# {p}: {t['invalid_to'] - t['invalid_from']} invalid bytes at offset {t['invalid_from']}"
                f" (then zeros to {valid + n})")
    return f"# {p}: {n} bytes after offset {valid}, not all zero"


# --- commitlog / compaction log -------------------------------------------------------------------------
def commitlog_file(path: Path, *, file_start: int | None = None, skip: int = 0, count: int | None = None,
                   topic: str | None = None, queue: int | None = None, check_crc: bool = True,
                   from_offset: int | None = None):
    """Records of one commitlog file (yields ("message", Record) pairs), then a trailer dict."""
    path = Path(path)
    file_start = start_offset_of(path) if file_start is None else file_start
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError("empty file (0 bytes): a commitlog file is pre-allocated to its full size",
                              path=path, offset=0)
        start = 0 if from_offset is None else max(0, from_offset - file_start)
        w = FileWalk(fd, file_start, size, start, check_crc=check_crc, check_phys=True, path=str(path))
        if (yield from _messages(w, topic, queue, skip, count, [0, 0])):
            return
        yield "trailer", commitlog_trailer(fd, path, file_start, size, w.stop)


def _messages(records, topic, queue, skip: int, count, counts: list):
    """("message", Record) for the records a dump shows: --topic/--queue, then skip/count; counts = [seen,
    shown] carries on across calls. Returns True once `count` records were shown (nothing more to print)."""
    for r in records:
        if topic is not None and r.topic != topic:
            continue
        if queue is not None and r.queue_id != queue:
            continue
        counts[0] += 1
        if counts[0] <= skip:
            continue
        if count is not None and counts[1] >= count:
            return True
        counts[1] += 1
        yield "message", r
    return False


JSON_RECORD_HEAD = 4 << 20


def commitlog_json(path: Path, *, body: str = "base64", raw_body: bool = False, skip: int = 0,
                   count: int | None = None, topic: str | None = None, queue: int | None = None,
                   check_crc: bool = True, from_offset: int | None = None, file_start: int | None = None,
                   window: int | None = None, stats: dict | None = None, record_head: int | None = None):
    """commitlog_file for --json: the same items, except that after the first `record_head` bytes of records
    (default 4 MiB, none once numpy is loaded: a small file never pays for loading it) the records of each
    window come as one ("lines", bytes) item from rmqctl.dump_json_batch: the bytes message_json gives them
    (possibly a memoryview valid until the next item)."""
    import sys

    path = Path(path)
    file_start = start_offset_of(path) if file_start is None else file_start
    if record_head is None:
        record_head = 0 if "numpy" in sys.modules else JSON_RECORD_HEAD
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError("empty file (0 bytes): a commitlog file is pre-allocated to its full size",
                              path=path, offset=0)
        start = 0 if from_offset is None else max(0, from_offset - file_start)
        at, counts = [start], [0, 0]
        if record_head > 0:
            w = FileWalk(fd, file_start, size, start, check_crc=check_crc, check_phys=True, path=str(path))

            def head():     # the records starting in the first record_head bytes; `at` gets where the rest begin
                for r in w:
                    if r.offset - file_start - start >= record_head:
                        at.append(r.offset - file_start)
                        return
                    yield r

            if (yield from _messages(head(), topic, queue, skip, count, counts)):
                return
            if len(at) == 1:        # the walk ended inside the head
                yield "trailer", commitlog_trailer(fd, path, file_start, size, w.stop)
                return
        from rmqctl.dump_json_batch import lines

        stop = yield from lines(fd, path, file_start, size, at[-1], seen=counts[0], shown=counts[1], skip=skip,
                                count=count, topic=topic, queue=queue, body=body, raw_body=raw_body,
                                check_crc=check_crc, window=window, stats=stats)
        if stop is not None:
            yield "trailer", commitlog_trailer(fd, path, file_start, size, stop)


def commitlog_trailer(fd, path: Path, file_start: int, size: int, stop) -> dict:
    """The trailer of a commitlog file whose walk ended at `stop` (a scan.Stop)."""
    valid_end = stop.pos
    t = {"kind": "trailer", "file": str(path), "records_end": stop.offset, "stop": stop.kind}
    if stop.kind == "blank":
        t.update(valid_bytes=stop.pos, blank_size=stop.size, trailing="blank",
                 trailing_bytes=size - stop.pos)
        if stop.size != size - stop.pos:
            t["note"] = f"BLANK record says {stop.size} bytes but {size - stop.pos} remain in the file"
    else:
        t.update(_tail(fd, valid_end, size))
        if stop.kind not in NORMAL_STOPS:
            t["problem"] = {"offset": stop.offset, "check": stop.kind, "detail": stop.detail,
                            "field": _field_of(stop.kind)}
        elif t["trailing"] == "invalid":
            t["problem"] = {"offset": file_start + t["invalid_from"], "check": "garbage_after_end",
                            "detail": "non-zero bytes after the end of the records", "field": "TOTALSIZE"}
    return t


def _field_of(kind: str) -> str:
    return {"bad_magic": "MAGICCODE", "bad_size": "TOTALSIZE", "short": "TOTALSIZE",
            "length_mismatch": "TOTALSIZE", "bad_length": "BODYLENGTH/TOPICLENGTH/PROPERTIESLENGTH",
            "bad_body_crc": "BODYCRC", "bad_prop_crc": "PROPERTIES.__CRC32#",
            "bad_physical_offset": "PHYSICALOFFSET", "bad_delay": "PROPERTIES.DELAY"}.get(kind, "")


# --- fixed-size units ------------------------------------------------------------------------------------
def _units(path: Path, codec, fields, unit_kind: str, valid, *, skip=0, count=None, file_start=None,
           extra=None):
    """Units of a fixed-size-unit file: valid prefix per the broker's recover rule, then a trailer."""
    path = Path(path)
    usize = codec.size
    file_start = start_offset_of(path) if file_start is None else file_start
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError("empty file (0 bytes): queue files are pre-allocated to their full size",
                              path=path, offset=0)
        n_units = size // usize
        i, shown, end_unit = skip, 0, None
        while i < n_units and end_unit is None:
            data = os.pread(fd, min(READ_BATCH // usize, n_units - i) * usize, i * usize)
            if not data:
                break
            for j, vals in enumerate(codec.iter_unpack(data[:len(data) // usize * usize])):
                if not valid(vals):
                    end_unit = i + j
                    break
                if count is not None and shown >= count:
                    return
                d = {"kind": unit_kind, "unit": i + j, "logical_offset": (file_start + (i + j) * usize) // usize}
                d.update(zip(fields, vals))
                if extra:
                    extra(d)
                shown += 1
                yield d
            else:
                i += len(data) // usize
                continue
        if end_unit is None:
            end_unit = n_units
        valid_end = end_unit * usize
        t = {"kind": "trailer", "file": str(path), "units": end_unit, **_tail(fd, valid_end, size)}
        if size % usize:
            t["note"] = f"file size {size} is not a multiple of the {usize}-byte unit"
        if t["trailing"] == "invalid":
            t["problem"] = {"offset": t["invalid_from"], "check": "invalid_unit",
                            "detail": "non-zero bytes after the last valid unit", "field": fields[0]}
        yield t


def _cq_extra(d):
    if d["physical_offset"] == 0 and d["size"] == cqf.PRE_BLANK_SIZE and d["tags_code"] == 0:
        d["pre_blank"] = True
    elif extf.is_ext_addr(d["tags_code"]):
        d["ext_address"] = extf.ext_addr_to_offset(d["tags_code"])


def consumequeue_file(path, **kw):
    return _units(path, CQ_UNIT, CQ_FIELDS, "cq_unit", lambda v: v[0] >= 0 and v[1] > 0, extra=_cq_extra, **kw)


def batch_consumequeue_file(path, **kw):
    return _units(path, BCQ_UNIT, BCQ_FIELDS, "bcq_unit",
                  lambda v: v[0] >= 0 and v[1] > 0 and v[4] >= 0 and v[5] > 0, **kw)


def compaction_cq_file(path, **kw):
    """compaction/compactionCq/<topic>/<qid>/<name>: SparseConsumeQueue units. The file is named after its log
    file (a log offset), so a unit's queue offset is its msg_base_offset, never derived from the name. A file
    the dispatcher closed ends with an end unit (-1, 0, 0, 0, 0, 0, -1, 0), reported in the trailer."""
    from rmqctl.store.compaction import END_UNIT

    path = Path(path)

    def extra(d):
        d["logical_offset"] = d["msg_base_offset"]

    for d in _units(path, BCQ_UNIT, BCQ_FIELDS, "compaction_cq_unit",
                    lambda v: v[0] >= 0 and v[1] > 0 and v[4] >= 0 and v[5] > 0, extra=extra, **kw):
        if d.get("kind") == "trailer" and d.get("trailing") == "invalid":
            at, size = d["valid_bytes"], d["valid_bytes"] + d["trailing_bytes"]
            with open_ro(path) as fd:
                head = os.pread(fd, len(END_UNIT), at)
                rest_zero = is_zero(fd, at + len(END_UNIT), size)
            if head == END_UNIT and rest_zero:
                for k in ("problem", "invalid_from", "invalid_to"):
                    d.pop(k, None)
                d["trailing"] = "end_filler"
                d["end_unit_at"] = at
        yield d


def timerlog_file(path, *, skip=0, count=None, file_start=None, **_):
    """TimerLog units in write order. A unit's `position` is its timerlog offset (what wheel slots and prev_pos
    hold). A file ends early where TimerLog.append put a BLANK (size = bytes to the end, magic BLANK_MAGIC_CODE)
    because the next unit + a 16-byte blank would not fit: that is a trailer, not a unit."""
    path = Path(path)
    usize = TIMERLOG_UNIT.size
    file_start = start_offset_of(path) if file_start is None else file_start
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError("empty file (0 bytes): timerlog files are pre-allocated to their full size",
                              path=path, offset=0)
        pos, i, shown, blank = 0, 0, 0, None
        while pos + tf.TIMERLOG_MIN_BLANK <= size and blank is None:
            data = os.pread(fd, min(READ_BATCH // usize * usize, size - pos), pos)
            off = 0
            while off + tf.TIMERLOG_MIN_BLANK <= len(data):
                head_size, _prev, magic = struct.unpack_from(">iqi", data, off)
                if magic == tf.TIMERLOG_BLANK_MAGIC and head_size == size - (pos + off):
                    blank = (pos + off, head_size)
                    break
                if head_size != usize or off + usize > len(data):
                    break
                if i >= skip:
                    if count is not None and shown >= count:
                        return
                    shown += 1
                    d = {"kind": "timerlog_unit", "unit": i, "position": file_start + pos + off}
                    d.update(zip(TIMERLOG_FIELDS, TIMERLOG_UNIT.unpack_from(data, off)))
                    yield d
                i += 1
                off += usize
            if blank is None and off == 0:
                break
            pos += off
        t = {"kind": "trailer", "file": str(path), "units": i}
        if blank is not None:
            t.update(valid_bytes=blank[0], blank_size=blank[1], trailing="blank", trailing_bytes=size - blank[0])
        else:
            t.update(_tail(fd, pos, size))
            if t["trailing"] == "invalid":
                t["problem"] = {"offset": t["invalid_from"], "check": "invalid_unit",
                                "detail": "non-zero bytes after the last valid unit", "field": "size"}
        yield t


def consumequeue_ext_file(path, *, skip=0, count=None, **_):
    path = Path(path)
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        pos, n, shown = 0, 0, 0
        while pos + EXT_HEAD.size <= size:
            head = os.pread(fd, EXT_HEAD.size, pos)
            vals = EXT_HEAD.unpack(head)
            usize, bitmap = vals[0], vals[3]
            if usize <= 0 or bitmap < 0 or usize != extf.MIN_EXT_UNIT_SIZE + bitmap or pos + usize > size:
                break
            if n >= skip and (count is None or shown < count):
                d = {"kind": "cq_ext_unit", "position": pos, **dict(zip(EXT_FIELDS, vals)),
                     "filter_bit_map": os.pread(fd, bitmap, pos + EXT_HEAD.size).hex()}
                shown += 1
                yield d
            n += 1
            pos += usize
        t = {"kind": "trailer", "file": str(path), "units": n}
        if pos + 2 <= size and os.pread(fd, 2, pos) == b"\xff\xff":
            t.update(valid_bytes=pos, trailing="end_filler", trailing_bytes=size - pos)
        else:
            t.update(_tail(fd, pos, size))
            if t["trailing"] == "invalid":
                t["problem"] = {"offset": pos, "check": "invalid_unit", "detail": "bad ext unit header",
                                "field": "size"}
        yield t


# --- index -----------------------------------------------------------------------------------------------
def index_file(path, hash_slot_num: int, index_num: int, *, skip=0, count=None, slots=False, **_):
    from rmqctl.store.index import IndexFile

    path = Path(path)
    ix = IndexFile(path, hash_slot_num, index_num)
    if ix.size < ixf.HEADER_SIZE:
        raise FormatError(f"{ix.size} bytes: shorter than the 40-byte index header", path=path,
                          offset=ix.size, field="header")
    with ix:
        h = ix.header()
        hd = {"kind": "index_header", **h.__dict__, "file_size": ix.size,
              "expected_size": ix.expected_size, "hash_slot_num": hash_slot_num, "index_num": index_num}
        yield hd
        if ix.size > ix.expected_size or h.index_count > index_num or h.index_count < 0:
            raise FormatError(
                f"index_count {h.index_count} / size {ix.size} do not fit {hash_slot_num} slots and "
                f"{index_num} items (give --index-slots/--index-items or --broker-config)",
                path=path, offset=36, field="index_count")
        if slots:
            s = 0
            while s < hash_slot_num:
                k = min(READ_BATCH // 4, hash_slot_num - s)
                data = os.pread(ix._fd, 4 * k, ixf.HEADER_SIZE + 4 * s)
                for j, (v,) in enumerate(struct.iter_unpack(">i", data)):
                    if v:
                        yield {"kind": "index_slot", "slot": s + j, "item": v}
                s += k
        shown = 0
        for n, key_hash, phy, tdiff, pre in ix.items(max(1, skip + 1), max(1, h.index_count)):
            if count is not None and shown >= count:
                break
            shown += 1
            yield {"kind": "index_item", "item": n, "key_hash": key_hash, "phy_offset": phy, "time_diff": tdiff,
                   "pre_index_no": pre, "slot": key_hash % hash_slot_num}
        used_end = ix.item_pos(max(1, h.index_count))
        t = {"kind": "trailer", "file": str(path), "items": max(0, h.index_count - 1)}
        if ix.size < ix.expected_size:
            t["note"] = f"file is {ix.expected_size - ix.size} bytes short (the broker zero-extends it)"
        t.update(_tail(ix._fd, min(used_end, ix.size), ix.size))
        if t["trailing"] == "invalid":
            t["problem"] = {"offset": t["invalid_from"], "check": "items_after_index_count",
                            "detail": "non-zero bytes after the last item (index_count too small?)",
                            "field": "index_count"}
        yield t


# --- small files -----------------------------------------------------------------------------------------
def checkpoint_file(path, **_):
    path = Path(path)
    with open_ro(path) as fd:
        data = os.pread(fd, 8192, 0)
    if not data:
        raise FormatError("empty file (0 bytes): a checkpoint is 4096 bytes", path=path, offset=0)
    d = {"kind": "checkpoint", "file_size": len(data)}
    vals = CHECKPOINT.unpack(data[:CHECKPOINT.size].ljust(CHECKPOINT.size, b"\0"))
    d.update(zip(CHECKPOINT_FIELDS, vals))
    # the file looks the same for every version: only non-zero later fields tell a newer writer
    used = 40 if vals[4] else 32 if vals[3] else 24
    d["generation"] = {24: "24-byte layout in use (later fields zero: any version; 5.x leaves them zero too)",
                       32: "32-byte layout in use (masterFlushedOffset set: RocketMQ 5.0.0+)",
                       40: "40-byte layout in use (confirmPhyOffset set: RocketMQ 5.1.1+)"}[used]
    d["min_timestamp"] = ckf.min_timestamp(vals[0], vals[1])
    d["min_timestamp_index"] = ckf.min_timestamp_index(vals[0], vals[1], vals[2])
    yield d
    t = {"kind": "trailer", "file": str(path), "valid_bytes": min(len(data), 40)}
    rest = data[40:]
    t["trailing"] = "zeros" if rest.count(0) == len(rest) else "invalid"
    t["trailing_bytes"] = max(0, len(data) - 40)
    if len(data) != ckf.FILE_SIZE:
        t["note"] = f"checkpoint is {len(data)} bytes; the broker maps 4096"
        if len(data) < 24:
            t["problem"] = {"offset": len(data), "check": "short_checkpoint",
                            "detail": f"{len(data)} bytes, the broker reads 24", "field": "physic_msg_timestamp"}
    if t["trailing"] == "invalid":
        first = next(i for i, b in enumerate(rest) if b)
        t["invalid_from"], t["invalid_to"] = 40 + first, 40 + len(rest.rstrip(b"\0"))
        t["problem"] = {"offset": 40 + first, "check": "garbage_after_fields",
                        "detail": "non-zero bytes after the last checkpoint field", "field": ""}
    yield t


def abort_file(path, **_):
    path = Path(path)
    data = read_bytes(path, limit=4096)
    text = data.decode("utf-8", errors="replace").strip()
    yield {"kind": "abort", "file_size": path.stat().st_size,
           "pid": int(text) if text.isdigit() else None, "content": text,
           "meaning": "present: the next start runs ABNORMAL recovery"}


def lock_file(path, **_):
    from rmqctl.store.lock import lock_state

    path = Path(path)
    data = read_bytes(path, limit=64)
    yield {"kind": "lock", "file_size": path.stat().st_size, "content": data.decode("latin-1"),
           "state": lock_state(path.parent)}


def timerwheel_file(path, *, skip=0, count=None, **_):
    """Only the slots in use (time_secs != 0 or num != 0) — the wheel has 1,209,600 slots."""
    path = Path(path)
    with open_ro(path) as fd:
        size = os.fstat(fd).st_size
        n_slots, shown, i = size // WHEEL_SLOT.size, 0, 0
        while i < n_slots:
            data = os.pread(fd, min(READ_BATCH // 32, n_slots - i) * 32, i * 32)
            if not data:
                break
            for j, vals in enumerate(WHEEL_SLOT.iter_unpack(data[:len(data) // 32 * 32])):
                if vals[0] or vals[3]:
                    if i + j >= skip and (count is None or shown < count):
                        shown += 1
                        yield {"kind": "timerwheel_slot", "slot": i + j, **dict(zip(WHEEL_FIELDS, vals))}
            i += len(data) // 32
        t = {"kind": "trailer", "file": str(path), "slots": n_slots, "valid_bytes": n_slots * 32,
             "trailing_bytes": size - n_slots * 32, "trailing": "none" if size == n_slots * 32 else "invalid"}
        if size != tf.WHEEL_FILE_SIZE:
            t["note"] = f"file is {size} bytes; the broker requires {tf.WHEEL_FILE_SIZE}"
        yield t


def timercheck_file(path, **_):
    path = Path(path)
    data = read_bytes(path, limit=8192)
    if len(data) < TIMERCHECK.size:
        raise FormatError(f"{len(data)} bytes, timercheck holds {TIMERCHECK.size} bytes of fields", path=path,
                          offset=len(data), field=TIMERCHECK_FIELDS[len(data) // 8] if len(data) < 56 else "")
    yield {"kind": "timercheck", "file_size": len(data), **dict(zip(TIMERCHECK_FIELDS, TIMERCHECK.unpack_from(data)))}
    rest = data[TIMERCHECK.size:]
    yield {"kind": "trailer", "file": str(path), "valid_bytes": TIMERCHECK.size, "trailing_bytes": len(rest),
           "trailing": "none" if not rest else ("zeros" if rest.count(0) == len(rest) else "invalid")}


def config_file(path, **_):
    from rmqctl import fastjson
    from rmqctl.config import files as cfg

    try:
        cfg.kind_for(Path(path).name)
    except UsageError:
        # Not a file the broker's config managers own (another writer's, or test data): plain dialect dump.
        raw = read_bytes(path)
        doc = fastjson.loads(raw, path) if raw.strip() else None
        yield {"kind": "config", "file": str(path), "used": "main", "verdict": "not a broker config file",
               "main": f"ok ({len(raw)} bytes)", "bak": "n/a", "notes": [], "content": fastjson.to_plain(doc)}
        return
    loaded = cfg.load(path)
    d = {"kind": "config", "file": str(loaded.target.path), "used": loaded.used, "verdict": loaded.verdict,
         "main": loaded.main.describe(), "bak": loaded.bak.describe(), "notes": loaded.notes}
    d["content"] = fastjson.to_plain(loaded.doc) if loaded.doc is not None else None
    yield d


def detect_kind(path: Path) -> str:
    from rmqctl.formats import kind_for_path

    k = kind_for_path(path)
    if k:
        return k
    raise UsageError("cannot tell the file kind from its path; give --kind "
                     f"({', '.join(KIND_NAMES)})", path=path)
