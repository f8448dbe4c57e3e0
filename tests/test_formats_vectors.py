"""The spec's test vectors (docs/store-format.md, Worked example), which were executed against the real Java classes,
decoded by both the Construct declarations and the derived fast codecs."""
import os
import struct
import zlib

import crcmod
import pytest

from rmqctl.formats import commitlog as cl, index as ix
from rmqctl.formats.properties import crc32_property_value, parse_properties
from rmqctl.render import offset_msg_id
from rmqctl.scan import FileWalk

EX1 = bytes.fromhex(
    "0000007BDAA320A73610A686000000010000000000000000000000000000000000000000000000000000018BCFE56800C0A8010A0000D431"
    "0000018BCFE5687BC0A8011400002A9F0000000000000000000000000000000568656C6C6F09546F70696354657374001254414753015461"
    "6741024B455953016B3102")
EX2 = bytes.fromhex(
    "000000C8DAA320A73610A68600000001000000000000000000000001000000000000007B000000100000018BCFE57D7C20010DB800000000"
    "00000000000000010000D4310000018BCFE57DF7C0A8011400002A9F0000000000000000000000000000000568656C6C6F09546F70696354"
    "6573740053554E49515F4B455901433041383031304133303339314236443335383630303030303345383030303102544147530154616741"
    "024B455953016B31206B32025F5F435243333223013636353439353435343002")


def walk_bytes(tmp_path, data):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        w = FileWalk(fd, 0, len(data))
        return list(w), w.stop
    finally:
        os.close(fd)


def test_example1_construct():
    r = cl.MessageRecord.parse(EX1)
    assert (r.total_size, r.queue_id, r.queue_offset, r.physical_offset, r.sys_flag) == (123, 1, 0, 0, 0)
    assert (r.born_timestamp, r.store_timestamp) == (1700000000000, 1700000000123)
    assert r.born_host.address == bytes([192, 168, 1, 10]) and r.born_host.port == 54321
    assert r.topic == b"TopicTest" and r.body == b"hello"
    assert list(parse_properties(r.properties).items()) == [("TAGS", "TagA"), ("KEYS", "k1")]
    assert cl.fixed_overhead(False, False, False) == 91


def test_examples_fast_path_agrees(tmp_path):
    recs, stop = walk_bytes(tmp_path, EX1 + EX2 + bytes(64))
    assert stop.kind == "zeros" and stop.offset == 323
    a, b = recs
    assert a.born_host == "192.168.1.10:54321" and a.store_host == "192.168.1.20:10911"
    assert b.born_host == "[2001:db8::1]:54321" and b.sys_flag == 0x10
    assert b.prop_crc is True and b.properties["__CRC32#"] == "6654954540"
    assert offset_msg_id(a.store_host_raw, a.store_port, a.physical_offset) == "C0A8011400002A9F0000000000000000"
    assert offset_msg_id(b.store_host_raw, b.store_port, b.physical_offset) == "C0A8011400002A9F000000000000007B"
    for rec, raw in ((a, EX1), (b, EX2)):
        c = cl.MessageRecord.parse(raw)
        for f in ("total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
                  "sys_flag", "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset",
                  "body_length"):
            assert getattr(rec, f) == c[f], f
        assert rec.body == c.body and rec.topic.encode() == c.topic and rec.properties_raw == c.properties


def test_crc_values_match_an_independent_crc():
    crc32 = crcmod.predefined.mkCrcFun("crc-32")
    assert zlib.crc32(b"hello") & 0x7FFFFFFF == 907060870 == crc32(b"hello") & 0x7FFFFFFF
    assert crc32(EX2[:180]) & 0x7FFFFFFF == 454594566
    assert crc32_property_value(454594566) == "6654954540"


def test_java_hashes():
    assert ix.java_string_hash("TagA") == 2598919
    assert ix.java_string_hash("payment") == -786681338
    assert ix.java_string_hash("TopicTest#k1") == 2746024
    assert ix.java_string_hash("polygenelubricants") == -2147483648
    assert ix.key_hash("TopicTest", "C0A8010A30391B6D3586000003E80001") == 2134362993
    assert ix.java_string_hash("Aa") == ix.java_string_hash("BB")
    assert ix.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # surrogate pair: two UTF-16 code units


@pytest.mark.parametrize("flip", range(0, 123, 7))
def test_any_flipped_byte_never_verifies_clean(tmp_path, flip):
    data = bytearray(EX1 + bytes(16))
    data[flip] ^= 0x40
    recs, stop = walk_bytes(tmp_path, bytes(data))
    # either the record is rejected, or (a flip in a field no check covers) it decodes to different values
    if recs:
        r = recs[0]
        changed = (r.queue_id, r.flag, r.queue_offset, r.born_timestamp, r.store_timestamp, r.reconsume_times,
                   r.born_host, r.store_host, r.prepared_transaction_offset, r.properties, r.body_crc, r.topic)
        assert changed != (1, 0, 0, 1700000000000, 1700000000123, 0, "192.168.1.10:54321",
                           "192.168.1.20:10911", 0, {"TAGS": "TagA", "KEYS": "k1"}, 907060870, "TopicTest")
    else:
        assert not stop.normal


def test_crc_zero_is_valid(tmp_path):
    # a body whose masked CRC is 0 must verify (faults R16 / F05)
    body = _body_with_zero_crc()
    topic, props = b"T", b""
    total = 91 + len(body) + len(topic) + len(props)
    rec = struct.pack(">iiiiiqqiq4siq4siiqi", total, cl.MESSAGE_MAGIC_CODE_V1, 0, 0, 0, 0, 0, 0, 1, b"\x7f\0\0\1", 1,
                      2, b"\x7f\0\0\1", 2, 0, 0, len(body)) + body + bytes([len(topic)]) + topic + struct.pack(">h", 0)
    recs, stop = walk_bytes(tmp_path, rec + bytes(8))
    assert len(recs) == 1 and recs[0].body_crc == 0 and recs[0].crc_ok


def _body_with_zero_crc():
    base = b"rmqctl-crc-zero-"
    fix = _crc_fixup(base)
    assert fix is not None
    return base + fix


def _crc_fixup(data: bytes):
    """4 bytes that make zlib.crc32(data + fix) == 0 (CRC forging via the reversed table)."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    rev = {t >> 24: i for i, t in enumerate(table)}
    crc = zlib.crc32(data) ^ 0xFFFFFFFF
    target = 0 ^ 0xFFFFFFFF
    idx = []
    for _ in range(4):
        i = rev[target >> 24]
        idx.append(i)
        target = ((target ^ table[i]) << 8) & 0xFFFFFFFF
    fix = bytearray()
    for i in reversed(idx):
        b = (crc ^ i) & 0xFF
        fix.append(b)
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return bytes(fix) if zlib.crc32(data + bytes(fix)) == 0 else None
