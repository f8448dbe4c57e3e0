"""DLedger commitlog stores as dump/verify/recover show them (the library under the CLI hooks)."""
from __future__ import annotations

import struct
from pathlib import Path

from rmqctl.dumping import start_offset_of
from rmqctl.errors import UnsupportedStoreError
from rmqctl.formats import dledger as fmt
from rmqctl.store import dledger as dl

_UNIT = struct.Struct(">iqiqq")


def data_file(path, *, skip=0, count=None, **_):
    """Entries of one data file (dump), then a trailer. A message's offset is entry pos + 48."""
    path = Path(path)
    start = start_offset_of(path)     # a file renamed by hand: positions as if it were the first
    data = path.read_bytes()
    pos = n = 0
    stop, problem = "end", None
    while pos + 8 <= len(data):
        magic, size = struct.unpack_from(">ii", data, pos)
        if magic == fmt.BLANK_MAGIC:
            stop = "blank"
            break
        if size == 0 and magic == 0:
            stop = "zeros"
            break
        if pos + fmt.BODY_OFFSET > len(data):
            stop, problem = "short", "entry header past the end of the file"
            break
        h = fmt.EntryHeader.parse(data[pos:pos + fmt.BODY_OFFSET])
        bad = None
        if h.pos != start + pos:
            bad = f"pos {h.pos} != {start + pos}"
        elif h.body_length + fmt.BODY_OFFSET != size or size <= fmt.HEADER_SIZE or pos + size > len(data):
            bad = f"size {size} (body length {h.body_length}, {len(data) - pos} bytes left)"
        elif magic != fmt.MAGIC:
            bad = f"magic {magic}"
        if bad:
            stop, problem = "invalid", bad
            break
        if n >= skip and (count is None or n - skip < count):
            yield {"kind": "dledger_entry", "position": start + pos, "magic": h.magic, "size": h.size,
                   "index": h.index, "term": h.term, "pos": h.pos, "channel": h.channel, "chain_crc": h.chain_crc,
                   "body_crc": h.body_crc, "body_length": h.body_length,
                   "message_offset": start + pos + fmt.BODY_OFFSET}
        n += 1
        pos += size
    rest = data[pos:]
    t = {"kind": "trailer", "file": str(path), "valid_bytes": pos, "units": n, "stop": stop,
         "trailing": "none" if not rest else "blank" if stop == "blank" else
         "zeros" if rest.count(0) == len(rest) else "invalid", "trailing_bytes": len(rest)}
    if stop == "blank":
        t["blank_size"] = struct.unpack_from(">i", data, pos + 4)[0]
    if problem:
        t["problem"] = {"offset": pos, "check": "bad_entry", "detail": problem, "field": "size"}
    yield t


def index_file(path, *, skip=0, count=None, **_):
    """Index units in use (magic != 0) of one index file, then a trailer."""
    path = Path(path)
    first = start_offset_of(path) // fmt.INDEX_UNIT_SIZE
    data = path.read_bytes()
    n = 0
    pos = 0
    while pos + fmt.INDEX_UNIT_SIZE <= len(data):
        magic, epos, size, index, term = _UNIT.unpack_from(data, pos)
        if magic == 0 and size == 0:
            break
        if n >= skip and (count is None or n - skip < count):
            yield {"kind": "dledger_index_unit", "unit": first + n, "magic": magic, "pos": epos, "size": size,
                   "index": index, "term": term}
        n += 1
        pos += fmt.INDEX_UNIT_SIZE
    rest = memoryview(data)[pos:]
    nz = bytes(rest).rstrip(b"\0")
    yield {"kind": "trailer", "file": str(path), "valid_bytes": pos, "units": n,
           "trailing": "none" if not len(rest) else "zeros" if not nz else "invalid", "trailing_bytes": len(rest)}


def properties_file(path, **_):
    path = Path(path)
    props = dl.read_properties(path)
    if props is None:
        from rmqctl.errors import UsageError

        raise UsageError("no such file", path=path)
    yield {"kind": "dledger_properties", "file": path.name, "properties": props}
    yield {"kind": "trailer", "file": str(path), "valid_bytes": path.stat().st_size, "trailing": "none",
           "trailing_bytes": 0}


def summary(store) -> dict:
    """dump STORE for a DLedger store: the engine, its version evidence, the entry log, queues."""
    log = dl.DLedgerLog.open(dl.find(store.root))
    plan = dl.predict_recovery(log)
    box: list = []
    terms = set()
    n = 0
    for e, _ in log.walk(box):
        n += 1
        terms.add(e.term)
    qs = []
    for topic, qid in store.queues():
        cq = store.consume_queue(topic, qid)
        qs.append({"topic": topic, "queue_id": qid, "max_offset": cq.max_offset()})
    return {
        "kind": "dledger_store", "root": str(store.root),
        "engine": "DLedger commitlog (enableDLegerCommitLog=true)",
        "engine_evidence": f"{log.dir.name}/ with data/ and index/, no commitlog/; entry magic 1, 48-byte entry "
                           "header and 32-byte index units: DLedger 0.3.x (RocketMQ 4.9.x / 5.x)",
        "self_id": log.self_id,
        "data_files": [f.path.name for f in log.data], "data_file_size": log.data_file_size,
        "index_files": [f.path.name for f in log.index], "index_file_size": log.index_file_size,
        "entries": n, "first_index": plan.first_index, "last_index": plan.last_index,
        "terms": sorted(terms), "data_end": plan.process_offset,
        "log_ends_with": box[0].kind if box else "end",
        "checkpoint": log.checkpoint(), "currterm": log.currterm(),
        "consume_queues": qs, "index": [p.name for p in store.index_files()],
        "abort": store.abort_exists, "lock": store.lock_state(),
    }


def refuse_recover(store_root) -> None:
    """recover on a DLedger store: DLedger's own recovery is not reproduced offline; say what it will do."""
    log = dl.DLedgerLog.open(dl.find(store_root))
    from rmqctl.check.dledger import recovery_sentence

    plan = dl.predict_recovery(log)
    raise UnsupportedStoreError("recover does not rewrite DLedger commitlogs (the broker's own recovery runs at "
                                "start): " + recovery_sentence(plan), path=store_root)
