"""The properties string of a message record: name\\x01value\\x02 pairs (MessageDecoder.string2messageProperties).

Parsing mirrors Java exactly: split on \\x02 (a final segment without a trailing \\x02 counts, so the
pre-4.9.2 trailing separator and its absence both parse); in each segment the FIRST \\x01 splits name
from value; empty names or values are dropped; later duplicates win; a value may contain \\x01.
"""
from construct import Adapter, GreedyBytes

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
CRC32_PROPERTY = "__CRC32#"
CRC32_RESERVED_LEN = len(CRC32_PROPERTY) + 1 + 10 + 1  # 20

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
DUP_INFO = "DUP_INFO"
KEY_SEPARATOR = " "


def parse_properties(raw: bytes) -> dict:
    """Decode a properties field to an ordered dict exactly as the broker does (invalid UTF-8 -> U+FFFD)."""
    text = raw.decode("utf-8", errors="replace") if raw else ""
    out: dict[str, str] = {}
    if not text:
        return out
    for seg in text.split(PROPERTY_SEPARATOR):
        name, sep, value = seg.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out.pop(name, None)
            out[name] = value
    return out


def encode_properties(props: dict) -> bytes:
    """MessageDecoder.messageProperties2String: every entry followed by \\x02 (order as given)."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()
                   if v is not None).encode("utf-8")


def crc32_property_value(crc: int) -> str:
    """The 10 digits of __CRC32#: least-significant digit first, padded with '0' (MessageDecoder.createCrc32)."""
    digits = []
    for _ in range(10):
        digits.append(chr(ord("0") + crc % 10) if crc > 0 else "0")
        crc //= 10
    return "".join(digits)


def crc32_from_property(value: str) -> int:
    """Inverse of crc32_property_value (the reader sums digit[i] * 10**i)."""
    return sum((ord(ch) - 48) * 10 ** i for i, ch in enumerate(value))


class PropertiesAdapter(Adapter):
    def _decode(self, obj, context, path):
        return parse_properties(obj)

    def _encode(self, obj, context, path):
        return encode_properties(obj)


Properties = PropertiesAdapter(GreedyBytes)
"""Construct view of a properties field (use inside a FixedSized/Prefixed of PROPERTIESLENGTH)."""
