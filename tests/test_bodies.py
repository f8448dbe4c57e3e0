"""Compressed message bodies (SYSFLAG 0x1; 5.x type bits 0x700: lz4, zstd, zlib) decompressed in dump, query
and export, judged against the broker's own decoder (MessageDecoder.decode with deCompressBody)."""
from __future__ import annotations

import base64
import json
import os
import sys
import zlib
from pathlib import Path

import pytest
from conftest import run_cli as _run_cli
from oracle_helpers import oracle

from rmqctl.bodies import body_of, compression_of
from rmqctl.scan import FileWalk

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "fixtures" / "stores"
CODEC = ["compressed-v4", "compressed-v5", "compressed-types-v4", "compressed-types-v5"]


def run_cli(*args):
    r = _run_cli(*args)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def records(name):
    """Every record of a fixture's commitlog, through the scan kernel."""
    out = []
    for p in sorted((STORES / name / "store" / "commitlog").iterdir()):
        fd = os.open(p, os.O_RDONLY)
        try:
            for r in FileWalk(fd, int(p.name), os.fstat(fd).st_size, 0, check_crc=True, check_phys=True,
                              path=str(p)):
                out.append((r.offset, r.sys_flag, r.body, r.raw))
        finally:
            os.close(fd)
    return out


def test_compression_type_bits():
    # MessageSysFlag: COMPRESSED_FLAG 0x1; CompressionType.findByValue: 0 and 3 zlib, 1 lz4, 2 zstd, else unknown
    assert compression_of(0x0) is None and compression_of(0x300) is None     # type bits without the flag
    assert [compression_of(f) for f in (0x1, 0x101, 0x201, 0x301, 0x401, 0x701)] == \
        ["zlib", "lz4", "zstd", "zlib", "unknown(4)", "unknown(7)"]


def test_types_fixture_holds_every_case():
    flags = [f for _, f, _, _ in records("compressed-types-v5")]
    assert {0x101, 0x201, 0x301, 0x401, 0x0} <= set(flags)


def test_broker_bytes_decompress():
    by_tag = {}
    for _, flag, body, _ in records("compressed-types-v5"):
        by_tag.setdefault(flag, []).append(body_of(body, flag))
    assert all(b.decompressed and b.data.startswith(b"lz4 frame ") for b in by_tag[0x101][:2])
    assert all(b.decompressed and b.data.startswith(b"zstd frame ") and len(b.data) == 7000
               for b in by_tag[0x201][:2])
    # the last lz4/zstd records are streams cut in half: a note, the stored bytes, no exception
    for flag in (0x101, 0x201):
        bad = by_tag[flag][-1]
        assert not bad.decompressed and "corrupt" in bad.note
    unknown = by_tag[0x401][0]
    assert not unknown.decompressed and "unknown compression type 4" in unknown.note


def test_raw_keeps_stored_bytes_and_garbage_never_raises():
    stored = zlib.compress(b"x" * 1000)
    assert body_of(stored, 0x1).data == b"x" * 1000
    assert body_of(stored, 0x1, raw=True).data == stored
    for flag in (0x1, 0x101, 0x201, 0x301):
        for junk in (b"", b"\x00", os.urandom(64), stored[:5]):
            b = body_of(junk, flag)
            assert b.decompressed or b.note


def test_missing_module_is_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails as if the extra were not installed
    body = next(b for _, f, b, _ in records("compressed-types-v5") if f == 0x201)
    got = body_of(body, 0x201)
    assert not got.decompressed and "rmqctl[compression]" in got.note and got.data == body


@pytest.mark.oracle
@pytest.mark.parametrize("name", CODEC)
def test_bodies_equal_broker_decoder(name, tmp_path):
    """rmqctl's decompressed body == MessageDecoder.decode(buf, true, deCompressBody=true) of the same record;
    where the broker's decoder fails, rmqctl gives a note and the stored bytes."""
    recs = records(name)
    req = tmp_path / "records.json"
    req.write_text(json.dumps({"records": [base64.b64encode(raw).decode() for *_, raw in recs]}))
    got = oracle(name[-2:], "decode", "--records", req)["results"]
    assert len(got) == len(recs)
    compared = failed = 0
    for (off, flag, body, _), broker in zip(recs, got):
        mine = body_of(body, flag)
        if "error" in broker:
            failed += 1
            assert not mine.decompressed and mine.note, (off, broker)
            assert mine.data == body
        else:
            compared += flag & 1
            assert mine.data == base64.b64decode(broker["body_b64"]), off
    assert compared >= 3
    if name.startswith("compressed-types"):
        assert failed == 3          # unknown type 4, cut lz4, cut zstd


def test_dump_query_decompress_and_raw_body():
    log = STORES / "compressed-types-v5" / "store" / "commitlog" / "00000000000000000000"
    r = run_cli("dump", "--json", log)
    assert r.returncode == 0, r.stderr
    msgs = [json.loads(x) for x in r.stdout.splitlines() if '"kind":"message"' in x]
    lz4 = next(m for m in msgs if m["sys_flag"] == 0x101)
    assert lz4["body_compression"] == "lz4" and lz4["body_decompressed"] is True
    assert base64.b64decode(lz4["body"]).startswith(b"lz4 frame 0") and lz4["body_decompressed_length"] == 6000
    notes = [m["body_note"] for m in msgs if "body_note" in m]
    assert len(notes) == 3
    plain = next(m for m in msgs if m["sys_flag"] == 0)
    assert "body_compression" not in plain
    raw = [json.loads(x) for x in run_cli("dump", "--json", "--raw-body", log).stdout.splitlines()
           if '"kind":"message"' in x]
    assert base64.b64decode(raw[0]["body"])[:4] == bytes.fromhex("04224d18")     # the LZ4 frame magic
    assert raw[0]["body_decompressed"] is False and "body_note" not in raw[0]
    t = run_cli("dump", log, "--count", 9)
    assert t.returncode == 0 and "body[60 lz4 -> 6000] lz4 frame 0" in t.stdout
    assert t.stdout.count("  note: ") == 3 and "Traceback" not in t.stderr
    q = run_cli("query", STORES / "compressed-types-v5" / "store", "--topic", "CodecTopic", "--key", "zstd-1",
                "--json")
    assert q.returncode == 0, q.stderr
    (m,) = [json.loads(x) for x in q.stdout.splitlines()]
    assert base64.b64decode(m["body"]).startswith(b"zstd frame 1") and m["body_compression"] == "zstd"


def test_export_rows_decompress():
    from rmqctl.spark.dataset import local_batches, local_messages

    store = STORES / "compressed-types-v5" / "store"
    rows = list(local_messages(store, body=True))
    batch = [r for rb in local_batches(store, body=True) for r in rb.to_pylist()]
    raw = [r for rb in local_batches(store, body="raw") for r in rb.to_pylist()]
    assert [(r[-2], r[-1]) for r in rows] == [(r["body"], r["body_note"]) for r in batch]
    assert batch[0]["body"].startswith(b"lz4 frame 0") and raw[0]["body"][:4] == bytes.fromhex("04224d18")
    assert sum(r["body_note"] is not None for r in batch) == 3
    assert all(r["body_note"] is None for r in raw)


def test_output_bound_and_concatenated_frames(monkeypatch):
    import lz4.frame
    import zstandard

    from rmqctl import bodies

    # LZ4FrameInputStream / ZstdInputStream read frame after frame to the end of the body
    two = zstandard.ZstdCompressor().compress(b"a" * 3000) + zstandard.ZstdCompressor().compress(b"b" * 10)
    assert body_of(two, 0x201).data == b"a" * 3000 + b"b" * 10
    two = lz4.frame.compress(b"a" * 3000) + lz4.frame.compress(b"b" * 10)
    assert body_of(two, 0x101).data == b"a" * 3000 + b"b" * 10
    # a body inflating past the bound is a note, not a memory blow-up
    monkeypatch.setattr(bodies, "MAX_BODY", 10_000)
    for flag, packed in ((0x1, zlib.compress(bytes(1 << 20))), (0x101, lz4.frame.compress(bytes(1 << 20))),
                         (0x201, zstandard.ZstdCompressor().compress(bytes(1 << 20)))):
        b = body_of(packed, flag)
        assert not b.decompressed and "more than 10000 bytes" in b.note and b.data == packed
