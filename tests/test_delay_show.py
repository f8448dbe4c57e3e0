"""`config delay show`: per delay level, delayOffset.json beside its SCHEDULE_TOPIC_XXXX queue (min, max,
pending, due times), judged against the broker's view in the delay-levels fixtures' manifests."""
from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, run_cli, writable_store

SCHED = "SCHEDULE_TOPIC_XXXX"


def show(store, *extra):
    r = run_cli("config", "delay", "show", store, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return {row["level"]: row for row in map(json.loads, r.stdout.decode().splitlines())}


@pytest.mark.parametrize("name", ["delay-levels-v4", "delay-levels-v5"])
def test_levels_equal_broker_queues(name):
    fx = FIXTURES / "stores" / name
    view = json.loads((fx / "manifest.json").read_text())["broker_view"]
    queues = {q["queue_id"]: q for q in view["queues"] if q["topic"] == SCHED}
    stored = {m["physical_offset"]: m["store_timestamp"] for m in view["messages"]}
    assert sorted(queues) == [0, 2, 17]         # levels 1, 3, 18 (level 20 clamped to 18)
    rows = show(fx / "store", "--broker-config", fx / "manifest.json")
    assert sorted(rows) == list(range(1, 19))
    for level, r in rows.items():
        assert r["schema"] == "rmqctl.config-delay-show/1" and r["queue"] == level - 1
        q = queues.get(level - 1)
        if q is None:
            assert (r["min"], r["max"], r["pending"], r["earliest_due_ms"]) == (None, None, 0, None)
            continue
        assert (r["min"], r["max"]) == (q["min_offset"], q["max_offset"])
        assert r["offset"] is None and r["start"] == 0            # absent from delayOffset.json: from 0
        units = [u for u in q["units"] if u["queue_offset"] >= r["start"]]
        assert r["pending"] == len(units) > 0
        assert r["earliest_due_ms"] == min(u["tags_code"] for u in units)
        assert r["latest_due_ms"] == max(u["tags_code"] for u in units)
        # a due time is the message's store time + the level's delay
        first = min(units, key=lambda u: u["tags_code"])
        assert r["earliest_due_ms"] - stored[first["physical_offset"]] == r["delay_ms"]
    assert rows[18]["delay"] == "2h" and rows[18]["pending"] == 2


def test_offsets_from_delay_offset_json_are_clamped_like_the_broker(tmp_path):
    fx = FIXTURES / "stores" / "delay-levels-v4"
    store = writable_store(tmp_path / "store", "delay-levels-v4")
    view = json.loads((fx / "manifest.json").read_text())["broker_view"]
    q2 = next(q for q in view["queues"] if q["topic"] == SCHED and q["queue_id"] == 2)
    for level, off in ((3, 1), (18, 5), (1, 0)):
        r = run_cli("config", "delay", "set", store, "--level", level, "--offset", off)
        assert r.returncode == 0, r.stderr
    rows = show(store)
    assert (rows[3]["offset"], rows[3]["start"], rows[3]["pending"]) == (1, 1, 1)
    assert rows[3]["earliest_due_ms"] == rows[3]["latest_due_ms"] == q2["units"][1]["tags_code"]
    assert (rows[18]["offset"], rows[18]["start"], rows[18]["pending"]) == (5, 2, 0)   # beyond max: max
    assert rows[18]["earliest_due_ms"] is None
    assert (rows[1]["offset"], rows[1]["pending"]) == (0, 1)
    text = run_cli("config", "delay", "show", store)
    assert text.returncode == 0
    line = next(x for x in text.stdout.decode().splitlines() if x.split()[0] == "3")
    assert line.split()[1:7] == ["10s", "2", "1", "0", "2", "1"]


def test_json_fields_are_documented_in_help():
    rows = show(FIXTURES / "stores" / "delay-levels-v4" / "store")
    helptext = run_cli("config", "delay", "show", "--help").stdout.decode()
    words = {w.strip(".") for w in helptext.replace(",", " ").replace("(", " ").replace(")", " ").split()}
    assert set(rows[1]) <= words, set(rows[1]) - words
