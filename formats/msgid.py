"""Message ids: the broker's offsetMsgId and the client's UNIQ_KEY (docs/store-format.md, "Message ids").

offsetMsgId = STOREHOST address + port (i32) + PHYSICALOFFSET (i64): 16 bytes (IPv4) / 28 (IPv6),
upper-case hex. UNIQ_KEY = client IP (4|16) + pid (i16) + classloader hash (i32) + ms since month
start (i32) + counter (i16).
"""
from construct import Bytes, Int16sb, Int16ub, Int32sb, Int64sb, Struct

OffsetMsgIdV4 = Struct(
    "store_host_address" / Bytes(4) * "STOREHOST address",
    "store_host_port" / Int32sb * "STOREHOST port",
    "physical_offset" / Int64sb * "commitlog offset of the record",
)
OffsetMsgIdV6 = Struct(
    "store_host_address" / Bytes(16) * "STOREHOST IPv6 address",
    "store_host_port" / Int32sb * "STOREHOST port",
    "physical_offset" / Int64sb * "commitlog offset of the record",
)


def _uniq(ip_len):
    return Struct(
        "ip" / Bytes(ip_len) * "client IP (or 4 'fake' bytes of currentTimeMillis)",
        "pid" / Int16ub * "(short) pid of the producer process",
        "class_loader_hash" / Int32sb * "MessageClientIDSetter class loader hashCode",
        "ms_since_month_start" / Int32sb * "ms since the start of the month (producer's local time zone)",
        "counter" / Int16sb * "per-process counter (wraps)",
    )


UniqKeyV4 = _uniq(4)
UniqKeyV6 = _uniq(16)
