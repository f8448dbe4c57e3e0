"""store/checkpoint (StoreCheckpoint): i64 fields inside a 4096-byte mapped file (docs/store-format.md, "Checkpoint").

Generations: 24 bytes used by 4.x, 32 by 5.0.0 (masterFlushedOffset), 40 by 5.1.1+ (confirmPhyOffset).
Unused bytes are zero; there is no CRC.
"""
from construct import Int64sb, Struct

FILE_SIZE = 4096
SAFETY_MARGIN_MS = 3000

CheckpointV4 = Struct(
    "physic_msg_timestamp" / Int64sb * "store ts of the last message in the last flushed commitlog file",
    "logics_msg_timestamp" / Int64sb * "store ts of the last message dispatched to a consume queue",
    "index_msg_timestamp" / Int64sb * "endTimestamp of the last index file that became full",
)
CheckpointV50 = Struct(
    *CheckpointV4.subcons,
    "master_flushed_offset" / Int64sb * "slave: the master's flushed offset (5.0.0+)",
)
Checkpoint = Struct(
    *CheckpointV50.subcons,
    "confirm_phy_offset" / Int64sb * "commitlog confirm offset (5.1.1+): start of the last valid message",
)
"""The newest generation; older brokers leave the extra fields zero."""


def min_timestamp(physic: int, logics: int) -> int:
    """StoreCheckpoint.getMinTimestamp: max(0, min(physic, logics) - 3000)."""
    return max(0, min(physic, logics) - SAFETY_MARGIN_MS)


def min_timestamp_index(physic: int, logics: int, index: int) -> int:
    return min(min_timestamp(physic, logics), index)
