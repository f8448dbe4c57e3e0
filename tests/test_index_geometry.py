"""Index geometry (maxHashSlotNum / maxIndexNum) taken from the index files themselves, judged by the real broker:
the `index-geometry*` fixtures were written by RocketMQ 4.9.7 / 5.3.3 with geometries that are neither the
default nor the 4:1 ratio; without --broker-config verify must be clean and key queries must return what the
broker's IndexService.queryOffset returned (manifest broker_view.key_queries)."""
from __future__ import annotations

import json
import shutil

import pytest

from oracle_helpers import fixture_dirs, load_manifest
from rmqctl.formats import index as ixf
from rmqctl.query import QueryEngine
from rmqctl.store.config import StoreConfig
from rmqctl.store.index import HEADER, solve_geometry
from rmqctl.store.layout import Store

GEO = [d for d in fixture_dirs() if d.name.startswith("index-geometry")]
ALL = [d for d in fixture_dirs() if any((d / "store" / "index").glob("*"))]


def _geometry(d):
    sc = load_manifest(d)["store_config"]
    return sc["maxHashSlotNum"], sc["maxIndexNum"]


def test_geometry_fixtures_are_unusual():
    assert {d.name for d in GEO} >= {"index-geometry-v4", "index-geometry-v5", "index-geometry-sparse-v5"}
    for d in GEO:
        slots, items = _geometry(d)
        assert (slots, items) != (ixf.DEFAULT_HASH_SLOT_NUM, ixf.DEFAULT_INDEX_NUM) and items != 4 * slots
        files = sorted((d / "store" / "index").iterdir())
        counts = [HEADER.unpack(f.read_bytes()[:40])[5] for f in files]
        assert counts[0] == items and 1 < counts[-1] < items, counts   # full files and a partial last one


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_every_written_index_file_tells_its_geometry(d):
    """Each file alone, with no hint (a partial file is solved from its slot table and items)."""
    want = _geometry(d)
    for f in sorted((d / "store" / "index").iterdir()):
        if HEADER.unpack(f.read_bytes()[:40])[5] > 1:
            assert solve_geometry(f) == want, f


@pytest.mark.parametrize("d", GEO, ids=lambda d: d.name)
def test_verify_clean_without_broker_config(cli, d):
    assert Store.open(d / "store").config.index_geometry_files == _geometry(d)
    code, out, err = cli("verify", d / "store")
    assert (code, out) == (0, ""), out + err


@pytest.mark.parametrize("d", GEO, ids=lambda d: d.name)
def test_key_queries_match_broker_without_broker_config(cli, d):
    store, bv = Store.open(d / "store"), load_manifest(d)["broker_view"]
    assert (store.config.hash_slot_num, store.config.index_num) == _geometry(d)
    found = 0
    for kq in bv["key_queries"]:
        with QueryEngine(store) as eng:
            list(eng.by_key(kq["topic"], kq["key"], kq["begin"], kq["end"], kq["max_num"]))
            assert eng.stats.raw_phys_offsets == kq["phys_offsets"], kq
            assert not eng.problems
        found += bool(kq["phys_offsets"])
    assert found >= 10
    # and through the CLI: a key whose message lies in a full (not the last) index file
    kq = next(q for q in bv["key_queries"] if q["key"] == "g-3" or q["key"] == "s-3")
    code, out, err = cli("query", d / "store", "--topic", kq["topic"], "--key", kq["key"], "--json")
    assert code == 0 and "no message matched" not in err, err
    assert [json.loads(x)["physical_offset"] for x in out.splitlines()] == kq["messages_phys_offsets"]


def test_config_mismatch_said_once(cli, tmp_path):
    d = next(d for d in GEO if d.name == "index-geometry-v5")
    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=32\nmaxIndexNum=128\n")
    code, out, err = cli("verify", "--broker-config", conf, "--json", d / "store")
    fs = [f for f in json.loads(out)["findings"] if f["severity"] != "info"]
    assert code == 4 and [f["check"] for f in fs] == ["index.geometry"], fs
    assert "13" in fs[0]["actual"] and "32" in fs[0]["expected"]


def test_config_given_is_used_by_query(tmp_path):
    d = next(d for d in GEO if d.name == "index-geometry-v5")
    cfg = Store.open(d / "store", StoreConfig().with_values({"maxHashSlotNum": 32, "maxIndexNum": 128})).config
    assert (cfg.hash_slot_num, cfg.index_num, cfg.index_geometry_files) == (32, 128, (13, 40))


def test_damaged_file_falls_back(tmp_path):
    """A file whose content no geometry explains is not given a made-up one."""
    d = next(d for d in GEO if d.name == "index-geometry-v5")
    f = sorted((d / "store" / "index").iterdir())[0]
    bad = tmp_path / f.name
    shutil.copy(f, bad)
    data = bytearray(bad.read_bytes())
    data[40:40 + 4 * 13] = b"\x7f" * (4 * 13)   # slot table overwritten
    bad.write_bytes(bytes(data))
    assert solve_geometry(f) == (13, 40)
    assert solve_geometry(bad) is None


@pytest.mark.parametrize("d", GEO, ids=lambda d: d.name)
def test_rebuild_index_without_config_restores_broker_bytes(cli, tmp_path, d):
    """No-op on the intact store; after the first (full) file is damaged, the broker's bytes come back."""
    import faultlib as F

    root = F.copy_store(d / "store", tmp_path / "store")
    original = F.tree_hashes(root)
    code, out, err = cli("rebuild", "index", "--json", root)
    assert code == 0 and json.loads(out)["actions"] == [], out + err
    first = sorted((root / "index").iterdir())[0]
    with open(first, "r+b") as f:
        f.seek(40)
        f.write(b"\xff" * 20)
    assert F.tree_hashes(root) != original
    code, out, err = cli("rebuild", "index", "--json", root)
    assert code == 1, out + err
    assert F.tree_hashes(root) == original


def test_rebuild_without_index_files_says_which_geometry_it_uses(cli, tmp_path):
    import faultlib as F

    d = next(d for d in GEO if d.name == "index-geometry-v5")
    root = F.copy_store(d / "store", tmp_path / "store")
    shutil.rmtree(root / "index")
    code, out, err = cli("rebuild", "index", "--dry-run", "--json", root)
    notes = json.loads(out)["notes"]
    # 4: work to do
    assert code == 4 and any("maxHashSlotNum 5000000" in n and "--config" in n for n in notes), out + err


def test_geometry_never_opens_a_fifo(tmp_path):
    """Geometry is read at every store open: a FIFO among the index files must not block it."""
    import os
    import subprocess
    import sys

    import faultlib as F

    d = next(d for d in GEO if d.name == "index-geometry-v5")
    root = F.copy_store(d / "store", tmp_path / "store")
    for f in (root / "index").iterdir():
        f.unlink()
    os.mkfifo(root / "index" / "20991231000000000")
    code = ("import sys; from rmqctl.store.layout import Store; "
            "print(Store.open(sys.argv[1]).config.index_geometry_files)")
    r = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stderr
