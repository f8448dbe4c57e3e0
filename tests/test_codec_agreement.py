"""The fast codecs (struct formats / numpy dtypes derived from the Construct declarations) agree with
interpreted Construct on every broker-written file: the real-world corpus and the oracle fixtures."""
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, real_world_files
from rmqctl.formats import batch_consumequeue as bcqf, checkpoint as ckf, commitlog as cl
from rmqctl.formats import consumequeue as cqf, index as ixf, kind_for_path, timer as tf
from rmqctl.formats._derive import field_names, numpy_dtype, struct_format
from rmqctl.scan import FileWalk


def store_files() -> list[Path]:
    out = [p for p in real_world_files()]
    stores = FIXTURES / "stores"
    if stores.is_dir():
        out += sorted(p for p in stores.rglob("*") if p.is_file() and p.name != "manifest.json")
    return out


def by_kind(kind):
    return [p for p in store_files() if kind_for_path(p) == kind]


def _ids(paths):
    return [str(p).split("/real-world/")[-1].split("/fixtures/")[-1] for p in paths]


COMMITLOGS = by_kind("commitlog")


def test_corpus_has_broker_files():
    assert len(COMMITLOGS) >= 10
    assert by_kind("checkpoint")


@pytest.mark.parametrize("path", COMMITLOGS, ids=_ids(COMMITLOGS))
def test_commitlog_records_agree(path):
    data = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        w = FileWalk(fd, int(path.name), len(data), check_phys=False)
        recs = list(w)
    finally:
        os.close(fd)
    for r in recs:
        pos = r.offset - int(path.name)
        c = cl.MessageRecord.parse(data[pos:pos + r.total_size])
        for f in ("total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
                  "sys_flag", "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset",
                  "body_length"):
            assert getattr(r, f) == c[f], f
        assert (r.born_host_raw, r.born_port) == (c.born_host.address, c.born_host.port)
        assert (r.store_host_raw, r.store_port) == (c.store_host.address, c.store_host.port)
        assert r.body == c.body and r.topic.encode() == c.topic and r.properties_raw == c.properties
    if w.stop.kind == "blank":
        b = cl.BlankRecord.parse(data[w.stop.pos:w.stop.pos + 8])
        assert b.total_size == w.stop.size


def _fixed_units(kind, decl):
    files = by_kind(kind)
    return [(p, decl) for p in files]


UNIT_FILES = (_fixed_units("consumequeue", cqf.ConsumeQueueUnit) + _fixed_units("batchconsumequeue",
              bcqf.BatchConsumeQueueUnit) + _fixed_units("timerlog", tf.TimerLogUnit))


@pytest.mark.parametrize("path,decl", UNIT_FILES, ids=_ids([p for p, _ in UNIT_FILES]))
def test_unit_files_agree(path, decl):
    data = path.read_bytes()
    usize = decl.sizeof()
    n = min(len(data) // usize, 2000)
    codec = struct.Struct(struct_format(decl))
    arr = np.frombuffer(data[:n * usize], dtype=numpy_dtype(decl))
    names = field_names(decl)
    for i in range(n):
        c = decl.parse(data[i * usize:(i + 1) * usize])
        s = codec.unpack_from(data, i * usize)
        assert tuple(c[k] for k in names) == s
        assert tuple(int(arr[i][k]) for k in names) == s


INDEX_FILES = by_kind("index")


def index_geometry(path: Path):
    """(slots, items) an index file was written with: the fixture manifest, else the 1:4 inference."""
    import json

    from rmqctl.store.config import StoreConfig, infer

    for parent in path.parents:
        m = parent / "manifest.json"
        if m.is_file():
            doc = json.loads(m.read_text())
            if isinstance(doc, dict) and "store_config" in doc:
                sc = doc["store_config"]
                return sc["maxHashSlotNum"], sc["maxIndexNum"]
    cfg = infer(StoreConfig(), path.parent.parent)
    return cfg.hash_slot_num, cfg.index_num


@pytest.mark.parametrize("path", INDEX_FILES, ids=_ids(INDEX_FILES))
def test_index_header_and_items_agree(path):
    data = path.read_bytes()
    slots, items = index_geometry(path)
    assert len(data) == ixf.file_size(slots, items)
    h = ixf.IndexHeader.parse(data[:40])
    assert tuple(h[k] for k in field_names(ixf.IndexHeader)) == struct.unpack(struct_format(ixf.IndexHeader),
                                                                               data[:40])
    assert 1 <= h.index_count <= items
    slot = struct.Struct(struct_format(ixf.IndexSlot))
    for s in range(slots):
        assert slot.unpack_from(data, 40 + 4 * s)[0] == ixf.IndexSlot.parse(data[40 + 4 * s:44 + 4 * s]).item
    item = struct.Struct(struct_format(ixf.IndexItem))
    base = 40 + 4 * slots
    arr = np.frombuffer(data[base:base + 20 * h.index_count], dtype=numpy_dtype(ixf.IndexItem))
    for n in range(1, h.index_count):
        c = ixf.IndexItem.parse(data[base + 20 * n:base + 20 * n + 20])
        s = item.unpack_from(data, base + 20 * n)
        assert tuple(c[k] for k in field_names(ixf.IndexItem)) == s == tuple(int(x) for x in arr[n])


CHECKPOINTS = by_kind("checkpoint") + by_kind("timercheck")


@pytest.mark.parametrize("path", CHECKPOINTS, ids=_ids(CHECKPOINTS))
def test_checkpoints_agree(path):
    data = path.read_bytes()
    decl = ckf.Checkpoint if kind_for_path(path) == "checkpoint" else tf.TimerCheckpoint
    if len(data) < decl.sizeof():
        pytest.fail(f"{path}: {len(data)} bytes") if kind_for_path(path) == "checkpoint" else None
        return
    c = decl.parse(data[:decl.sizeof()])
    assert tuple(c[k] for k in field_names(decl)) == struct.unpack(struct_format(decl), data[:decl.sizeof()])
    assert tuple(int(x) for x in np.frombuffer(data[:decl.sizeof()], dtype=numpy_dtype(decl))[0]) == \
        struct.unpack(struct_format(decl), data[:decl.sizeof()])
