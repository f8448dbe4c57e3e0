"""5.x compaction topics (cleanup.policy=COMPACTION): compaction/compactionLog, compactionCq, position-checkpoint.

Fixtures compaction-v5 (compacted once by the broker's own CompactionLog.doCompaction), compaction-pending-v5
(never compacted), crash-compaction-v5 (compaction files behind the commitlog, abort present); each manifest's
compaction_view is what the broker's compaction store serves (tests/oracle `compaction-read`).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, writable_store
from oracle_helpers import load_manifest, oracle, store_config_file

STORES = FIXTURES / "stores"
INTACT = ("compaction-v5", "compaction-pending-v5")
ALL = INTACT + ("crash-compaction-v5",)
LOG, CQ = "compaction/compactionLog/KV/0", "compaction/compactionCq/KV/0"


def view(name):
    return load_manifest(STORES / name)["compaction_view"]


def tree(root: Path, sub: str = "") -> dict:
    base = root / sub if sub else root
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*")) if p.is_file() and "rmqctl-quarantine" not in p.parts}


def findings(cli, store, *more):
    code, out, _err = cli("verify", store, "--json", *more)
    doc = json.loads(out)
    return code, [f for f in doc["findings"] if f["check"].startswith("compaction.")]


# --- the fixtures are what the tests assume ---------------------------------------------------------------------

def test_fixtures_have_compaction_files_and_views():
    for name in ALL:
        v = view(name)
        assert v["load_ok"] and v["compaction_topics"] == ["KV"], name
        assert [(q["topic"], q["queue_id"]) for q in v["queues"]] == [("KV", 0), ("KV", 1)]
    # compacted: file 2300 is gone, the compacted file 0 holds one record per key (k-2 removed by its tombstone)
    v = view("compaction-v5")
    assert v["positions"] == {"KV_0": 17, "KV_1": 18}
    assert [f.split(":")[0].rsplit("/", 1)[1] for f in v["files_before"]["log"][:2]] == ["0" * 20, "4600".zfill(20)]
    keys = [m["keys"] for m in v["queues"][0]["messages"] if m["queue_offset"] <= 17]
    assert len(keys) == len(set(keys)) and "k-2" not in keys
    assert view("compaction-pending-v5")["positions"] == {}
    assert view("crash-compaction-v5")["recovery"] == "abnormal"


# --- dump --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", INTACT)
def test_dump_compaction_cq_units_are_what_the_broker_serves(cli, name):
    st = STORES / name / "store"
    for q in view(name)["queues"]:
        units = []
        d = st / "compaction/compactionCq/KV" / str(q["queue_id"])
        for f in sorted(d.iterdir()):
            code, out, err = cli("dump", "--json", f)
            assert code == 0, err
            rows = [json.loads(line) for line in out.splitlines()]
            assert rows[-1]["kind"] == "trailer" and "problem" not in rows[-1]
            units += [(r["msg_base_offset"], r["physical_offset"], r["size"], r["tags_code"])
                      for r in rows if r["kind"] == "compaction_cq_unit"]
            assert all(r["logical_offset"] == r["msg_base_offset"] for r in rows if r["kind"] == "compaction_cq_unit")
        assert units == [(u["queue_offset"], u["pos"], u["size"], u["tags_code"]) for u in q["units"]]


@pytest.mark.parametrize("name", INTACT)
def test_dump_compaction_log_records_are_what_the_broker_serves(cli, name):
    st = STORES / name / "store"
    for q in view(name)["queues"]:
        code, out, err = cli("dump", "--json", "--body", "base64",
                             st / "compaction/compactionLog/KV" / str(q["queue_id"]))
        assert code == 0, err
        recs = {}
        for line in out.splitlines():
            r = json.loads(line)
            if r.get("kind") == "trailer":
                assert "problem" not in r
            elif "queue_offset" in r:
                recs[r["queue_offset"]] = r
        for m in q["messages"]:
            r = recs[m["queue_offset"]]
            assert r["physical_offset"] == m["physical_offset"]
            assert r["properties"]["KEYS"] == m["keys"]
            assert base64.b64decode(r["body"]) == base64.b64decode(m["body_b64"])


@pytest.mark.parametrize("name", INTACT)
def test_query_offset_is_what_a_consumer_is_served(name):
    """query --offset N on a compaction topic answers what the broker's getMessage serves: the first kept offset
    at or after N, read from the compaction log (compacted offsets are skipped)."""
    from rmqctl.query import QueryEngine
    from rmqctl.store.layout import Store

    n = 0
    with QueryEngine(Store(STORES / name / "store")) as eng:
        for q in view(name)["queues"]:
            served = {m["queue_offset"]: m for m in q["messages"]}
            assert len(served) < q["max_offset"] - q["min_offset"] or name != "compaction-v5"   # really compacted
            for off in range(0, q["max_offset"]):
                got = list(eng.by_queue_offset("KV", q["queue_id"], off))
                nxt = min((o for o in served if o >= off), default=None)
                assert [m.queue_offset for m in got] == ([nxt] if nxt is not None else []), off
                if got:
                    m, want = got[0], served[nxt]
                    assert (m.offset, m.total_size, m.store_timestamp, m.properties.get("KEYS")) == (
                        want["physical_offset"], want["size"], want["store_timestamp"], want["keys"])
                    assert base64.b64encode(m.body).decode() == want["body_b64"] and m.crc_ok
                    n += 1
        assert not eng.problems
    assert n


def test_dump_closed_compaction_cq_ends_with_its_end_unit(cli):
    f = STORES / "compaction-pending-v5/store" / CQ / ("0" * 20)
    code, out, err = cli("dump", f)
    assert code == 0 and not err
    assert out.splitlines()[-1].endswith("end-of-file filler at offset 414, 46 bytes to the end of the file")
    code, out, _ = cli("dump", "--json", f)
    t = json.loads(out.splitlines()[-1])
    assert t["trailing"] == "end_filler" and t["end_unit_at"] == 414 and t["units"] == 9


def test_store_summary_names_compaction_queues(cli):
    code, out, err = cli("dump", "--json", STORES / "compaction-v5/store")
    assert code == 0, err
    c = json.loads(out.splitlines()[0])["compaction"]
    assert c["topics"] == ["KV"] and (c["log_file_size"], c["cq_file_size"]) == (2300, 460)
    v = {(q["topic"], q["queue_id"]): q for q in view("compaction-v5")["queues"]}
    for q in c["queues"]:
        b = v[(q["topic"], q["queue_id"])]
        assert (q["min_offset"], q["max_offset"], q["units"]) == (b["min_offset"], b["max_offset"], len(b["units"]))
        assert q["broker_load"] == "loads"
    code, out, _ = cli("dump", STORES / "compaction-v5/store")
    assert "compaction queues" in out and "COMPACTION topics in topics.json: KV" in out


# --- verify ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", INTACT)
def test_verify_intact_compaction_store_is_clean(cli, name):
    code, out, err = cli("verify", STORES / name / "store")
    assert code == 0 and out == "", out + err
    code, doc_out, _ = cli("verify", "--json", STORES / name / "store")
    stats = json.loads(doc_out)["stats"]
    assert stats["compaction_queues"] == 2 and stats["compaction_units"] == sum(
        len(q["units"]) for q in view(name)["queues"])
    assert stats["compaction_commitlog_compared"] == stats["compaction_units"]


def test_verify_crash_store_has_no_compaction_findings(cli):
    code, fs = findings(cli, STORES / "crash-compaction-v5/store")
    assert code == 4 and fs == []


def _cq_unit_at(path: Path, i: int) -> list:
    import struct

    return list(struct.unpack_from(">qiqqqhii", path.read_bytes(), i * 46))


def _put_cq_unit(path: Path, i: int, u) -> None:
    import struct

    b = bytearray(path.read_bytes())
    struct.pack_into(">qiqqqhii", b, i * 46, *u)
    path.write_bytes(bytes(b))


def test_verify_missing_last_cq_file_broker_deletes_the_log(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    (st / CQ / "00000000000000004600").unlink()
    code, fs = findings(cli, st)
    assert code == 4
    hit = [f for f in fs if f["check"] == "compaction.unpaired"]
    assert len(hit) == 1 and hit[0]["path"].endswith(LOG + "/00000000000000004600")
    assert "deletes this log file at load" in hit[0]["message"]


@pytest.mark.parametrize("gone", [CQ + "/00000000000000000000", LOG + "/00000000000000004600"])
def test_verify_unpaired_files_fail_the_broker_load(cli, tmp_path, gone):
    # a CQ file missing for a log file that is not the last one; the last log file missing under its CQ file
    st = writable_store(tmp_path / "store", "compaction-v5")
    (st / gone).unlink()
    assert not (st / gone).exists()
    code, fs = findings(cli, st)
    assert code == 4
    assert [f["check"] for f in fs] == ["compaction.load"] and "load fails" in fs[0]["message"]


def test_verify_unit_pointing_between_records(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    f = st / CQ / ("0" * 20)
    u = _cq_unit_at(f, 2)
    u[0] += 5
    _put_cq_unit(f, 2, u)
    assert _cq_unit_at(f, 2)[0] == 419
    code, fs = findings(cli, st)
    assert code == 4 and any(x["check"] == "compaction.cq_unit" and x["offset"] == 92 and x["actual"] == 419
                             for x in fs), fs


def test_verify_log_record_not_the_commitlog_message_and_duplicate_key(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    f = st / LOG / ("0" * 20)
    b = bytearray(f.read_bytes())
    i = b.index(b"KEYS\x01k-6")           # the compacted record of k-6 now claims k-1 (also compacted)
    b[i + 7] = ord("1")
    f.write_bytes(bytes(b))
    code, fs = findings(cli, st)
    checks = sorted({x["check"] for x in fs})
    assert code == 4 and checks == ["compaction.commitlog_mismatch", "compaction.duplicate_key"], fs


def test_verify_orphan_log_records_after_a_lost_cq_tail(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-pending-v5")
    f = st / CQ / "00000000000000004600"
    b = bytearray(f.read_bytes())
    b[4 * 46:7 * 46] = bytes(3 * 46)
    f.write_bytes(bytes(b))
    code, fs = findings(cli, st)
    assert code == 4          # the broker loads the queue but serves offsets up to 21 only
    assert [(x["check"], x["offset"]) for x in fs if x["check"] != "compaction.behind"] == [
        ("compaction.orphan_record", o) for o in (5448, 5660, 5873)]
    behind = [x for x in fs if x["check"] == "compaction.behind"]
    assert len(behind) == 1 and behind[0]["severity"] == "warning" and "3 keyed message(s)" in behind[0]["message"]


def test_verify_position_beyond_the_queue(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    p = st / "compaction/position-checkpoint"
    p.write_text(p.read_text().replace('"KV_0":17', '"KV_0":25'))   # KV/0 holds offsets up to 24
    assert '"KV_0":25' in p.read_text()
    code, fs = findings(cli, st)
    assert code == 4 and [x["check"] for x in fs] == ["compaction.position"], fs
    p.write_text(p.read_text().replace('"KV_0":25', '"KV_0":99'))   # beyond the topic's queue too: said once
    code, fs = findings(cli, st)
    assert code == 4 and [x["check"] for x in fs] == ["compaction.offset"], fs


# --- rebuild cq --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", INTACT)
def test_rebuild_cq_on_intact_store_changes_nothing(cli, tmp_path, name):
    st = writable_store(tmp_path / "store", name)
    before = tree(st)
    code, out, err = cli("rebuild", "cq", st)
    assert code == 0, out + err
    assert tree(st) == before


@pytest.mark.parametrize("name", INTACT)
def test_rebuild_cq_regenerates_every_compaction_cq_byte_identical(cli, tmp_path, name):
    st = writable_store(tmp_path / "store", name)
    want = tree(st, "compaction/compactionCq")
    for p in [p for p in (st / "compaction/compactionCq").rglob("0*") if p.is_file()]:
        p.unlink()
    stray = st / CQ / "notes.txt"
    stray.write_text("operator's file")
    assert not any(p.is_file() for p in (st / "compaction/compactionCq").rglob("0*"))
    # no CQ file left to tell the CQ size: without the broker config nothing is guessed (exit 4)
    code, out, err = cli("rebuild", "cq", st)
    assert code == 4 and "compactionCqMappedFileSize" in out, out + err
    code, out, err = cli("rebuild", "cq", st, "--broker-config", STORES / name / "manifest.json")
    assert code == 1, out + err
    got = tree(st, "compaction/compactionCq")
    assert stray.read_text() == "operator's file"
    got.pop(str(stray.relative_to(st)))
    assert got == want
    code, out, err = cli("undo", st)
    assert code in (0, 1), err
    assert not any(p.is_file() for p in (st / "compaction/compactionCq").rglob("0*"))


def test_rebuild_cq_recreates_a_lost_last_cq_file(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    f = st / CQ / "00000000000000004600"
    want = f.read_bytes()
    f.unlink()
    code, out, err = cli("rebuild", "cq", st)
    assert code == 1, out + err
    assert f.read_bytes() == want


def test_rebuild_cq_keeps_a_cq_file_without_log(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    (st / LOG / "00000000000000004600").unlink()
    before = tree(st)
    code, out, err = cli("rebuild", "cq", st, "--json")
    assert code == 0, out + err
    assert tree(st) == before
    assert any("no compaction log file of that name; left as it is" in n for n in json.loads(out)["notes"])


# --- recover -----------------------------------------------------------------------------------------------------

def _recover(cli, st):
    code, out, err = cli("recover", st)
    assert code == 1, out + err
    return out


def test_recover_crash_appends_what_the_broker_redispatches_and_undo_restores(cli, tmp_path):
    st = writable_store(tmp_path / "store", "crash-compaction-v5")
    before = tree(st)
    _recover(cli, st)
    # what the broker served after its own recovery (manifest compaction_view of the crash fixture)
    v = {q["queue_id"]: q for q in view("crash-compaction-v5")["queues"]}
    code, out, err = cli("verify", st)
    assert code == 0, out + err
    for qid in (0, 1):
        units = []
        for f in sorted((st / "compaction/compactionCq/KV" / str(qid)).iterdir()):
            _, o, _ = cli("dump", "--json", f)
            units += [(r["msg_base_offset"], r["physical_offset"], r["size"])
                      for r in map(json.loads, o.splitlines()) if r["kind"] == "compaction_cq_unit"]
        assert units == [(u["queue_offset"], u["pos"], u["size"]) for u in v[qid]["units"]]
    code, out, err = cli("recover", st)
    assert code == 0, out + err
    code, out, err = cli("undo", st)
    assert code in (0, 1), err
    assert tree(st) == before


def test_recover_regenerates_a_lost_compaction_cq_instead_of_losing_the_log(cli, tmp_path):
    # the broker would delete the last log file (its CQ file is gone); recover regenerates the CQ file from the
    # log and then re-dispatches: the result is what it makes of the intact crash store (judged by the oracle test
    # below: the broker's own recovery)
    ref = writable_store(tmp_path / "ref", "crash-compaction-v5")
    st = writable_store(tmp_path / "store", "crash-compaction-v5")
    gone = st / CQ / "00000000000000002300"
    gone.unlink()
    _code, fs = findings(cli, st)
    # the broker would delete that (last) log file; what it held is then missing from the compaction queue
    assert sorted(f["check"] for f in fs) == ["compaction.behind", "compaction.unpaired"]
    out = _recover(cli, st)
    assert "missing for its log file, regenerated from it" in out
    _recover(cli, ref)
    for sub in ("compaction/compactionLog", "compaction/compactionCq", "consumequeue"):
        assert tree(st, sub) == tree(ref, sub), sub


def test_recover_on_intact_compaction_store_does_nothing(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    before = tree(st)
    code, out, err = cli("recover", st)
    assert code == 0, out + err
    assert tree(st) == before


# --- judged by the broker (tests/oracle, RocketMQ 5.3.3) ------------------------------------------------------

def _broker_view(tmp_path, st, name, cmd="compaction-read"):
    conf = store_config_file(STORES / name, tmp_path)
    return oracle("v5", cmd, "--store", st, "--conf", conf, check=False)


@pytest.mark.oracle
def test_oracle_committed_view_is_current(tmp_path):
    st = writable_store(tmp_path / "store", "compaction-v5")
    got = _broker_view(tmp_path, st, "compaction-v5")
    assert got == view("compaction-v5")


@pytest.mark.oracle
def test_oracle_recover_equals_the_brokers_own_recovery(cli, tmp_path):
    mine = writable_store(tmp_path / "mine", "crash-compaction-v5")
    broker = writable_store(tmp_path / "broker", "crash-compaction-v5")
    _recover(cli, mine)
    r = _broker_view(tmp_path, broker, "crash-compaction-v5", "compaction-restart")
    assert r["load_ok"] and r["recovery"] == "abnormal"
    for sub in ("compaction/compactionLog", "compaction/compactionCq", "consumequeue"):
        assert tree(mine, sub) == tree(broker, sub), sub


@pytest.mark.oracle
def test_oracle_rebuilt_compaction_cq_is_served_like_the_original(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-pending-v5")
    shutil.rmtree(st / "compaction/compactionCq")
    code, out, err = cli("rebuild", "cq", st, "--broker-config", STORES / "compaction-pending-v5/manifest.json")
    assert code == 1, out + err
    got = _broker_view(tmp_path, st, "compaction-pending-v5")
    want = view("compaction-pending-v5")
    assert got["load_ok"] and got["queues"] == want["queues"]


def _rm(*rel):
    def f(st):
        for g in rel:
            p = st / g
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            assert not p.exists()
    return f


def _truncate(rel, size):
    def f(st):
        os.truncate(st / rel, size)
        assert (st / rel).stat().st_size == size
    return f


def _stray(st):
    (st / LOG / "notes.txt").write_text("an operator's note")


FAULTS = {   # name -> (fixture, how)
    "last-cq": ("compaction-v5", _rm(CQ + "/00000000000000004600")),
    "last-log": ("compaction-v5", _rm(LOG + "/00000000000000004600")),
    "middle-cq": ("compaction-pending-v5", _rm(CQ + "/00000000000000002300")),
    "cq-dir": ("compaction-v5", _rm(CQ)),
    "zero-length-last-cq": ("compaction-v5", _truncate(CQ + "/00000000000000004600", 0)),
    "stray-file": ("compaction-v5", _stray),
}


@pytest.mark.oracle
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_oracle_unpaired_files_verdict_is_the_brokers(cli, tmp_path, fault):
    name, how = FAULTS[fault]
    st = writable_store(tmp_path / "store", name)
    how(st)
    code, out, err = cli("dump", "--json", st)
    assert code == 0, err
    mine = {q["queue_id"]: q["broker_load"] for q in json.loads(out.splitlines()[0])["compaction"]["queues"]}
    b = _broker_view(tmp_path, st, name)
    served = {q["queue_id"] for q in b.get("queues", [])}
    if not b["load_ok"]:
        assert mine[0].startswith("FAILS"), (fault, mine)
    elif 0 not in served:
        assert mine[0] == "not loaded", (fault, mine)
    else:
        deleted = sorted(set(b["files_before"]["log"]) - set(b["files_after_load"]["log"]))
        names = [d.split(":")[0].rsplit("/", 1)[1] for d in deleted]
        assert mine[0] == ("loads, deletes " + ", ".join(names) if names else "loads"), (fault, mine, deleted)
    assert mine[1] == "loads"


def test_recover_killed_during_the_compaction_steps_converges(cli, tmp_path):
    from conftest import run_cli

    ref = writable_store(tmp_path / "ref", "crash-compaction-v5")
    code, out, err = cli("recover", "--dry-run", "--json", ref)
    steps = json.loads(out)["actions"]
    comp = [a["step"] for a in steps if a["group"] == "compaction"]
    assert len(comp) >= 4, steps
    _recover(cli, ref)
    want = tree(ref)
    st = writable_store(tmp_path / "store", "crash-compaction-v5")
    original = tree(st)
    for kill_after in (comp[0], comp[len(comp) // 2]):
        r = run_cli("recover", st, env={"RMQCTL_TEST_KILL_AFTER": str(kill_after)})
        assert r.returncode == 137, r.stderr
        assert tree(st) != want
    r = run_cli("recover", st)
    assert r.returncode == 1, r.stdout + r.stderr
    assert tree(st) == want
    r = run_cli("undo", st)
    assert r.returncode in (0, 1), r.stderr
    assert tree(st) == original


def test_rebuild_cq_restores_units_lost_from_a_compaction_cq(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-pending-v5")
    f = st / CQ / "00000000000000004600"
    want = f.read_bytes()
    b = bytearray(want)
    b[4 * 46:7 * 46] = bytes(3 * 46)
    f.write_bytes(bytes(b))
    assert f.read_bytes() != want
    code, out, err = cli("rebuild", "cq", st, "--dry-run")
    assert code == 4 and "compactionCq/KV/0/00000000000000004600" in out
    assert f.read_bytes() != want
    code, out, err = cli("rebuild", "cq", st)
    assert code == 1, out + err
    assert f.read_bytes() == want
    code, out, err = cli("verify", st)
    assert code == 0, out + err


def test_verify_one_compaction_file(cli, tmp_path):
    st = writable_store(tmp_path / "store", "compaction-pending-v5")
    f = st / CQ / "00000000000000004600"
    for p in (f, st / LOG / "00000000000000004600", st / "compaction/compactionCq/KV/1/00000000000000004600"):
        code, out, err = cli("verify", p)
        assert code == 0 and out == "", out + err
    b = bytearray(f.read_bytes())
    b[4 * 46:7 * 46] = bytes(3 * 46)
    f.write_bytes(bytes(b))
    code, out, err = cli("verify", st / LOG / "00000000000000004600")
    assert code == 4 and out.count("compaction.orphan_record") == 3, out + err
    code, out, err = cli("verify", st / "compaction/compactionCq/KV/1/00000000000000004600")
    assert code == 0 and out == "", out + err        # the other queue is not this file's business


def test_recover_from_start_rebuilds_lost_compaction_logs_as_the_brokers_dispatcher_wrote_them(cli, tmp_path):
    # compaction-pending-v5's logs and CQs were written by the broker's dispatcher and never compacted: dispatching
    # the commitlog again from its start must give the same bytes
    st = writable_store(tmp_path / "store", "compaction-pending-v5")
    want = tree(st, "compaction/compactionLog") | tree(st, "compaction/compactionCq")
    shutil.rmtree(st / "compaction/compactionLog")
    shutil.rmtree(st / "compaction/compactionCq")
    code, fs = findings(cli, st)
    assert code == 4 and [f["check"] for f in fs] == ["compaction.behind"] * 2
    assert "`rmqctl recover --from-start` does" in fs[0]["message"]
    code, out, err = cli("recover", st)
    assert code == 0, out + err             # a normal start re-dispatches nothing old, nor does recover
    code, out, err = cli("recover", "--from-start", st,
                         "--broker-config", STORES / "compaction-pending-v5/manifest.json")
    assert code == 1, out + err
    assert tree(st, "compaction/compactionLog") | tree(st, "compaction/compactionCq") == want
    code, out, err = cli("verify", st)
    assert code == 0, out + err
