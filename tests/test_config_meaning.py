"""Config files judged by meaning: for each damaged main (misspelt, missing, null or wrongly typed tables and
entries, deep nesting) rmqctl predicts which copy the broker loads and whether it starts empty, and the real
broker's config managers (4.9.7 and 5.3.3, tests/oracle `config`) decide. Every case has a .bak with other,
recognisable content, so the broker's answer shows which copy it used. Needs Java 17 + Maven; never skipped."""
from __future__ import annotations

import pytest

from rmqctl.config.files import EMPTY, LOAD_BAK, LOAD_MAIN, load

from oracle_helpers import OracleError, oracle

pytestmark = pytest.mark.oracle

CO, TP, SG, DO = "consumerOffset.json", "topics.json", "subscriptionGroup.json", "delayOffset.json"
# the main copies name T@G / topic T / group G / level 1; the .bak copies B@G / BakTopic / BakGroup / level 3
BAK = {
    CO: b'{"offsetTable":{"B@G":{0:99}}}',
    TP: b'{"topicConfigTable":{"BakTopic":{"perm":6,"readQueueNums":1,"writeQueueNums":1,"topicName":"BakTopic"}}}',
    SG: b'{"subscriptionGroupTable":{"BakGroup":{"groupName":"BakGroup"}}}',
    DO: b'{"offsetTable":{3:77}}',
}
MAIN_MARK = {CO: "T@G", TP: "T", SG: "G", DO: "1"}
BAK_MARK = {CO: "B@G", TP: "BakTopic", SG: "BakGroup", DO: "3"}
TABLE = {CO: "offsetTable", TP: "topicConfigTable", SG: "subscriptionGroupTable", DO: "offsetTable"}


def _deep(n):
    return b'{"offsetTable":{"T@G":{0:5}},"x":' + b"[" * n + b"]" * n + b"}"


# (file, main bytes, expected: main | bak | empty)
CASES = [
    (CO, b'{"offsetTablX":{"T@G":{0:5}}}', "empty"),
    (TP, b'{"topicConfigTablX":{"T":{"topicName":"T","perm":6}}}', "empty"),
    (SG, b'{"subscriptionGroupTablX":{"G":{"groupName":"G"}}}', "empty"),
    (DO, b'{"offsetTablX":{1:5}}', "empty"),
    (CO, b"{}", "empty"),
    (TP, b"[]", "empty"),
    (CO, b'{"offsetTable":5}', "bak"),
    (TP, b'{"topicConfigTable":"x"}', "bak"),
    (SG, b'{"subscriptionGroupTable":[]}', "bak"),
    (DO, b'{"offsetTable":true}', "bak"),
    (TP, b'{"topicConfigTable":null}', "bak"),
    (SG, b'{"subscriptionGroupTable":null}', "bak"),
    (DO, b'{"offsetTable":null}', "bak"),
    (SG, b'[1]', "bak"),
    # smart match: case, '_' and '-' do not matter
    (CO, b'{"offsettable":{"T@G":{0:5}}}', "main"),
    (TP, b'{"topic_config_table":{"T":{"topicName":"T","perm":6}}}', "main"),
    (SG, b'{"SubscriptionGroupTable":{"G":{"groupName":"G"}}}', "main"),
    (DO, b'{"offset-table":{1:5}}', "main"),
    # entries
    (CO, b'{"offsetTable":{"T@G":5}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":null}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{"a":5}}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{0:"abc"}}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{0:null}}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{0:99999999999999999999}}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{0:1.5,"1":"7"}}}', "main"),
    (CO, b'{"offsetTable":{"T@G":{-1:-5}}}', "main"),
    (CO, b'{"offsetTable":{"T@G":{0:5}},"junk":[1,2]}', "main"),
    (TP, b'{"topicConfigTable":{"T":5}}', "bak"),
    (TP, b'{"topicConfigTable":{"T":null}}', "bak"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","perm":"x"}}}', "bak"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","perm":"6","readQueueNums":1.5,"other":1}}}', "main"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","order":"x"}}}', "bak"),
    (TP, b'{"topicConfigTable":{},"dataVersion":null}', "bak"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T"}},"dataVersion":5}', "bak"),
    (SG, b'{"subscriptionGroupTable":{"G":"x"}}', "bak"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":"x"}}}', "bak"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":"x"}}}', "bak"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":5}}}', "main"),
    (SG, b'{"subscriptionGroupTable":{"G":{}}}', "main"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","order":"1","perm":true}}}', "main"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","perm":99999999999}}}', "bak"),
    (TP, b'{"topicConfigTable":{"T":{"topicName":"T","order":null,"perm":null}}}', "main"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":"TRUE","retryMaxTimes":2.5}}}', "main"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":"","consumeFromMinEnable":"0"}}}', "main"),
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":" 5"}}}', "bak"),
    (DO, b'{"offsetTable":{"a":5}}', "bak"),
    (DO, b'{"offsetTable":{1:"abc"}}', "bak"),
    (DO, b'{"offsetTable":{"1":"5"}}', "main"),
    (DO, b'{"offsetTable":{1:5},"dataVersion":null}', "main"),
    # nesting: fastjson decodes 514 nested containers, not 515 (the reader's limit, rmqctl.fastjson.MAX_DEPTH)
    (CO, _deep(513), "main"),
    (CO, _deep(514), "bak"),
    (CO, _deep(5000), "bak"),
]
# 4.9.7 ignores dataVersion in these files (no setter), 5.3.3 binds it: only 5.x fails on a wrong type
V5_ONLY = [
    (SG, b'{"subscriptionGroupTable":{"G":{"groupName":"G"}},"dataVersion":5}', "bak"),
    (DO, b'{"offsetTable":{1:5},"dataVersion":{"counter":"x"}}', "bak"),
    (CO, b'{"offsetTable":{"T@G":{0:5}},"groupTopicMap":5}', "bak"),
]


def _predict(tmp_path, f, main) -> str:
    d = tmp_path / "predict" / "config"
    d.mkdir(parents=True, exist_ok=True)
    (d / f).write_bytes(main)
    (d / (f + ".bak")).write_bytes(BAK[f])
    ld = load(d / f)
    if ld.verdict == LOAD_MAIN and ld.used == "main":
        return "main"
    if ld.verdict == LOAD_BAK:
        return "bak"
    assert ld.verdict == EMPTY and ld.used == "main", ld.summary()
    return "empty"


def _observe(got: dict, f) -> str:
    r = got[f]
    assert r["load_ok"] is True, (f, r)
    table = r["data"].get(TABLE[f]) or {}
    main, bak = MAIN_MARK[f] in table, BAK_MARK[f] in table
    assert not (main and bak)
    return "main" if main else "bak" if bak else "empty"


def _batches(cases):
    """Cases grouped so that each config dir holds at most one file of each kind (one JVM per dir)."""
    out: list[dict] = []
    for f, main, expected in cases:
        for b in out:
            if f not in b:
                b[f] = (main, expected)
                break
        else:
            out.append({f: (main, expected)})
    return out


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_rmqctl_predicts_what_the_broker_loads(tmp_path, version):
    cases = CASES + (V5_ONLY if version == "v5" else [])
    wrong = []
    for i, batch in enumerate(_batches(cases)):
        d = tmp_path / f"b{i}"
        d.mkdir()
        for f, (main, _) in batch.items():
            (d / f).write_bytes(main)
            (d / (f + ".bak")).write_bytes(BAK[f])
        got = oracle(version, "config", "--dir", str(d))
        for f, (main, expected) in batch.items():
            ours, broker = _predict(tmp_path / f"p{i}{f}", f, main), _observe(got, f)
            assert broker == expected, (version, f, main[:80], broker)  # the case tests what it says
            if ours != broker:
                wrong.append((f, main[:80], ours, broker))
    assert not wrong, wrong


def test_v4_ignores_datafields_v5_binds(tmp_path):
    # the 5.x-only rule above really is version-specific: 4.9.7 loads these mains
    for i, (f, main, _) in enumerate(V5_ONLY):
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / f).write_bytes(main)
        (d / (f + ".bak")).write_bytes(BAK[f])
        assert _observe(oracle("v4", "config", "--dir", str(d)), f) == "main"


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_null_offset_table_is_loaded_as_no_table(tmp_path, version):
    """consumerOffset assigns a null offsetTable: no .bak fallback, the broker holds no table at all
    (5.3.3 then fails on its own encode, as the broker's next persist would)."""
    d = tmp_path / "config"
    d.mkdir()
    (d / CO).write_bytes(b'{"offsetTable":null}')
    (d / (CO + ".bak")).write_bytes(BAK[CO])
    ld = load(d / CO)
    assert ld.verdict == EMPTY and ld.used == "main" and "null" in ld.problem()
    if version == "v4":
        got = oracle(version, "config", "--dir", str(d))[CO]
        assert got["load_ok"] is True and got["data"].get("offsetTable") is None
    else:
        with pytest.raises(OracleError) as ei:
            oracle(version, "config", "--dir", str(d))
        assert 'because "this.offsetTable" is null' in str(ei.value)
