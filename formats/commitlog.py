"""commitlog/<20-digit offset>: message records and the end-of-file blank record.

Reference: docs/store-format.md, Commitlog (CommitLog.checkMessageAndReturnSize, MessageExtEncoder). Big-endian,
signed Java types. Records never span files; every full file ends with a BLANK record (>= 8 bytes).
"""
from construct import (Bytes, Check, Const, IfThenElse, Int8sb, Int16sb, Int32sb, Int64sb, OneOf, Struct,
                       this)

MESSAGE_MAGIC_CODE_V1 = -626843481   # 0xDAA320A7: 1-byte (signed) topic length
MESSAGE_MAGIC_CODE_V2 = -626843477   # 0xDAA320AB: 2-byte topic length (5.1.0+, topics > 127 chars)
BLANK_MAGIC_CODE = -875286124        # 0xCBD43194: end-of-file filler
MESSAGE_MAGIC_CODES = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
END_FILE_MIN_BLANK_LENGTH = 8
DEFAULT_FILE_SIZE = 1024 * 1024 * 1024
MAX_MESSAGE_SIZE_DEFAULT = 4 * 1024 * 1024

# SYSFLAG bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700  # 0x100 LZ4, 0x200 ZSTD, 0x300 ZLIB

TRANSACTION_TYPE_NAMES = {0x0: "NOT", 0x4: "PREPARED", 0x8: "COMMIT", 0xC: "ROLLBACK"}

HostV4 = Struct(
    "address" / Bytes(4) * "IPv4 address, network order",
    "port" / Int32sb * "port as i32",
)
HostV6 = Struct(
    "address" / Bytes(16) * "IPv6 address, network order",
    "port" / Int32sb * "port as i32",
)
HOSTS = {False: HostV4, True: HostV6}

_HEAD = [
    "total_size" / Int32sb * "TOTALSIZE: length of the whole record including this field",
    "magic_code" / OneOf(Int32sb, MESSAGE_MAGIC_CODES) * "MAGICCODE: 0xDAA320A7 (V1) or 0xDAA320AB (V2)",
    "body_crc" / Int32sb * "BODYCRC: zlib.crc32(body) & 0x7FFFFFFF over the stored (maybe compressed) body",
    "queue_id" / Int32sb * "QUEUEID",
    "flag" / Int32sb * "FLAG: user flag from the producer",
    "queue_offset" / Int64sb * "QUEUEOFFSET: logical offset in the consume queue (0 for PREPARED/ROLLBACK)",
    "physical_offset" / Int64sb * "PHYSICALOFFSET: this record's own commitlog offset",
    "sys_flag" / Int32sb * "SYSFLAG: compressed 0x1, multi-tags 0x2, transaction 0xC mask, born v6 0x10, "
                           "store v6 0x20, need-unwrap 0x40, inner-batch 0x80, compression type 0x700",
    "born_timestamp" / Int64sb * "BORNTIMESTAMP: producer clock, ms since epoch",
]
_MID = [
    "store_timestamp" / Int64sb * "STORETIMESTAMP: broker clock, ms since epoch",
]
_TAIL = [
    "reconsume_times" / Int32sb * "RECONSUMETIMES",
    "prepared_transaction_offset" / Int64sb * "PREPAREDTRANSACTIONOFFSET: half message offset for a COMMIT",
    "body_length" / Int32sb * "BODYLENGTH",
]

MessageHead = Struct(*_HEAD)
"""The first 48 bytes of every message record (everything before BORNHOST)."""


def message_header(born_v6: bool, store_v6: bool) -> Struct:
    """The fixed part of a message record up to BODYLENGTH, for one host-address combination."""
    return Struct(*_HEAD, "born_host" / HOSTS[born_v6] * "BORNHOST: producer address",
                  *_MID, "store_host" / HOSTS[store_v6] * "STOREHOST: broker address (brokerIP1:listenPort)",
                  *_TAIL)


def message_after_head(born_v6: bool, store_v6: bool) -> Struct:
    """Bytes 44.. up to BODYLENGTH: what follows MessageHead for one host combination."""
    return Struct("born_host" / HOSTS[born_v6], *_MID, "store_host" / HOSTS[store_v6], *_TAIL)


def fixed_overhead(born_v6: bool, store_v6: bool, v2: bool) -> int:
    """Bytes of a record that are not body, topic or properties (91 for IPv4/IPv4/V1)."""
    return message_header(born_v6, store_v6).sizeof() + (2 if v2 else 1) + 2


MessageRecord = Struct(
    *_HEAD,
    "born_host" / IfThenElse(this.sys_flag & BORNHOST_V6_FLAG, HostV6, HostV4) * "BORNHOST",
    *_MID,
    "store_host" / IfThenElse(this.sys_flag & STOREHOSTADDRESS_V6_FLAG, HostV6, HostV4) * "STOREHOST",
    *_TAIL,
    Check(this.body_length >= 0),
    "body" / Bytes(this.body_length) * "BODY: as sent (compressed when SYSFLAG 0x1)",
    "topic_length" / IfThenElse(this.magic_code == MESSAGE_MAGIC_CODE_V2, Int16sb, Int8sb)
    * "TOPICLENGTH: signed i8 (V1) or i16 (V2)",
    Check(this.topic_length > 0),
    "topic" / Bytes(this.topic_length) * "TOPIC: UTF-8",
    "properties_length" / Int16sb * "PROPERTIESLENGTH: signed i16 byte count",
    Check(this.properties_length >= 0),
    "properties" / Bytes(this.properties_length) * "PROPERTIES: name\\x01value\\x02 ... (UTF-8)",
    Check(lambda ctx: ctx.total_size == fixed_overhead(bool(ctx.sys_flag & BORNHOST_V6_FLAG),
                                                       bool(ctx.sys_flag & STOREHOSTADDRESS_V6_FLAG),
                                                       ctx.magic_code == MESSAGE_MAGIC_CODE_V2)
          + ctx.body_length + ctx.topic_length + ctx.properties_length),
)
"""One message record (the length formula of MessageExtEncoder.calMsgLength is checked)."""

BlankRecord = Struct(
    "total_size" / Int32sb * "bytes from the blank's start to the end of the file (>= 8); not validated by Java",
    "magic_code" / Const(BLANK_MAGIC_CODE, Int32sb) * "BLANK_MAGIC_CODE 0xCBD43194",
)
"""End-of-file filler: the rest of the file after it is not written (zeros in practice)."""

RecordPrefix = Struct(
    "total_size" / Int32sb * "TOTALSIZE",
    "magic_code" / Int32sb * "MAGICCODE",
)
"""The 8 bytes every record starts with: enough to tell a message from a blank from garbage."""
