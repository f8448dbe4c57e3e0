"""What verify, `config status` and the reading commands say about config files damaged in meaning (the
broker's verdicts themselves are judged in test_config_meaning.py), and deep JSON as one finding."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES

BAK = b'{"offsetTable":{"T@G":{0:4,1:5},"U@G":{0:1}}}'


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    (s / "config").mkdir(parents=True)
    (s / "commitlog").mkdir()
    (s / "config/consumerOffset.json.bak").write_bytes(BAK)
    return s


def _lines(text):
    return [ln for ln in text.splitlines() if "checkpoint.missing" not in ln]


def test_misspelt_table_is_an_error_everywhere(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTablX":{"T@G":{0:5}}}')
    code, out, err = cli("verify", store)
    assert code == 4
    [line] = [ln for ln in _lines(out + err) if "consumerOffset" in ln]
    assert "config.missing_table" in line and "unknown key offsetTablX" in line
    assert "the broker starts with EMPTY offsets; .bak has 2 entries" in line
    code, out, err = cli("config", "status", store)
    assert code == 4 and "load main, start with EMPTY offsets" in out and "ok (45 bytes, 2 entries)" in out
    d = json.loads(cli("config", "status", store, "--json")[1])
    assert d["verdict"] == "start with EMPTY tables" and d["used"] == "main"
    assert d["main"]["meaning"]["missing_tables"] == ["offsetTable"]
    assert d["main"]["meaning"]["unknown_keys"] == ["offsetTablX"] and d["bak"]["meaning"]["entries"] == 2
    code, out, err = cli("config", "offsets", "show", store)
    assert code == 4 and out == "" and "EMPTY offsets" in err


def test_wrong_type_table_means_the_broker_loads_bak(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":5}')
    code, out, err = cli("verify", store)
    assert code == 4
    [line] = [ln for ln in _lines(out + err) if "consumerOffset" in ln]
    assert "config.main_unusable" in line and "decode fails: offsetTable is a number, not an object" in line
    code, out, err = cli("config", "status", store)
    assert code == 4 and "load .bak" in out
    code, out, err = cli("config", "offsets", "show", store)
    rows = [ln.split() for ln in out.splitlines()[1:]]
    assert code == 4 and rows == [["G", "T", "0", "4"], ["G", "T", "1", "5"], ["G", "U", "0", "1"]]  # the .bak


def test_null_offset_table_and_unknown_keys(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":null}')
    code, out, err = cli("verify", store)
    assert code == 4 and "config.null_table" in out + err and "sets offsetTable to null" in out + err
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":{"T@G":{0:5,-1:3}},"junk":1}')
    code, out, err = cli("verify", store)
    lines = _lines(out + err)
    assert any("warning: config.unknown_key" in ln and "'junk'" in ln for ln in lines), lines
    assert any("warning: config.value" in ln and "negative queue id -1" in ln for ln in lines), lines
    code, out, err = cli("config", "status", store)
    assert code == 0 and "ok (" in out and "1 entry" in out


def test_deep_json_is_one_finding_and_verify_goes_on(cli, tmp_path):
    s = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v5/store", s)
    assert cli("verify", s)[0] == 0
    deep = b'{"x":' + b"[" * 600 + b"]" * 600 + b"}"
    (s / "compaction/position-checkpoint").write_bytes(deep)
    (s / "config").mkdir()
    (s / "config/consumerOffset.json").write_bytes(deep)
    (s / "config/topics.json").write_bytes(b'{"topicConfigTablX":{}}')  # checked after the deep file
    code, out, err = cli("verify", s)
    assert code == 4 and "internal error" not in err and "Traceback" not in err
    lines = _lines(out + err)
    assert any("compaction.checkpoint" in ln and "nested more than 514 levels deep" in ln for ln in lines), lines
    assert any("consumerOffset.json" in ln and "nested more than 514 levels deep" in ln for ln in lines), lines
    assert any("topics.json" in ln and "config.missing_table" in ln for ln in lines), lines
    code, out, err = cli("config", "status", s)
    assert code == 4 and "internal error" not in err
    code, out, err = cli("dump", s / "config/consumerOffset.json")
    assert code in (0, 4) and "internal error" not in err and "Traceback" not in err


def test_bak_without_its_table_is_a_warning(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":{"T@G":{0:5}}}')
    (store / "config/consumerOffset.json.bak").write_bytes(b'{"offset_tablx":{"T@G":{0:4}}}')
    code, out, err = cli("verify", store)
    lines = [ln for ln in _lines(out + err) if "consumerOffset" in ln]
    assert code == 4 and len(lines) == 1, lines
    assert "consumerOffset.json.bak: warning: config.bak_unusable" in lines[0] and "EMPTY offsets" in lines[0]
