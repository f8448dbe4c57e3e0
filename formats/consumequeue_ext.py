"""consumequeue_ext/<topic>/<queueId>/<20-digit>: variable units (only with enableConsumeQueueExt)
(docs/store-format.md, "Consume-queue ext")."""
from construct import Bytes, Check, Int16sb, Int64sb, Struct, this

DEFAULT_FILE_SIZE = 48 * 1024 * 1024
MIN_EXT_UNIT_SIZE = 20
END_BLANK_DATA_LENGTH = 4
MAX_ADDR = -2147483649          # isExtAddr(v) <=> v <= MAX_ADDR
ADDR_BASE = -(1 << 63)          # addr = realOffset + Long.MIN_VALUE

CqExtUnitHead = Struct(
    "size" / Int16sb * "unit size = 20 + bit_map_size; <= 0 (0xFFFF filler) ends the file",
    "tags_code" / Int64sb * "real tagsCode of the message",
    "msg_store_time" / Int64sb * "store timestamp (ms)",
    "bit_map_size" / Int16sb * "length of the filter bit map in bytes",
)
CqExtUnit = Struct(
    *CqExtUnitHead.subcons,
    Check(this.size >= MIN_EXT_UNIT_SIZE),
    Check((this.bit_map_size >= 0) & (this.size == MIN_EXT_UNIT_SIZE + this.bit_map_size)),
    "filter_bit_map" / Bytes(this.bit_map_size) * "SQL92 filter bit map",
)


def is_ext_addr(tags_code: int) -> bool:
    return tags_code <= MAX_ADDR


def ext_addr_to_offset(addr: int) -> int:
    return addr - ADDR_BASE
