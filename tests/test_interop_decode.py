"""Interop: rmqctl's decoding of every broker-written fixture equals the broker's own view
(manifest.json "broker_view", produced by RocketMQ's DefaultMessageStore + MessageDecoder), message by
message and field by field; consume-queue units and min/max offsets likewise. Needs no Java: the
broker's view is committed with each fixture (tests/test_oracle_selfcheck.py proves it is current)."""
import base64
import json

import pytest

from oracle_helpers import fixture_dirs, load_manifest
from rmqctl.store.commitlog import CommitLog, Walk
from rmqctl.store.config import StoreConfig
from rmqctl.store.layout import Store

FIXTURE_DIRS = fixture_dirs()
FIELDS = ("topic", "queue_id", "queue_offset", "physical_offset", "size", "sys_flag", "flag", "body_crc",
          "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
          "prepared_transaction_offset", "properties", "msg_id")


def open_fixture(d):
    m = load_manifest(d)
    return Store.open(d / "store", StoreConfig().with_values(m["store_config"])), m


def test_corpus_is_there():
    assert len(FIXTURE_DIRS) >= 24
    names = {d.name for d in FIXTURE_DIRS}
    assert sum(n.endswith("-v4") for n in names) >= 12 and sum(n.endswith("-v5") for n in names) >= 12


@pytest.mark.parametrize("d", FIXTURE_DIRS, ids=[d.name for d in FIXTURE_DIRS])
def test_every_message_decodes_like_the_broker(cli, d):
    store, m = open_fixture(d)
    broker = {x["physical_offset"]: x for x in m["broker_view"]["messages"]}
    cdir = d / "store" / "commitlog"
    if not cdir.is_dir():  # git keeps no empty directories: the "empty" fixtures lose commitlog/ in a clone
        assert broker == {}
        return
    code, out, err = cli("dump", cdir, "--json", "--body", "base64", "--raw-body", "--broker-config", _conf(d, m))
    assert code == 0, err
    ours = [json.loads(x) for x in out.splitlines()]
    msgs = {x["physical_offset"]: x for x in ours if x["kind"] == "message"}
    assert sorted(msgs) == sorted(broker), "rmqctl and the broker see different records"
    for off, b in broker.items():
        r = msgs[off]
        r["size"] = r.pop("size")
        for f in FIELDS:
            assert r[f] == b[f], (off, f)
        assert base64.b64decode(r["body"]) == base64.b64decode(b["body_b64"]), off
        assert ["NOT", "PREPARED", "COMMIT", "ROLLBACK"].index(r["transaction_type"]) == b["transaction_type"]
        assert r["body_crc_ok"] is True
        if "__CRC32#" in b["properties"]:
            assert r["property_crc_ok"] is True


@pytest.mark.parametrize("d", FIXTURE_DIRS, ids=[d.name for d in FIXTURE_DIRS])
def test_commitlog_extent_matches(d):
    store, m = open_fixture(d)
    bv = m["broker_view"]["commitlog"]
    walk = Walk()
    recs = list(CommitLog(store).records(walk=walk))
    end = walk.ends[-1].stop.offset if walk.ends else 0
    assert store.commitlog.min_offset == bv["min_offset"]
    assert end == bv["max_offset"]
    assert all(e.stop.normal for e in walk.ends)
    if recs and bv.get("confirm_offset") is not None and m["broker_view"]["recovery"] == "normal":
        assert recs[-1].offset == bv["confirm_offset"]


CLEAN = [d for d in FIXTURE_DIRS if load_manifest(d)["broker_view"]["recovery"] == "normal"]


@pytest.mark.parametrize("d", CLEAN, ids=[d.name for d in CLEAN])
def test_consume_queues_match(d):
    """On a cleanly shut down store the broker's queues are exactly the files: units, min and max."""
    store, m = open_fixture(d)
    ours = {(t, q) for t, q in store.queues()} | set(store.queues("batchconsumequeue"))
    for q in m["broker_view"]["queues"]:
        key = (q["topic"], q["queue_id"])
        assert key in ours, key
        cq = store.consume_queue(*key)
        assert cq.max_offset() == q["max_offset"], key
        assert cq.min_offset() == q["min_offset"], key
        if hasattr(cq, "unit_for"):     # a batch consume queue: per offset, the unit of its batch (base offset)
            units = [{"queue_offset": u.base, "physical_offset": u.phys, "size": u.size, "tags_code": u.tags}
                     for o in range(q["min_offset"], q["max_offset"]) for u in [cq.unit_for(o)]]
        else:
            units = [{"queue_offset": o, "physical_offset": p, "size": s, "tags_code": t}
                     for o, p, s, t in cq.units(q["min_offset"], q["max_offset"])]
        # the broker's view adds the linked ext unit ("ext"); those links are judged in test_cqext.py
        assert units == [{k: u[k] for k in ("queue_offset", "physical_offset", "size", "tags_code")}
                         for u in q["units"]], key


def _conf(d, m):
    p = d / "broker.conf.json"
    if not p.exists():
        import tempfile
        from pathlib import Path

        p = Path(tempfile.mkdtemp()) / "broker.json"
        p.write_text(json.dumps(m["store_config"]))
    return p
