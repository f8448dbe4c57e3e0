"""rmqctl query on small stores written by tests/test_query_build.py (several index files, hash
collisions, damaged files), through the library and the CLI (exit codes, stdout/stderr split)."""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import run_cli  # noqa: E402
from test_query_build import StoreBuilder, jhash  # noqa: E402

from rmqctl.errors import UsageError  # noqa: E402
from rmqctl.query import QueryEngine, parse_msg_id, parse_time  # noqa: E402
from rmqctl.store.config import StoreConfig  # noqa: E402
from rmqctl.store.layout import Store  # noqa: E402
from rmqctl.store.timesearch import CommitLogTimes, load_queue, offset_in_queue_by_time  # noqa: E402

T0 = 1700000000000


def build(tmp_path, n=40, **kw):
    b = StoreBuilder(tmp_path / "store", cl_size=2048, cq_units=8, slots=8, items=6, **kw)
    for i in range(n):
        b.put("T", i % 2, T0 + i * 700, body=f"m{i}".encode(),
              props={"TAGS": "a", "KEYS": ["Aa", "BB", f"k{i}"][i % 3], "UNIQ_KEY": f"U{i:031d}"})
    b.write()
    (tmp_path / "cfg.json").write_text(json.dumps(b.config))
    return b


def open_store(tmp_path, b):
    return Store.open(b.root, StoreConfig().with_values(b.config))


def test_java_hash_collision_of_aa_and_bb():
    assert jhash("T#Aa") == jhash("T#BB")


def test_key_query_over_many_index_files_drops_collisions(tmp_path):
    b = build(tmp_path)
    assert len(b.index) > 5
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "Aa")]
        raw = q.stats.raw_phys_offsets
    aa = [m[0] for m in b.msgs if m[6]["KEYS"] == "Aa"]
    both = [m[0] for m in b.msgs if m[6]["KEYS"] in ("Aa", "BB")]
    assert got == aa
    assert raw == sorted(both, reverse=True)          # newest first, collisions included, like the broker
    assert q.stats.collisions == len(both) - len(aa)
    assert len(q.stats.index_files_searched) == len(b.index)


def test_key_query_limit_is_the_brokers_64(tmp_path):
    b = StoreBuilder(tmp_path / "store", cl_size=1 << 16, cq_units=64, slots=16, items=64)
    for i in range(100):
        b.put("T", 0, T0 + i * 10, props={"KEYS": "same"})
    b.write()
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "same", max_num=500)]
    assert len(got) == 64 and got == sorted(m[0] for m in b.msgs)[-64:]
    assert any("at most 64" in n for n in q.notes)
    with QueryEngine(open_store(tmp_path, b)) as q:
        assert len(list(q.scan_keys("T", "same", max_num=1000))) == 100


def test_key_time_window_uses_index_seconds(tmp_path):
    b = build(tmp_path)
    with QueryEngine(open_store(tmp_path, b)) as q:
        ts = {m[0]: m[5] for m in b.msgs}
        begin = T0 + 20 * 700
        got = [r.offset for r in q.by_key("T", "Aa", begin=begin)]
    assert got and all(ts[o] >= begin - 1000 for o in got)
    assert got[-1] == [m[0] for m in b.msgs if m[6]["KEYS"] == "Aa"][-1]


def test_uniq_key(tmp_path):
    b = build(tmp_path)
    with QueryEngine(open_store(tmp_path, b)) as q:
        (r,) = list(q.by_key("T", f"U{7:031d}", uniq=True))
    assert r.queue_offset == 3 and r.queue_id == 1


def test_fallback_scan_without_index(tmp_path):
    b = build(tmp_path)
    for p in (b.root / "index").iterdir():
        p.unlink()
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "BB")]
    assert got == [m[0] for m in b.msgs if m[6]["KEYS"] == "BB"]
    assert any("no index files" in n for n in q.notes) and not q.problems


def test_looping_index_chain_is_damage_and_falls_back(tmp_path):
    b = build(tmp_path)
    last = sorted((b.root / "index").iterdir())[-1]
    data = bytearray(last.read_bytes())
    assert struct.unpack_from(">i", data, 36)[0] >= 3       # at least items 1 and 2
    slot = abs(jhash("T#kx")) % 8
    struct.pack_into(">i", data, 40 + 4 * slot, 1)           # slot -> item 1 -> item 2 -> item 1 ...
    struct.pack_into(">i", data, 40 + 32 + 20 * 1 + 16, 2)
    struct.pack_into(">i", data, 40 + 32 + 20 * 2 + 16, 1)
    last.write_bytes(bytes(data))
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "kx")]
    assert got == [] and any("loops" in p for p in q.problems)
    assert any("scanning the commitlog" in n for n in q.notes)


def test_damaged_header_falls_back(tmp_path):
    b = build(tmp_path)
    first = sorted((b.root / "index").iterdir())[0]
    data = bytearray(first.read_bytes())
    struct.pack_into(">i", data, 36, 10_000)          # indexCount > maxIndexNum
    first.write_bytes(bytes(data))
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "Aa")]
    assert got == [m[0] for m in b.msgs if m[6]["KEYS"] == "Aa"]
    assert q.problems


def test_unindexed_tail_is_scanned(tmp_path):
    b = StoreBuilder(tmp_path / "store", cl_size=4096, cq_units=8, slots=8, items=64)
    for i in range(10):
        b.put("T", 0, T0 + i, props={"KEYS": "k"}, index=i < 6)
    b.write(abort=True)
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_key("T", "k")]
    assert got == [m[0] for m in b.msgs]
    assert any("not indexed yet" in n for n in q.notes)
    assert any("abort file present" in n for n in q.notes)


def brute_first_at_or_after(b, topic, qid, t):
    units = [m for m in b.msgs if m[2] == topic and m[3] == qid]
    for m in units:
        if m[5] >= t:
            return m[4]
    return len(units)


def test_time_search_is_first_at_or_after_and_binary(tmp_path):
    b = StoreBuilder(tmp_path / "store", cl_size=1 << 20, cq_units=100, slots=8, items=16)
    for i in range(2000):
        b.put("T", 0, T0 + (i // 3) * 10, index=False)      # runs of equal store times
    b.write()
    store = open_store(tmp_path, b)
    v = load_queue(store, "T", 0)
    assert (v.min_offset, v.max_offset) == (0, 2000) and len(v.files) == 20
    pick = CommitLogTimes(store)
    for t in [T0 - 1, T0, T0 + 1, T0 + 5, T0 + 10, T0 + 3330, T0 + 6660, T0 + 6661, T0 + 99999]:
        v.reads = 0
        got = offset_in_queue_by_time(v, t, pick)
        assert got == brute_first_at_or_after(b, "T", 0, t), t
        assert v.reads < 60


def test_time_search_v4_is_nearest(tmp_path):
    b = StoreBuilder(tmp_path / "store", cl_size=1 << 16, cq_units=100, slots=8, items=16)
    for i in range(10):
        b.put("T", 0, T0 + i * 100, index=False)
    b.write()
    store = open_store(tmp_path, b)
    v = load_queue(store, "T", 0)
    pick = CommitLogTimes(store)
    assert offset_in_queue_by_time(v, T0 + 140, pick, version=4, mtime=lambda p: 2**62) == 1
    assert offset_in_queue_by_time(v, T0 + 160, pick, version=4, mtime=lambda p: 2**62) == 2
    assert offset_in_queue_by_time(v, T0 + 140, pick) == 2


def test_time_range_merges_queues(tmp_path):
    b = build(tmp_path)
    with QueryEngine(open_store(tmp_path, b)) as q:
        got = [r.offset for r in q.by_time_range("T", T0 + 3500, T0 + 10500)]
    assert got == [m[0] for m in b.msgs if T0 + 3500 <= m[5] <= T0 + 10500]


def test_parse_time_and_ids():
    assert parse_time("1700000000123") == 1700000000123
    assert parse_time("2023-11-14T22:13:20.123Z") == 1700000000123
    assert parse_time("2023-11-14T23:13:20.123+01:00") == 1700000000123
    with pytest.raises(UsageError):
        parse_time("yesterday")
    assert parse_msg_id("C0A8011400002A9F000000000000007B") == (bytes([192, 168, 1, 20]), 10911, 123)
    with pytest.raises(UsageError):
        parse_msg_id("XYZ")


# --- CLI ------------------------------------------------------------------------------------------
def q(cli, tmp_path, b, *args):
    return cli("query", b.root, "--broker-config", tmp_path / "cfg.json", *args)


def test_cli_key_json_and_collision_note(cli, tmp_path):
    b = build(tmp_path)
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--key", "BB", "--json", "--body", "text")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and rows and all(r["properties"]["KEYS"] == "BB" for r in rows)
    assert rows[0]["body"].startswith("m")
    assert "collisions" in err


def test_cli_no_match_is_exit_0_with_note(cli, tmp_path):
    b = build(tmp_path)
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--key", "nope")
    assert (code, out) == (0, "") and "no message matched" in err


def test_cli_phys_offset_msg_id_and_errors(cli, tmp_path):
    b = build(tmp_path)
    code, out, err = q(cli, tmp_path, b, "--phys-offset", b.msgs[3][0])
    assert code == 0 and "m3" in out and "T  queue 1  offset 1" in out
    mid = (bytes([10, 0, 0, 1]) + struct.pack(">iq", 10911, b.msgs[5][0])).hex().upper()
    code, out, err = q(cli, tmp_path, b, "--msg-id", mid, "--json")
    assert code == 0 and json.loads(out)["msg_id"] == mid and not err
    other = (bytes([10, 0, 0, 2]) + struct.pack(">iq", 10911, b.msgs[5][0])).hex().upper()
    code, out, err = q(cli, tmp_path, b, "--msg-id", other)
    assert code == 0 and "another broker" in err
    code, out, err = q(cli, tmp_path, b, "--phys-offset", b.msgs[3][0] + 1)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    code, out, err = q(cli, tmp_path, b, "--msg-id", "zz")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--queue", "0", "--offset", "999")
    assert code == 2 and "outside" in err
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--key", "x", "--phys-offset", "0")
    assert code == 2


def test_cli_queue_offset_and_time(cli, tmp_path):
    b = build(tmp_path)
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--queue", "1", "--offset", "2", "--count", "3",
                       "--json", "--body", "none")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["queue_offset"] for r in rows] == [2, 3, 4] and "body" not in rows[0]
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--queue", "0", "--time", str(T0 + 1401), "--json")
    assert code == 0 and json.loads(out)["queue_offset"] == 2 and "first offset stored at or after" in err
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--queue", "0", "--time", "2023-11-14T22:13:21.401Z",
                       "--json")
    assert json.loads(out)["queue_offset"] == 2


def test_cli_bad_crc_is_exit_4(cli, tmp_path):
    b = StoreBuilder(tmp_path / "store", cl_size=4096, cq_units=8, slots=8, items=64)
    b.put("T", 0, T0, props={"KEYS": "k"}, crc=12345)
    b.write()
    (tmp_path / "cfg.json").write_text(json.dumps(b.config))
    code, out, err = q(cli, tmp_path, b, "--topic", "T", "--key", "k")
    assert code == 4 and "@0" in out and "CRC" in err


def test_subprocess_exit_codes_and_no_numpy_on_key_path(tmp_path):
    b = build(tmp_path)
    cfg = tmp_path / "cfg.json"
    r = run_cli("query", b.root, "--broker-config", cfg, "--topic", "T", "--key", "Aa", "--json")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 14
    r = run_cli("query", b.root, "--broker-config", cfg, "--msg-id", "00")
    assert r.returncode == 2 and r.stderr.decode().startswith("rmqctl: ")
    r = run_cli("query", b.root, "--broker-config", cfg, "--topic", "T", "--key", "Aa")
    assert r.returncode == 0
    code = ("import sys; from rmqctl.cli import run; run(['query', %r, '--broker-config', %r, '--topic', 'T', "
            "'--key', 'Aa', '--body', 'none']); sys.stdout.flush(); print('numpy' in sys.modules, file=sys.stderr)"
            % (str(b.root), str(cfg)))
    import subprocess

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "False"
