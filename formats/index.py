"""index/<yyyyMMddHHmmssSSS>: hash index by `topic#key` (docs/store-format.md, "Index files").

Size = 40 + 4*hashSlotNum + 20*indexNum (defaults 5,000,000 / 20,000,000 -> 420,000,040). The
counts are broker config, not stored in the file. Slot values and preIndexNo are ITEM NUMBERS
(item n at 40 + 4*S + 20*n); item 0 is never used.
"""
from construct import Int32sb, Int64sb, Struct

HEADER_SIZE = 40
SLOT_SIZE = 4
ITEM_SIZE = 20
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
INVALID_INDEX = 0
MAX_MSGS_NUM_BATCH = 64

IndexHeader = Struct(
    "begin_timestamp" / Int64sb * "store timestamp of the first indexed message",
    "end_timestamp" / Int64sb * "store timestamp of the last indexed message",
    "begin_phy_offset" / Int64sb * "commitlog offset of the first indexed message",
    "end_phy_offset" / Int64sb * "commitlog offset of the last indexed message",
    "hash_slot_count" / Int32sb * "number of slots that became non-empty",
    "index_count" / Int32sb * "next item number (starts at 1)",
)
IndexSlot = Struct(
    "item" / Int32sb * "item number of the newest item in this bucket; 0 = empty",
)
IndexItem = Struct(
    "key_hash" / Int32sb * "abs(String.hashCode(topic + '#' + key)), MIN_VALUE -> 0",
    "phy_offset" / Int64sb * "commitlog offset of the message",
    "time_diff" / Int32sb * "(storeTimestamp - begin_timestamp) / 1000, seconds",
    "pre_index_no" / Int32sb * "item number of the next older item in the bucket; 0 = end of chain",
)


def file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + SLOT_SIZE * hash_slot_num + ITEM_SIZE * index_num


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed int32."""
    h = 0
    b = s.encode("utf-16-be", errors="surrogatepass")
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def key_hash(topic: str, key: str) -> int:
    """IndexFile.indexKeyHashMethod over IndexService.buildKey(topic, key)."""
    h = abs(java_string_hash(f"{topic}#{key}"))
    return 0 if h >= (1 << 31) else h


def slot_of(hash_value: int, hash_slot_num: int) -> int:
    return hash_value % hash_slot_num
