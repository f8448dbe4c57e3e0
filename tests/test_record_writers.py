"""rmqctl.writers against the broker: every record, unit, header and checkpoint of every fixture store and
real-world file is parsed with its formats/ declaration (Construct) and written back with the writer
rmqctl repairs use; the bytes must be the broker's, byte for byte."""
from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, real_world_files
from construct import ConstructError
from rmqctl.formats import checkpoint as ckf
from rmqctl.formats import commitlog as clf
from rmqctl.formats import consumequeue as cqf
from rmqctl.formats import consumequeue_ext as cqef
from rmqctl.formats import index as ixf
from rmqctl.formats import kind_for_path
from rmqctl.formats import timer as tmf
from rmqctl.formats._derive import field_names

from rmqctl import writers as W
from rmqctl.repair import checkpoint_write as CK
from rmqctl.repair import fillers
from rmqctl.scan import FileWalk


def _files() -> list[Path]:
    stores = sorted(p for p in (FIXTURES / "stores").rglob("*") if p.is_file())
    return stores + real_world_files()


def _values(declaration, parsed) -> list:
    out = []
    for name in field_names(declaration):
        v = parsed
        for part in name.split("."):
            v = v[part]
        out.append(v)
    return out


def _fixed(declaration, codec, data: bytes, step: int | None = None, stop=None) -> int:
    """Each unit of `data`: parsed by the declaration, packed by the derived writer, compared. Returns units seen."""
    step = step or codec.size
    n = 0
    for pos in range(0, len(data) - codec.size + 1, step):
        raw = data[pos:pos + codec.size]
        if stop is not None and stop(raw):
            break
        parsed = declaration.parse(raw)
        assert codec.pack(*_values(declaration, parsed)) == raw, (declaration, pos)
        n += 1
    return n


def _commitlog(data: bytes, where: str) -> Counter:
    """Message records rebuilt by writers.message_record (lengths, magic and, where the record's is right,
    BODYCRC computed), BLANK records by writers.blank_record, until the first thing that is neither."""
    seen = Counter()
    pos = 0
    while pos + 8 <= len(data):
        size, magic = W.I64.unpack_from(data, pos)[0] >> 32, int.from_bytes(data[pos + 4:pos + 8], "big", signed=True)
        if magic == clf.BLANK_MAGIC_CODE:
            assert W.blank_record(size) == data[pos:pos + 8], where
            seen["blank"] += 1
            break
        if magic not in clf.MESSAGE_MAGIC_CODES or size <= 0 or pos + size > len(data):
            break
        raw = data[pos:pos + size]
        try:
            r = clf.MessageRecord.parse(raw)
        except ConstructError:  # a corrupt record (crash fixtures): the walk ends there, like the broker's
            break
        crc_ok = zlib.crc32(r.body) & 0x7FFFFFFF == r.body_crc
        built = W.message_record(
            topic=r.topic, body=r.body, properties=r.properties, queue_id=r.queue_id, flag=r.flag,
            queue_offset=r.queue_offset, physical_offset=r.physical_offset, sys_flag=r.sys_flag,
            born_timestamp=r.born_timestamp, born_host=(r.born_host.address, r.born_host.port),
            store_timestamp=r.store_timestamp, store_host=(r.store_host.address, r.store_host.port),
            reconsume_times=r.reconsume_times, prepared_transaction_offset=r.prepared_transaction_offset,
            body_crc=None if crc_ok else r.body_crc,
            magic_code=None if (r.magic_code == clf.MESSAGE_MAGIC_CODE_V2) == (len(r.topic) > 127) else r.magic_code)
        assert built == raw, f"{where}: record at {pos}"
        seen["message"] += 1
        seen["v6"] += bool(r.sys_flag & (clf.BORNHOST_V6_FLAG | clf.STOREHOSTADDRESS_V6_FLAG))
        seen["v2"] += r.magic_code == clf.MESSAGE_MAGIC_CODE_V2
        pos += size
    return seen


def test_writers_give_back_the_brokers_bytes():
    seen = Counter()
    for path in _files():
        kind = kind_for_path(path)
        data = path.read_bytes()
        where = str(path)
        if kind in ("commitlog", "compaction_log"):
            seen.update(_commitlog(data, where))
        elif kind == "consumequeue":
            seen["cq_unit"] += _fixed(cqf.ConsumeQueueUnit, W.CQ_UNIT, data, stop=lambda raw: not any(raw))
        elif kind == "consumequeue_ext":
            pos = 0
            while pos + W.CQ_EXT_HEAD.size <= len(data):
                head = cqef.CqExtUnitHead.parse(data[pos:pos + W.CQ_EXT_HEAD.size])
                if head.size <= 0:
                    break
                assert W.CQ_EXT_HEAD.pack(*_values(cqef.CqExtUnitHead, head)) == \
                    data[pos:pos + W.CQ_EXT_HEAD.size], where
                seen["cq_ext_unit"] += 1
                pos += head.size
        elif kind == "index" and len(data) >= ixf.HEADER_SIZE:
            head = ixf.IndexHeader.parse(data[:ixf.HEADER_SIZE])
            assert W.INDEX_HEADER.pack(*_values(ixf.IndexHeader, head)) == data[:ixf.HEADER_SIZE], where
            seen["index_header"] += 1
            seen["index_slot"] += _fixed(ixf.IndexSlot, W.INDEX_SLOT, data[ixf.HEADER_SIZE:ixf.HEADER_SIZE + 4096])
        elif kind == "checkpoint" and len(data) >= W.CHECKPOINT.size:
            assert W.CHECKPOINT.pack(*_values(ckf.Checkpoint, ckf.Checkpoint.parse(data))) == data[:W.CHECKPOINT.size]
            # rewriting nothing gives the broker's page back, byte for byte
            assert CK.new_checkpoint(data, last_store_ts=None, index_msg_ts=None, confirm_offset=None) == \
                data[:ckf.FILE_SIZE].ljust(ckf.FILE_SIZE, b"\0"), where
            seen["checkpoint"] += 1
        elif kind == "timercheck" and len(data) >= W.TIMER_CHECKPOINT.size:
            parsed = tmf.TimerCheckpoint.parse(data)
            assert W.TIMER_CHECKPOINT.pack(*_values(tmf.TimerCheckpoint, parsed)) == data[:W.TIMER_CHECKPOINT.size]
            seen["timercheck"] += 1
    # the corpus holds every kind the writers serve (else this test proves nothing for it)
    for what in ("message", "blank", "v6", "v2", "cq_unit", "cq_ext_unit", "index_header", "index_slot",
                 "checkpoint", "timercheck"):
        assert seen[what] > 0, (what, seen)


def test_index_items_written_back():
    """Every item of every fixture store's index files (geometry from the store's manifest): parsed by
    IndexItem, packed by the writer rebuild_index uses."""
    from rmqctl.store.config import StoreConfig

    n = 0
    for manifest in sorted((FIXTURES / "stores").glob("*/manifest.json")):
        cfg = StoreConfig.from_file(manifest)
        for path in sorted((manifest.parent / "store" / "index").glob("*")):
            data = path.read_bytes()
            head = ixf.IndexHeader.parse(data[:ixf.HEADER_SIZE])
            end = ixf.HEADER_SIZE + ixf.SLOT_SIZE * cfg.hash_slot_num
            for k in range(1, head.index_count):
                raw = data[end + ixf.ITEM_SIZE * k:end + ixf.ITEM_SIZE * (k + 1)]
                assert W.INDEX_ITEM.pack(*_values(ixf.IndexItem, ixf.IndexItem.parse(raw))) == raw, (path, k)
                n += 1
    assert n > 0


@pytest.mark.parametrize("length", [150, 300, 4096])
def test_filler_records_are_records_the_walk_accepts(tmp_path, length):
    """The placeholder recover writes (built by writers.message_record) parses with MessageRecord and passes
    the kernel's checks (size, magic, body CRC, PHYSICALOFFSET) at its position."""
    start = 1 << 20
    rec = fillers.make_filler_record(start, length)
    assert len(rec) == length
    parsed = clf.MessageRecord.parse(rec)
    assert parsed.topic == fillers.QUARANTINE_TOPIC.encode() and parsed.physical_offset == start
    assert parsed.sys_flag & clf.TRANSACTION_MASK == clf.TRANSACTION_ROLLBACK_TYPE
    f = tmp_path / "seg"
    f.write_bytes(rec + W.blank_record(64) + bytes(56))
    import os

    fd = os.open(f, os.O_RDONLY)
    try:
        walked = list(FileWalk(fd, start, length + 64, 0))
    finally:
        os.close(fd)
    assert [r.offset for r in walked] == [start]
