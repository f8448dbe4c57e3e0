"""mqadmin's verbs and short flags (aliases of rmqctl commands), their table in --help and the README."""
from __future__ import annotations


import pytest

from rmqctl.cli.mqadmin import VERBS, readme_table, translate

from conftest import FIXTURES, ROOT, writable_store

STORE = FIXTURES / "stores/basic-multifile-v5/store"


def test_translate():
    assert translate(["queryMsgByKey", "S", "-t", "T", "-k", "K", "-m", "3"]) == \
        ["query", "S", "--topic", "T", "--key", "K", "--max", "3"]
    assert translate(["queryMsgByOffset", "-n", "10.0.0.1:9876", "-b", "broker-a", "-t", "T", "-i", "1", "-o", "2",
                      "S"]) == ["query", "--topic", "T", "--queue", "1", "--offset", "2", "S"]
    assert translate(["resetOffsetByTime", "S", "-g", "G", "-t", "T", "-s", "now", "-n"]) == \
        ["config", "offsets", "reset", "S", "--group", "G", "--topic", "T", "--to-time", "now", "-n"]
    assert translate(["query", "-t", "T"]) == ["query", "-t", "T"]


def test_query_aliases_give_what_query_gives(cli):
    pairs = [
        (["queryMsgByKey", STORE, "-t", "TopicA", "-k", "order-3", "-n", "127.0.0.1:9876"],
         ["query", STORE, "--topic", "TopicA", "--key", "order-3"]),
        (["queryMsgByOffset", STORE, "-b", "broker-a", "-t", "TopicA", "-i", "1", "-o", "2"],
         ["query", STORE, "--topic", "TopicA", "--queue", "1", "--offset", "2"]),
        (["query", STORE, "-t", "TopicA", "-q", "1", "-o", "2"],
         ["query", STORE, "--topic", "TopicA", "--queue", "1", "--offset", "2"]),
        (["query", STORE, "-t", "TopicA", "-k", "order-3", "-b", "0", "-e", "now"],
         ["query", STORE, "--topic", "TopicA", "--key", "order-3", "--begin", "0", "--end", "now"]),
    ]
    for alias, plain in pairs:
        a, b = cli(*alias), cli(*plain)
        assert a[0] == b[0] == 0, (alias, a[2])
        assert a[1] == b[1] and "TopicA" in a[1], alias
    code, out, err = cli("queryMsgByOffset", STORE, "-b", "broker-a", "-t", "TopicA", "-i", "1", "-o", "2")
    assert "-b broker-a ignored" in err


def test_msg_id_alias(cli):
    code, out, err = cli("query", STORE, "--phys-offset", "0", "--json")
    import json

    mid = json.loads(out.splitlines()[0])["msg_id"]
    a, b = cli("queryMsgById", STORE, "-i", mid), cli("query", STORE, "--msg-id", mid)
    assert a[0] == b[0] == 0 and a[1] == b[1] != ""


@pytest.fixture
def store(tmp_path):
    return writable_store(tmp_path / "store")


def test_config_aliases(cli, store):
    a = cli("resetOffsetByTime", store, "-g", "G", "-t", "TopicA", "-s", "1700000000000", "--dry-run")
    b = cli("config", "offsets", "reset", store, "--group", "G", "--topic", "TopicA", "--to-time", "1700000000000",
            "--dry-run")
    assert a[0] == b[0] == 0 and a[1] == b[1] != ""
    assert cli("config", "offsets", "set", store, "-g", "G", "-t", "TopicA", "-q", "0", "--offset", "1")[0] == 0
    a, b = cli("consumerProgress", store, "-g", "G"), cli("config", "offsets", "show", store, "--group", "G")
    assert a[0] == b[0] == 0 and a[1] == b[1] and "TopicA" in a[1]
    assert cli("config", "topics", "create", store, "T1", "-p", "4")[0] == 0
    a, b = cli("topicList", store, "-c", "DefaultCluster"), cli("config", "topics", "list", store)
    assert a[0] == b[0] == 0 and a[1] == b[1] and "T1" in a[1]


def test_table_in_help_and_readme(cli):
    code, out, err = cli("--help")
    for verb in VERBS:
        assert verb in out
    assert readme_table() in (ROOT / "README.md").read_text()
