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

# The body of an inner-batch record (5.x, sysflag INNER_BATCH 0x80 | NEED_UNWRAP 0x40): the producer's batch
# encoding (MessageDecoder.encodeMessages), inner messages back to back, each this head, then
# body_length bytes of body, an i16 properties length and the properties (name\x01value\x02...).
InnerMessageHead = Struct(
    "total_size" / Int32sb * "bytes of this inner message",
    "magic_code" / Int32sb * "0 (not written by the client)",
    "body_crc" / Int32sb * "0 (not written by the client)",
    "flag" / Int32sb * "message flag",
    "body_length" / Int32sb * "body bytes that follow",
)
