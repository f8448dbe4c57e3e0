"""Record writers: the bytes rmqctl writes into a store, built from the ``formats/`` declarations.

Nothing here types a layout a second time. Variable-length records (a commitlog message, a BLANK
record) are built with Construct's ``.build()`` on the declaration the readers parse with, so the
length formula and magic codes checked on read are the ones applied on write; fixed-size units (a
consume-queue unit, index header/slot/item, checkpoint and timer checkpoint fields, timerlog units)
get a ``struct`` codec derived from their declaration by ``formats._derive`` -- the same derivation the
scan kernels read with. ``tests/test_record_writers.py`` proves every writer gives back the broker's
bytes for every record of every fixture store and real-world file.

Used by the repairs (``repair/fillers.py``, ``rebuild_cq.py``, ``rebuild_index.py``,
``checkpoint_write.py``, ``timer_plan.py``, ``start_file.py``); layout: docs/store-format.md.
"""
from __future__ import annotations

import struct

from rmqctl.formats import checkpoint as ckf
from rmqctl.formats import commitlog as clf
from rmqctl.formats import consumequeue as cqf
from rmqctl.formats import consumequeue_ext as cqef
from rmqctl.formats import index as ixf
from rmqctl.formats import timer as tmf
from rmqctl.formats._derive import field_names, struct_format


def _codec(declaration) -> struct.Struct:
    return struct.Struct(struct_format(declaration))


def _offsets(declaration) -> dict[str, int]:
    """Byte offset of every field of a fixed-size declaration."""
    out, pos = {}, 0
    for name, code in zip(field_names(declaration), _codes(declaration)):
        out[name] = pos
        pos += struct.calcsize(">" + code)
    return out


def _codes(declaration) -> list[str]:
    """The struct code of each field, in order ('q', 'i', '4s', ...)."""
    fmt, out, num = struct_format(declaration)[1:], [], ""
    for ch in fmt:
        if ch.isdigit():
            num += ch
        else:
            out.append(num + ch)
            num = ""
    return out


CQ_UNIT = _codec(cqf.ConsumeQueueUnit)                  # (physical_offset, size, tags_code)
CQ_EXT_HEAD = _codec(cqef.CqExtUnitHead)               # (size, tags_code, msg_store_time, bit_map_size)
INDEX_HEADER = _codec(ixf.IndexHeader)                  # (begin/end timestamp, begin/end phy, slots, count)
INDEX_SLOT = _codec(ixf.IndexSlot)
INDEX_ITEM = _codec(ixf.IndexItem)                      # (key_hash, phy_offset, time_diff, pre_index_no)
CHECKPOINT = _codec(ckf.Checkpoint)
CHECKPOINT_OFFSETS = _offsets(ckf.Checkpoint)           # field -> byte offset (physic_msg_timestamp: 0, ...)
TIMER_CHECKPOINT = _codec(tmf.TimerCheckpoint)
TIMER_CHECKPOINT_OFFSETS = _offsets(tmf.TimerCheckpoint)
TIMERLOG_UNIT = _codec(tmf.TimerLogUnit)
TIMERLOG_UNIT_FIELDS = field_names(tmf.TimerLogUnit)
TIMERLOG_BLANK = _codec(tmf.TimerLogBlank)              # (size, zero, magic)
MESSAGE_HEAD = _codec(clf.MessageHead)                  # the first fields of every message record
MESSAGE_HEAD_FIELDS = field_names(clf.MessageHead)
I64 = struct.Struct(">q")                               # one checkpoint field (CHECKPOINT_OFFSETS)


def host_size(v6: bool) -> int:
    """Bytes of a BORNHOST / STOREHOST field (address + port)."""
    return clf.HOSTS[v6].sizeof()


def store_timestamp_offset(sys_flag: int) -> int:
    """Where STORETIMESTAMP sits in a message record: after the head and BORNHOST (4 or 16 address bytes)."""
    return MESSAGE_HEAD.size + host_size(bool(sys_flag & clf.BORNHOST_V6_FLAG))


def message_record(*, topic: bytes, body: bytes = b"", properties: bytes = b"", queue_id: int = 0, flag: int = 0,
                   queue_offset: int = 0, physical_offset: int, sys_flag: int = 0, born_timestamp: int = 0,
                   born_host: tuple[bytes, int] = (b"\x7f\0\0\x01", 0), store_timestamp: int = 0,
                   store_host: tuple[bytes, int] = (b"\x7f\0\0\x01", 0), reconsume_times: int = 0,
                   prepared_transaction_offset: int = 0, body_crc: int | None = None,
                   magic_code: int | None = None) -> bytes:
    """One message record built by ``formats.commitlog.MessageRecord``: TOTALSIZE, the length fields and
    (unless given) BODYCRC and the magic code (V2 only for topics over 127 bytes) are computed; the
    declaration's own checks (magic, length formula) run on the result."""
    import zlib

    if magic_code is None:
        magic_code = clf.MESSAGE_MAGIC_CODE_V2 if len(topic) > 127 else clf.MESSAGE_MAGIC_CODE_V1
    v2 = magic_code == clf.MESSAGE_MAGIC_CODE_V2
    total = (clf.fixed_overhead(bool(sys_flag & clf.BORNHOST_V6_FLAG), bool(sys_flag & clf.STOREHOSTADDRESS_V6_FLAG),
                                v2) + len(body) + len(topic) + len(properties))
    return clf.MessageRecord.build({
        "total_size": total, "magic_code": magic_code,
        "body_crc": zlib.crc32(body) & 0x7FFFFFFF if body_crc is None else body_crc,
        "queue_id": queue_id, "flag": flag, "queue_offset": queue_offset, "physical_offset": physical_offset,
        "sys_flag": sys_flag, "born_timestamp": born_timestamp,
        "born_host": {"address": born_host[0], "port": born_host[1]}, "store_timestamp": store_timestamp,
        "store_host": {"address": store_host[0], "port": store_host[1]}, "reconsume_times": reconsume_times,
        "prepared_transaction_offset": prepared_transaction_offset, "body_length": len(body), "body": body,
        "topic_length": len(topic), "topic": topic, "properties_length": len(properties), "properties": properties})


def message_overhead(*, sys_flag: int = 0, v2: bool = False) -> int:
    """Bytes of a message record that are not body, topic or properties (91 for IPv4 hosts, V1)."""
    return clf.fixed_overhead(bool(sys_flag & clf.BORNHOST_V6_FLAG), bool(sys_flag & clf.STOREHOSTADDRESS_V6_FLAG), v2)


def blank_record(total_size: int) -> bytes:
    """The BLANK end-of-file record (``formats.commitlog.BlankRecord``): TOTALSIZE, BLANK_MAGIC_CODE."""
    return clf.BlankRecord.build({"total_size": total_size})
