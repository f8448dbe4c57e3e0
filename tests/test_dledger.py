"""DLedger commitlog stores (enableDLegerCommitLog=true), judged by fixtures the broker wrote through a one-node
DLedger group (fixtures/stores/dledger-v4, dledger-v5, crash-dledger-v5) and by the oracle on injected damage."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from rmqctl.formats import dledger as fmt

from rmqctl.store import dledger as dl

ROOT = Path(__file__).resolve().parent.parent
STORES = ROOT / "fixtures" / "stores"
NAMES = ("dledger-v4", "dledger-v5", "crash-dledger-v5")


def _manifest(name):
    return json.loads((STORES / name / "manifest.json").read_text(encoding="utf-8"))


def _log(store) -> dl.DLedgerLog:
    return dl.DLedgerLog.open(dl.find(store))


def _copy(name, tmp_path) -> Path:
    dest = tmp_path / name / "store"
    shutil.copytree(STORES / name / "store", dest)
    shutil.copy(STORES / name / "manifest.json", tmp_path / name / "manifest.json")
    return dest


@pytest.mark.parametrize("name", NAMES)
def test_entries_and_messages_match_the_broker(name):
    m = _manifest(name)
    view = m["broker_view"]
    log = _log(STORES / name / "store")
    box: list = []
    walked = [(e, r, bad) for e, r, bad in dl.message_walk(log, box)]
    assert box[0].normal
    assert [{"index": e.index, "term": e.term, "pos": e.pos, "size": e.size} for e, _, _ in walked] == \
        view["dledger"]["entries"]
    got = [(r.physical_offset, r.topic, r.queue_id, r.queue_offset, r.total_size, r.body_crc) for _, r, bad in walked
           if bad is None]
    want = [(x["physical_offset"], x["topic"], x["queue_id"], x["queue_offset"], x["size"], x["body_crc"])
            for x in view["messages"]]
    assert got == want and len(want) == len(walked) > 20
    # the offset each put returned is the wrapped message's physical offset: entry pos + 48
    assert [p["wrote_offset"] for p in m["write_result"]["puts"]] == [e.message_offset for e, _, _ in walked]
    plan = dl.predict_recovery(log)
    assert (plan.last_index, plan.index_end) == (view["dledger"]["ledger_end_index"],
                                                 view["dledger"]["index_max_wrote_position"])
    assert plan.process_offset == view["dledger"]["data_max_wrote_position"]
    assert plan.committed_index == view["dledger"]["committed_index"]


@pytest.mark.parametrize("name", NAMES)
def test_declarations_parse_and_build_the_broker_bytes(name):
    log = _log(STORES / name / "store")
    f = log.data[0].path.read_bytes()
    idx = log.index[0].path.read_bytes()[:4096]
    box: list = []
    n = 0
    for e, _ in log.walk(box):
        if e.path != log.data[0].path:
            break
        raw = f[e.pos:e.pos + fmt.BODY_OFFSET]
        h = fmt.EntryHeader.parse(raw)
        assert (h.index, h.term, h.pos, h.size, h.magic) == (e.index, e.term, e.pos, e.size, fmt.MAGIC)
        assert fmt.EntryHeader.build(h) == raw
        u = idx[e.index * 32:e.index * 32 + 32]
        pu = fmt.IndexUnit.parse(u)
        assert (pu.magic, pu.pos, pu.size, pu.index, pu.term) == (1, e.pos, e.size, e.index, e.term)
        assert fmt.IndexUnit.build(pu) == u
        n += 1
    assert n > 3
    # the first file ends with DLedger's blank: magic -1 and the bytes left
    last = max(e.pos + e.size for e, _ in log.walk([]) if e.path == log.data[0].path)
    b = fmt.BlankEntry.parse(f[last:last + 8])
    assert b.magic == -1 and b.size == len(f) - last
    assert fmt.BlankEntry.build(b) == f[last:last + 8]


@pytest.mark.parametrize("name", ["dledger-v4", "dledger-v5"])
def test_verify_clean_dump_names_the_engine(cli, name):
    store = STORES / name / "store"
    code, out, err = cli("verify", "--json", store)
    rep = json.loads(out)
    assert code == 0 and rep["clean"] and rep["stats"]["messages"] == 33 and rep["stats"]["cq_units"] == 33, (out, err)
    code, out, _ = cli("dump", "--json", store)
    s = json.loads(out)
    assert code == 0 and s["kind"] == "dledger_store" and "DLedger 0.3" in s["engine_evidence"]
    assert s["entries"] == 33 and s["checkpoint"] == {"committedIndex": "32", "endIndex": "32"}
    code, out, _ = cli("dump", "--json", store / "dledger-n0" / "index" / ("0" * 20))
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and [x["index"] for x in lines[:-1]] == list(range(33))
    assert lines[-1]["trailing"] == "zeros" and lines[-1]["valid_bytes"] == 33 * 32
    code, out, _ = cli("dump", "--json", store / "dledger-n0" / "data" / ("0" * 20))
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and lines[-1]["stop"] == "blank" and lines[0]["message_offset"] == 48


def test_other_commands_refuse_in_one_line(cli):
    store = STORES / "dledger-v5" / "store"
    for args in (["reclaim"], ["diff", STORES / "dledger-v4" / "store"]):
        code, _, err = cli(args[0], store, *args[1:])
        assert code == 8 and "DLedger commitlog (dledger-n0/)" in err and len(err.strip().splitlines()) == 1, args


# --- stats / export: the messages the entries wrap, judged by the broker's own read of every message -------------
def _broker_rows(name):
    return _manifest(name)["broker_view"]["messages"]


@pytest.mark.parametrize("name", NAMES)
def test_stats_local_counts_and_max_offsets_are_the_broker_s(cli, name):
    code, out, err = cli("stats", "--engine", "local", "--json", STORES / name / "store")
    assert code == 0, err
    res = json.loads(out)
    view = _manifest(name)["broker_view"]
    per_queue: dict = {}
    for m in view["messages"]:
        per_queue[(m["topic"], m["queue_id"])] = per_queue.get((m["topic"], m["queue_id"]), 0) + 1
    got = {(q["topic"], q["queue_id"]): (q["messages"], q["max_offset"], q["bytes"]) for q in res["queues"]}
    want = {(q["topic"], q["queue_id"]): (per_queue[(q["topic"], q["queue_id"])], q["max_offset"],
                                          sum(m["size"] for m in view["messages"]
                                              if (m["topic"], m["queue_id"]) == (q["topic"], q["queue_id"])))
            for q in view["queues"]}
    assert got == want and res["totals"]["messages"] == len(view["messages"]) > 20
    assert res["scan"]["stops"][name]["stop"] is None and res["scan"]["stops"][name]["entries"] == len(
        view["dledger"]["entries"])


_FIELDS = ("topic", "queue_id", "queue_offset", "physical_offset", "size", "sys_flag", "flag", "body_crc",
           "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
           "prepared_transaction_offset", "msg_id", "properties")


def _as_broker(row):
    return {k: row[k] for k in _FIELDS} | {"body_b64": row["body"]}


@pytest.mark.parametrize("name", NAMES)
def test_export_local_is_the_broker_s_read_of_every_message(tmp_path, cli, name):
    import base64

    import pyarrow.parquet as pq

    store = STORES / name / "store"
    code, out, err = cli("export", "--engine", "local", "--format", "jsonl", "--out", tmp_path / "j", store)
    assert code == 0 and "exported" in out, err
    rows = [json.loads(x) for x in (tmp_path / "j" / "part-00000.json").read_text().splitlines()]
    want = [{k: m[k] for k in _FIELDS} | {"body_b64": m["body_b64"]} for m in _broker_rows(name)]
    assert [_as_broker(r) for r in rows] == want and len(want) > 20
    assert all(r["body_crc_ok"] for r in rows)
    code, _, err = cli("export", "--engine", "local", "--partition-by", "none", "--out", tmp_path / "p", store)
    assert code == 0, err
    t = pq.read_table(tmp_path / "p" / "part-00000.parquet").to_pylist()
    for r in t:
        r["properties"] = dict(r["properties"])
        r["body"] = base64.b64encode(r["body"]).decode()
    assert [_as_broker(r) for r in t] == want
    # filters run on the same rows
    code, out, err = cli("export", "--engine", "local", "--format", "jsonl", "--topic", "DlB", "--queue", "0",
                         "--out", tmp_path / "f", store)
    rows = [json.loads(x) for x in (tmp_path / "f" / "part-00000.json").read_text().splitlines()]
    assert code == 0 and [r["physical_offset"] for r in rows] == [
        m["physical_offset"] for m in _broker_rows(name) if (m["topic"], m["queue_id"]) == ("DlB", 0)], err


def test_export_unconsumed_after_crash_places_the_tail_from_the_entry_log(tmp_path, cli):
    """crash-dledger-v5: the consume queues hold 16 of the 30 messages; the rest come from the DLedger log."""
    store = _copy("crash-dledger-v5", tmp_path)
    (store / "config").mkdir()
    offsets = {"offsetTable": {"CrashDl@G1": {"0": 3, "1": 14}}}
    (store / "config" / "consumerOffset.json").write_text(json.dumps(offsets))
    code, out, err = cli("export", "--unconsumed", "--format", "jsonl", "--json", "--out", tmp_path / "u", store)
    assert code == 0, err
    res = json.loads(out)
    assert {(q["queue_id"], q["from_consume_queue"], q["from_commitlog"], q["not_placed"]) for q in res["queues"]} \
        == {(0, 5, 7, 0), (1, 0, 1, 0)}
    rows = [json.loads(x) for x in (tmp_path / "u" / "part-00000.json").read_text().splitlines()]
    want = [m for m in _broker_rows("crash-dledger-v5") if m["queue_offset"] >= {0: 3, 1: 14}[m["queue_id"]]]
    key = lambda r: (r["queue_id"], r["queue_offset"])  # noqa: E731
    assert sorted((_as_broker(r) for r in rows), key=key) == sorted(
        ({k: m[k] for k in _FIELDS} | {"body_b64": m["body_b64"]} for m in want), key=key)
    assert {r["group"] for r in rows} == {"G1"} and len(rows) == 13


def _entries(log):
    return [e for e, _ in log.walk([])]


def test_crash_fixture_verify_reports_uncommitted_tail(cli):
    store = STORES / "crash-dledger-v5" / "store"
    code, out, err = cli("verify", "--json", "-v", store)
    rep = json.loads(out)
    assert code == 4, err     # abort present: the next start runs abnormal recovery
    assert [f["check"] for f in rep["findings"] if f["severity"] != "info"] == ["abort.present"]
    assert any(f["check"] == "dledger.checkpoint" and f["actual"] == 15 for f in rep["findings"])
    code, _, err = cli("recover", store)
    assert code == 8 and "keeps entries 0..29" in err and len(err.strip().splitlines()) == 1


def _tear_last(store):
    """Torn last entry: its size field says more bytes than the file holds."""
    log = _log(store)
    e = _entries(log)[-1]
    with open(e.path, "r+b") as fh:
        fh.seek(e.pos - int(e.path.name) + 4)
        fh.write(struct.pack(">i", 100000))
    assert _entries(_log(store))[-1].index == e.index - 1          # injected
    return e


def _bad_index_unit(store, i):
    log = _log(store)
    with open(log.index[0].path, "r+b") as fh:
        fh.seek(i * 32 + 12)
        fh.write(struct.pack(">i", 7))
    assert log.index_unit(i)[2] == 7                                  # injected


def _bad_body(store, i):
    log = _log(store)
    e = _entries(log)[i]
    with open(e.path, "r+b") as fh:               # the wrapped message's BODYCRC (record offset 8)
        fh.seek(e.pos - int(e.path.name) + fmt.BODY_OFFSET + 8)
        crc = struct.unpack(">i", fh.read(4))[0]
        fh.seek(-4, 1)
        fh.write(struct.pack(">i", crc ^ 0x55))
    return e


def test_verify_finds_injected_damage(tmp_path, cli):
    store = _copy("dledger-v5", tmp_path)
    e = _tear_last(store)
    _bad_index_unit(store, 25)
    _bad_body(store, 3)
    code, out, err = cli("verify", "--json", store)
    rep = json.loads(out)
    checks = {f["check"] for f in rep["findings"]}
    assert code == 4 and {"dledger.entry", "dledger.index_unit", "dledger.message", "dledger.cq_unit"} <= checks, out
    code, _, err = cli("recover", store)
    assert code == 8 and f"keeps entries 0..{e.index - 1}" in err and "rewrites the index units from entry 25" in err


def _bad_term_early(store):
    """Entry 1 (first data file) with a term below entry 0's: before the file DLedger's recovery starts from."""
    log = _log(store)
    assert len(log.data) >= 4 and log.recovery_start() == len(log.data) - 3
    e = _entries(log)[1]
    with open(e.path, "r+b") as fh:
        fh.seek(e.pos - int(e.path.name) + 16)
        fh.write(struct.pack(">q", -5))
    assert _entries(_log(store))[-1].index == 0                       # injected: a walk from file 0 stops


@pytest.mark.oracle
@pytest.mark.parametrize("damage", ["torn", "index", "torn+index", "early-term"])
def test_predicted_recovery_is_what_dledger_does(tmp_path, damage):
    from tests.oracle_helpers import read_store

    store = _copy("dledger-v5", tmp_path)
    if "torn" in damage:
        _tear_last(store)
    if "index" in damage:
        _bad_index_unit(store, 20)
    if damage == "early-term":
        _bad_term_early(store)
    plan = dl.predict_recovery(_log(store))
    view = read_store("v5", store, tmp_path / "dledger-v5" / "manifest.json")
    assert view["load_ok"]
    d = view["dledger"]
    assert (plan.last_index, plan.last_term, plan.process_offset, plan.index_end) == (
        d["ledger_end_index"], d["ledger_end_term"], d["data_max_wrote_position"], d["index_max_wrote_position"])
    assert [e["index"] for e in d["entries"]] == list(range(plan.keep_entries))
    assert plan.index_rewrite_from == (20 if "index" in damage else None)


@pytest.mark.parametrize("name", ["dledger-v4", "dledger-v5"])
def test_rebuild_from_the_dledger_log_is_byte_identical(tmp_path, cli, name):
    store = _copy(name, tmp_path)
    manifest = tmp_path / name / "manifest.json"
    for what in ("cq", "index"):     # intact store: nothing to do
        code, out, err = cli("rebuild", what, store, "--broker-config", manifest, "--json")
        assert code == 0 and json.loads(out)["actions"] == [], (out, err)
    orig = STORES / name / "store"
    shutil.rmtree(store / "consumequeue" / "DlB")
    for p in (store / "index").iterdir():
        p.unlink()
    assert not (store / "consumequeue" / "DlB").exists()          # injected
    assert cli("rebuild", "cq", store, "--broker-config", manifest)[0] == 1
    assert cli("rebuild", "index", store, "--broker-config", manifest)[0] == 1
    for p in sorted((orig / "consumequeue").rglob("*")):
        if p.is_file():
            assert (store / p.relative_to(orig)).read_bytes() == p.read_bytes(), p
    # the index file's name is the wall clock at creation (the broker's); its bytes are the broker's
    [new] = list((store / "index").iterdir())
    [old] = list((orig / "index").iterdir())
    assert new.read_bytes() == old.read_bytes()
    assert cli("undo", store)[0] == 0 and cli("undo", store)[0] == 0
    assert not (store / "consumequeue" / "DlB").exists() and not any((store / "index").iterdir())


def test_rebuild_cq_after_crash_gives_the_broker_s_units(tmp_path, cli):
    store = _copy("crash-dledger-v5", tmp_path)
    view = _manifest("crash-dledger-v5")["broker_view"]
    code, out, err = cli("rebuild", "cq", store, "--broker-config", tmp_path / "crash-dledger-v5" / "manifest.json")
    assert code == 1, (out, err)
    from rmqctl.store.layout import Store

    st = Store(store)
    for q in view["queues"]:
        got = [(u[1], u[2], u[3]) for u in st.consume_queue(q["topic"], q["queue_id"]).units() if u[2]]
        want = [(u["physical_offset"], u["size"], u["tags_code"]) for u in q["units"]]
        assert got == want and len(want) == 15


@pytest.mark.parametrize("name", ["dledger-v4", "dledger-v5"])
def test_query_answers_as_the_broker(cli, name):
    import re

    store = STORES / name / "store"
    view = _manifest(name)["broker_view"]
    checked = 0
    for q in view["key_queries"]:
        if q["begin"] != 0 or q["max_num"] != 64:
            continue
        by_off = {m["physical_offset"]: m for m in view["messages"]}
        uniq = any(by_off[o]["properties"].get("UNIQ_KEY") == q["key"] for o in q["messages_phys_offsets"])
        code, out, err = cli("query", store, "-t", q["topic"], "--uniq-key" if uniq else "-k", q["key"], "--json")
        got = sorted(json.loads(x)["physical_offset"] for x in out.splitlines())
        want = [o for o in q["messages_phys_offsets"] if by_off[o]["topic"] == q["topic"] and (
            by_off[o]["properties"].get("UNIQ_KEY") == q["key"] if uniq
            else q["key"] in by_off[o]["properties"].get("KEYS", "").split(" "))]
        assert got == sorted(want), (q, err)
        checked += bool(want)
    assert checked > 20
    for tq in view["time_queries"]:
        for ts, want in tq["results"]:
            code, out, err = cli("query", store, "-t", tq["topic"], "--queue", tq["queue_id"], "--time", ts,
                                 "--broker-version", name[-1])
            m = re.search(r"(?:at or after|stored nearest to) \d+: (\d+)", err)
            assert m and int(m.group(1)) == want, (tq["topic"], ts, want, err)
    for msg in view["messages"][:5]:
        code, out, err = cli("query", store, "--msg-id", msg["msg_id"], "--json")
        r = json.loads(out)
        assert code == 0, err
        assert (r["physical_offset"], r["queue_offset"], r["body_crc_ok"]) == (msg["physical_offset"],
                                                                                msg["queue_offset"], True)
        _, out, _ = cli("query", store, "-t", msg["topic"], "--queue", msg["queue_id"], "--offset",
                           msg["queue_offset"], "--json")
        assert json.loads(out)["physical_offset"] == msg["physical_offset"]


def test_stats_and_export_stop_where_the_log_or_a_wrapped_message_is_bad(tmp_path, cli):
    """A torn last entry ends the log there (DLedger's recovery); a wrapped message with a wrong BODYCRC ends the
    walk at that message (as CommitLog.records(stop_at_bad=True) does); both are named, never a traceback."""
    store = _copy("dledger-v5", tmp_path)
    torn = _tear_last(store)
    code, out, err = cli("stats", "--engine", "local", "--json", store)
    res = json.loads(out)
    assert code == 0 and res["totals"]["messages"] == 32, err
    stop = next(iter(res["scan"]["stops"].values()))["stop"]
    assert stop["offset"] == torn.pos and stop["kind"] == "dledger_bad_size"
    e = _bad_body(store, 20)
    code, out, err = cli("stats", "--engine", "local", store)
    assert code == 0 and f"ends at offset {e.message_offset}: bad_body_crc" in out and "messages: 20 " in out, out
    code, out, err = cli("export", "--engine", "local", "--format", "jsonl", "--out", tmp_path / "x", store)
    rows = (tmp_path / "x" / "part-00000.json").read_text().splitlines()
    assert code == 0 and len(rows) == 20, err
    code, out, err = cli("stats", "--engine", "local", "--no-crc", "--json", store)
    assert json.loads(out)["totals"]["messages"] == 32


@pytest.mark.spark
def test_spark_engine_reads_the_entry_log_as_the_broker(tmp_path):
    """--engine spark: one task per data file (the driver walks the entry headers, the tasks decode the wrapped
    messages); the same figures as the local engine, every message as the broker read it, and a bad wrapped
    message ends the scan there (the later files' rows dropped by a rerun, as for a commitlog)."""
    import base64

    import pyarrow.parquet as pq

    from rmqctl.salvage import export_local, export_spark
    from rmqctl.spark import stats as st
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.export import export
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.spark.session import get_session
    from rmqctl.store.layout import Store

    spark = get_session("local[2]", shuffle_partitions=2)
    keys = ("totals", "topics", "queues", "consumer_lag")
    for name in NAMES:
        refs = parse_store_args([str(STORES / name / "store")])
        got, loc = st.compute(Dataset.open(spark, refs)), st.compute_local(None, names=refs)
        assert {k: got[k] for k in keys} == {k: loc[k] for k in keys} and got["totals"]["messages"] > 20
        assert {(q["topic"], q["queue_id"]): q["max_offset"] for q in got["queues"]} == {
            (q["topic"], q["queue_id"]): q["max_offset"] for q in _manifest(name)["broker_view"]["queues"]}
        if name == "dledger-v4":
            continue       # the export rows: one store per version is enough
        ds = Dataset.open(spark, refs, body=True)
        export(ds, str(tmp_path / name), "parquet")
        rows = sorted(pq.read_table(tmp_path / name).to_pylist(), key=lambda r: r["physical_offset"])
        for r in rows:
            r["properties"] = dict(r["properties"])
            r["body"] = base64.b64encode(r["body"]).decode()
        assert [_as_broker(r) for r in rows] == [{k: m[k] for k in _FIELDS} | {"body_b64": m["body_b64"]}
                                                 for m in _broker_rows(name)]
    # export --unconsumed --engine spark: the same rows as the local engine (crash store: 14 messages not in a CQ)
    store = _copy("crash-dledger-v5", tmp_path)
    (store / "config").mkdir()
    (store / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"CrashDl@G1": {"0": 3}}}))
    token = dl.READING.set(True)
    try:
        s = Store.open(store)
        sp = export_spark(Dataset.open(spark, parse_store_args([str(store)])), s, str(tmp_path / "u-s"), "parquet")
        lo = export_local(s, str(tmp_path / "u-l"), "parquet")
    finally:
        dl.READING.reset(token)

    def rows_of(d):
        return sorted((r["group"], r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"])
                      for r in pq.read_table(d).to_pylist())
    assert sp["messages"] == lo["messages"] == 12 + 15 and rows_of(tmp_path / "u-s") == rows_of(tmp_path / "u-l")
    # a wrapped message with a bad BODYCRC in the second data file: the scan ends there
    store = _copy("dledger-v5", tmp_path / "bad")
    e = _bad_body(store, 20)
    ds = Dataset.open(spark, parse_store_args([str(store)]))
    got = st.compute(ds)
    stop = next(iter(got["scan"]["stops"].values()))["stop"]
    assert got["totals"]["messages"] == 20 and stop["kind"] == "bad_body_crc" and stop["offset"] == e.message_offset
    assert ds.runs == 2      # the first run's later files had rows: dropped by the rerun
