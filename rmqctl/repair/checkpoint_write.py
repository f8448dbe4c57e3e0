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

import struct

from rmqctl.formats import checkpoint as ckf

_Q = struct.Struct(">q")


def new_checkpoint(old: bytes | None, *, last_store_ts: int | None, index_msg_ts: int | None,
                   confirm_offset: int | None) -> bytes:
    buf = bytearray((old or b"")[:ckf.FILE_SIZE].ljust(ckf.FILE_SIZE, b"\0"))
    if last_store_ts is not None and last_store_ts > 0:
        _Q.pack_into(buf, 0, last_store_ts)
        _Q.pack_into(buf, 8, last_store_ts)
    if index_msg_ts is not None:
        _Q.pack_into(buf, 16, index_msg_ts)
    if confirm_offset is not None and confirm_offset >= 0:
        _Q.pack_into(buf, 32, confirm_offset)
    return bytes(buf)


def fields(data: bytes | None) -> dict:
    buf = (data or b"")[:40].ljust(40, b"\0")
    names = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
             "master_flushed_offset", "confirm_phy_offset")
    return {n: _Q.unpack_from(buf, 8 * i)[0] for i, n in enumerate(names)}
