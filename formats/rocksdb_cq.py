"""storeType=defaultRocksDB (5.x): the consume-queue RocksDB at store/consumequeue/ and the metadata RocksDBs at
store/config/{topics,subscriptionGroups,consumerOffsets}/ (RocketMQ 5.3.3 RocksDBConsumeQueueTable,
RocksDBConsumeQueueOffsetTable, ConsumeQueueRocksDBStorage, ConfigRocksDBStorage; docs/rocksdb.md).

The RocksDB files themselves (SST, MANIFEST, WAL) are RocksDB's own format, read through a RocksDB binding; what is
declared here are the keys and values the broker puts into them. Every integer is big-endian (Java ByteBuffer).
CTRL_0/1/2 are the bytes 0x00/0x01/0x02 of AbstractRocksDBStorage.
"""
from construct import Bytes, Const, Int32sb, Int32ub, Int64sb, Struct, this

CTRL_0, CTRL_1, CTRL_2 = b"\x00", b"\x01", b"\x02"

# consume-queue RocksDB (store/consumequeue/): column families
CQ_COLUMN_FAMILY = "default"
OFFSET_COLUMN_FAMILY = "offset"

CqKey = Struct(
    "topic_len" / Int32ub * "length of the UTF-8 topic name",
    "ctrl_a" / Const(CTRL_1) * "separator byte 0x01",
    "topic" / Bytes(this.topic_len) * "topic name, UTF-8",
    "ctrl_b" / Const(CTRL_1) * "separator byte 0x01",
    "queue_id" / Int32sb * "queue id",
    "ctrl_c" / Const(CTRL_1) * "separator byte 0x01",
    "queue_offset" / Int64sb * "consume-queue offset of the unit (0-based, one per message)",
)
"""Key of one unit in the default column family; keys sort by topic length, topic, queue id, then queue offset."""
CQ_KEY_FIXED = 4 + 1 + 1 + 4 + 1 + 8

CqValue = Struct(
    "phy_offset" / Int64sb * "commitlog offset of the message",
    "size" / Int32sb * "message total size",
    "tags_code" / Int64sb * "tags hash code (delay topic: delivery time)",
    "store_timestamp" / Int64sb * "message store time (ms); the broker's search by time reads it from here",
)
"""Value of one unit in the default column family: 28 bytes (the file CQ unit plus the store time)."""
CQ_VALUE_SIZE = 28

OffsetKey = Struct(
    "topic_len" / Int32ub * "length of the UTF-8 topic name",
    "ctrl_a" / Const(CTRL_1) * "separator byte 0x01",
    "topic" / Bytes(this.topic_len) * "topic name, UTF-8 (CHECKPOINT_TOPIC: the dispatch checkpoint)",
    "ctrl_b" / Const(CTRL_1) * "separator byte 0x01",
    "kind" / Bytes(3) * "b'max' or b'min'",
    "ctrl_c" / Const(CTRL_1) * "separator byte 0x01",
    "queue_id" / Int32sb * "queue id (0 for CHECKPOINT_TOPIC)",
)
"""Key of the offset column family: the min and max entry of each queue."""
OFFSET_KEY_FIXED = 4 + 1 + 1 + 3 + 1 + 4

OffsetValue = Struct(
    "phy_offset" / Int64sb * "commitlog offset of the queue's first (min) or last (max) unit",
    "queue_offset" / Int64sb * "queue offset of that unit (max: the last unit, so the queue's max offset is this + 1)",
)
OFFSET_VALUE_SIZE = 16

CheckpointValue = Struct(
    "max_phy_offset" / Int64sb * "commitlog offset up to which messages were dispatched into the RocksDB",
)
"""Value of key OffsetKey(topic=CHECKPOINT_TOPIC, kind=max, queue_id=0): 8 bytes."""
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
MAX, MIN = b"max", b"min"

# metadata RocksDBs (ConfigRocksDBStorage): key = name (UTF-8), value = fastjson document
METADATA_DIRS = ("topics", "subscriptionGroups", "consumerOffsets")
METADATA_COLUMN_FAMILIES = ("default", "kvDataVersion", "forbidden")
KV_DATA_VERSION_KEY = b"kvDataVersionKey"
"""Key of the kvDataVersion column family: the DataVersion JSON of the table."""
# consumerOffsets: key "topic@group", value {"offsetTable": {queueId: offset}} (RocksDBOffsetSerializeWrapper)
# topics: key topic name, value TopicConfig JSON; subscriptionGroups: key group name, value SubscriptionGroupConfig
# JSON; forbidden (subscriptionGroups): key group name, value JSON {topic: forbidden bits}


def cq_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    t = topic.encode()
    return CqKey.build({"topic_len": len(t), "topic": t, "queue_id": queue_id, "queue_offset": queue_offset})


def cq_queue_prefix(topic: str, queue_id: int) -> bytes:
    """Every key of one queue starts with this (the key without the queue offset)."""
    return cq_key(topic, queue_id, 0)[:-8]


def offset_key(topic: str, queue_id: int, kind: bytes) -> bytes:
    t = topic.encode()
    return OffsetKey.build({"topic_len": len(t), "topic": t, "kind": kind, "queue_id": queue_id})
