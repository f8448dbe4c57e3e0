"""The checkpoint rmqctl writes after a repair (docs/store-format.md, Checkpoint; docs/recovery.md).

* physicMsgTimestamp, logicsMsgTimestamp := store timestamp of the last valid record, because after
  the repair every record up to it is on disk and in its consume queue (never raised beyond that);
* indexMsgTimestamp := endTimestamp of the last FULL index file (the only value the broker itself ever
  writes there), unchanged when there is none;
* confirmPhyOffset (5.1.1+, offset 32) := start of the last valid record, what recovery sets in
  non-controller mode; masterFlushedOffset and the rest of the 4096-byte page are kept as they are.
A 4.9 broker reads only offsets 0-23, so the extra field is harmless there.
"""
from __future__ import annotations

from rmqctl import writers
from rmqctl.formats import checkpoint as ckf

_Q = writers.I64
_AT = writers.CHECKPOINT_OFFSETS        # field -> byte offset, from formats.checkpoint.Checkpoint


def new_checkpoint(old: bytes | None, *, last_store_ts: int | None, index_msg_ts: int | None,
                   confirm_offset: int | None) -> bytes:
    buf = bytearray((old or b"")[:ckf.FILE_SIZE].ljust(ckf.FILE_SIZE, b"\0"))
    if last_store_ts is not None and last_store_ts > 0:
        _Q.pack_into(buf, _AT["physic_msg_timestamp"], last_store_ts)
        _Q.pack_into(buf, _AT["logics_msg_timestamp"], last_store_ts)
    if index_msg_ts is not None:
        _Q.pack_into(buf, _AT["index_msg_timestamp"], index_msg_ts)
    if confirm_offset is not None and confirm_offset >= 0:
        _Q.pack_into(buf, _AT["confirm_phy_offset"], confirm_offset)
    return bytes(buf)


def fields(data: bytes | None) -> dict:
    codec = writers.CHECKPOINT
    buf = (data or b"")[:codec.size].ljust(codec.size, b"\0")
    return dict(zip(_AT, codec.unpack(buf)))
