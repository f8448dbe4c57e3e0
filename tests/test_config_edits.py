"""Config edits an operator types: negative values, a topic/group created through `config set`,
offsets outside the queue's range, and `config diff` on copies that differ only in layout."""
from __future__ import annotations

import json
import shutil

import pytest

from rmqctl import fastjson as fj

from conftest import writable_store


@pytest.fixture
def store(tmp_path):
    s = writable_store(tmp_path / "store")
    (s / "config").mkdir(exist_ok=True)
    return s


def _doc(s, name):
    return fj.loads((s / "config" / name).read_bytes())


def test_negative_number_is_a_value(cli, store):
    code, out, err = cli("config", "set", store, "consumerOffset", "offsetTable.TopicA@G.0", "-88837")
    assert code == 0, err
    assert _doc(store, "consumerOffset.json")["offsetTable"]["TopicA@G"] == {0: -88837}
    code, out, err = cli("config", "set", store, "consumerOffset", "offsetTable.TopicA@G.0", "-5", "-n")
    assert code == 0 and "-88837 -> -5" in out + err


def test_set_on_a_new_topic_fills_what_topics_create_fills(cli, store, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(store, other)
    code, out, err = cli("config", "set", store, "topics", "topicConfigTable.NewTopic.perm", "4")
    assert code == 0, err
    assert "created topic NewTopic" in out
    assert cli("config", "topics", "create", other, "NewTopic")[0] == 0
    assert cli("config", "set", other, "topics", "topicConfigTable.NewTopic.perm", "4")[0] == 0
    got = _doc(store, "topics.json")["topicConfigTable"]["NewTopic"]
    assert got["topicName"] == "NewTopic" and got["perm"] == 4
    assert got == _doc(other, "topics.json")["topicConfigTable"]["NewTopic"]


def test_set_a_new_topic_to_a_non_object_is_refused(cli, store):
    code, out, err = cli("config", "set", store, "topics", "topicConfigTable.NewTopic", "5")
    assert code == 2 and "config topics create" in err
    assert not (store / "config/topics.json").exists()


def test_set_on_a_new_group_fills_the_template(cli, store):
    code, out, err = cli("config", "set", store, "subscriptionGroup", "subscriptionGroupTable.G1.retryMaxTimes", "3")
    assert code == 0, err
    g = _doc(store, "subscriptionGroup.json")["subscriptionGroupTable"]["G1"]
    assert g["groupName"] == "G1" and g["retryMaxTimes"] == 3 and "consumeEnable" in g


def _queue(store):
    from rmqctl.store.layout import Store

    st = Store.open(store)
    t, q = st.queues()[0]
    cq = st.consume_queue(t, q)
    return t, q, cq.min_offset(), cq.max_offset()


def test_offsets_set_outside_the_queue_warns_or_refuses(cli, store):
    t, q, lo, hi = _queue(store)
    assert hi > lo >= 0
    code, out, err = cli("config", "offsets", "set", store, "-g", "G", "-t", t, "-q", q, "--offset", hi)
    assert code == 0 and "above the max" not in err and "below the min" not in err
    code, out, err = cli("config", "offsets", "set", store, "-g", "G", "-t", t, "-q", q, "--offset", hi + 100000)
    assert code == 0 and f"above the max of {t} queue {q} [{lo}, {hi}]" in err
    assert _doc(store, "consumerOffset.json")["offsetTable"][f"{t}@G"][q] == hi + 100000
    before = (store / "config/consumerOffset.json").read_bytes()
    code, out, err = cli("config", "offsets", "set", store, "-g", "G", "-t", t, "-q", q, "--offset", hi + 1,
                         "--strict")
    assert code == 4 and "refused (--strict)" in err and err.count("\n") == 1
    assert (store / "config/consumerOffset.json").read_bytes() == before


def test_diff_layout_only_is_exit_0_and_said(cli, store):
    doc = b'{\n\t"offsetTable":{\n\t\t"TopicA@G":{0:5,1:6\n\t\t}\n\t}\n}'
    relaid = b'{"offsetTable": {\n  "TopicA@G": {1: 6, 0: 5}}}\n'
    (store / "config/consumerOffset.json").write_bytes(doc)
    (store / "config/consumerOffset.json.bak").write_bytes(relaid)
    assert fj.loads(doc) == fj.loads(relaid) and doc != relaid
    code, out, err = cli("config", "diff", store, "consumerOffset")
    assert code == 0 and "only the layout differs" in out and "@@" not in out
    code, out, err = cli("config", "diff", store, "consumerOffset", "--json")
    assert code == 0 and json.loads(out)["layout_only"] is True
    (store / "config/consumerOffset.json.bak").write_bytes(relaid.replace(b"6", b"7"))
    code, out, err = cli("config", "diff", store, "consumerOffset")
    assert code == 4 and "@@" in out
