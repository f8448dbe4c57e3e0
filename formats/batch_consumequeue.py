"""batchconsumequeue/<topic>/<queueId>/<20-digit>: 46-byte units (5.x, queue.type=BatchCQ)
(docs/store-format.md, "Batch consume queue").
Also the unit of compaction/compactionCq (SparseConsumeQueue)."""
from construct import Int16sb, Int32sb, Int64sb, Struct

UNIT_SIZE = 46
DEFAULT_FILE_SIZE = 300_000 * UNIT_SIZE
INVALID_POS = -1

BatchConsumeQueueUnit = Struct(
    "physical_offset" / Int64sb * "commitlog (or compaction log) offset of the record",
    "size" / Int32sb * "record size",
    "tags_code" / Int64sb * "tags hash",
    "store_timestamp" / Int64sb * "store timestamp (ms)",
    "msg_base_offset" / Int64sb * "first logical offset of the batch (INNER_BASE, else QUEUEOFFSET)",
    "batch_size" / Int16sb * "messages in the batch (INNER_NUM, else 1)",
    "compacted_offset" / Int32sb * "-1 (INVALID_POS)",
    "reserved" / Int32sb * "0",
)
