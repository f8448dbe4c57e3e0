"""broker.conf read as java.util.Properties reads it (judged by a real JVM), and one --broker-config
option with RMQCTL_BROKER_CONFIG on every command that needs store sizes."""
from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest

from rmqctl.brokerconf import read_broker_config
from rmqctl.errors import UsageError
from rmqctl.store.config import StoreConfig

from conftest import FIXTURES, ROOT, run_cli

HELPER = ROOT / "tests/oracle/props/PropsDump.java"

CASES = [
    b"a=b", b"a = b  ", b"a:b", b"a b", b"a\t\t b", b"a =: b", b"a==b", b"a::b", b"  # c\n! d\nk=v",
    b"a=b\\\n   c", b"a=b\\\\\nc=d", b"a=b\\\\\\\n d", b"k\\ ey=v", b"k\\=ey=v", b"k\\:ey:v",
    b"a=\\u0041\\t\\x\\b", b"a\\\n b=c", b"#x\\\ny=z", b"!x\\\ny=z", b"a=b\\", b"empty", b"a=\\n",
    b"a=b\r\nc=d\re=f", b"k=v1\nk=v2", b"\xe9=\xe8", b"a=\\u00e9\\u4e2d", b"   \n\t\n\f\nk=v",
    b"a=\\\n\n b=c", b"a=\\\n# not a comment", b"key\\\n  \\ =v", b"\\#k=v", b"k=v # not a comment",
    b"a\f=\fb", b"a=b\\ ", b"=v", b":v", b" =v", b"a=\\u004", b"a=\\uZZZZ", b"a=\\u",
    b"mappedFileSizeCommitLog : 1048576\nmaxHashSlotNum 100\\\n0",
]


def _fuzz_cases(n=1500, seed=12):
    rnd = random.Random(seed)
    alphabet = [b"a", b"k", b" ", b"\t", b"\f", b"=", b":", b"\\", b"\n", b"\r", b"#", b"!", b"u", b"0",
                b"4", b"1", b"\xe9", b"\\u0041", b"\\\n", b"\r\n"]
    return [b"".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 30))) for _ in range(n)]


def _ours(path):
    try:
        return read_broker_config(path)
    except UsageError:
        return "ERROR"


@pytest.mark.oracle
def test_properties_grammar_matches_java(tmp_path):
    cases = [c for c in CASES + _fuzz_cases() if not c.lstrip().startswith(b"{")]
    files = []
    for i, c in enumerate(cases):
        f = tmp_path / f"c{i}.properties"
        f.write_bytes(c)
        files.append(f)
    r = subprocess.run(["java", str(HELPER), *map(str, files)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(files)
    assert sum(line.startswith("ERROR") for line in lines) >= 2   # malformed \uXXXX cases really throw in Java
    for c, f, line in zip(cases, files, lines):
        java = "ERROR" if line.startswith("ERROR") else json.loads(line)
        assert _ours(f) == java, c


def test_store_sizes_from_properties_forms(tmp_path):
    f = tmp_path / "broker.conf"
    f.write_bytes(b"# sizes\nmappedFileSizeCommitLog : 1048576\nmaxHashSlotNum 10\\\n  0\n"
                  b"maxIndexNum=400\nmessageIndexEnable = TRUE\n")
    cfg = StoreConfig.from_file(f)
    assert (cfg.commitlog_file_size, cfg.hash_slot_num, cfg.index_num, cfg.message_index_enable) == \
        (1048576, 100, 400, True)


def test_values_the_broker_cannot_parse_keep_the_default(tmp_path):
    # MixAll.properties2Object: Integer.parseInt("1048576 ") throws and the setter is skipped
    f = tmp_path / "broker.conf"
    f.write_bytes(b"mappedFileSizeCommitLog=1048576 \nmaxIndexNum=12x\nmessageIndexEnable=true \n")
    cfg = StoreConfig.from_file(f)
    assert cfg.commitlog_file_size == StoreConfig().commitlog_file_size
    assert cfg.index_num == StoreConfig().index_num
    assert cfg.message_index_enable is False          # Boolean.parseBoolean("true ") is false
    assert "commitlog_file_size" not in cfg.explicit


@pytest.mark.parametrize("cmd", [["verify"], ["query", "--phys-offset", "0"], ["dump"], ["recover", "--dry-run"],
                                 ["rebuild", "cq", "--dry-run"], ["rebuild", "index", "--dry-run"]])
def test_binary_or_unreadable_config_is_one_line_usage_error(tmp_path, cmd):
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v5/store", store)
    bad = tmp_path / "broker.conf"
    bad.write_bytes(b"mappedFileSizeCommitLog=1024\n\x00\xff\xfe binary")
    args = [*cmd[:2], store, *cmd[2:]] if cmd[0] == "rebuild" else [cmd[0], store, *cmd[1:]]
    for how in ("option", "env"):
        extra, env = (["--broker-config", bad], None) if how == "option" else ([], {"RMQCTL_BROKER_CONFIG": str(bad)})
        r = run_cli(*args, *extra, env=env)
        err = r.stderr.decode()
        assert r.returncode == 2, (how, err)
        assert err.count("\n") == 1 and "binary" in err and "Traceback" not in err, (how, err)
    bad.chmod(0)
    r = run_cli(*args, "--broker-config", bad)
    if r.returncode != 2:   # root reads anything: then the file is still binary, still exit 2
        pytest.fail(r.stderr.decode())


def test_config_is_a_hidden_alias_on_recover_and_rebuild(cli):
    for cmd in (["recover"], ["rebuild", "cq"]):
        code, out, _ = cli(*cmd, "--help")
        assert "--broker-config" in out and "RMQCTL_BROKER_CONFIG" in out and "--config" not in out


def test_recover_reads_the_env_var(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v5/store", store)
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=4096\n")   # smaller than the files: the plan must differ
    base = run_cli("recover", "--dry-run", "--json", store)
    alias = run_cli("recover", "--dry-run", "--json", "--config", conf, store)
    env = run_cli("recover", "--dry-run", "--json", store, env={"RMQCTL_BROKER_CONFIG": str(conf)})
    assert alias.returncode == env.returncode and alias.stdout == env.stdout
    assert (base.returncode, base.stdout) != (env.returncode, env.stdout)


@pytest.mark.parametrize("given,size", [("790", 800), ("6000010", 6000020), ("800", 800), ("1", 20), ("+21", 40)])
def test_consume_queue_size_rounds_up_to_whole_units_as_the_broker(tmp_path, given, size):
    # MessageStoreConfig.getMappedFileSizeConsumeQueue: Math.ceil(size / 20.0) * 20 (4.1 to 5.3)
    f = tmp_path / "broker.conf"
    f.write_text(f"mappedFileSizeConsumeQueue={given}\nmappedFileSizeCommitLog=790\n")
    cfg = StoreConfig.from_file(f)
    assert (cfg.cq_file_size, cfg.commitlog_file_size) == (size, 790)      # the commitlog's size is taken as it is


def test_sizes_spelled_as_by_brokers_before_4_5_2(tmp_path):
    """RocketMQ 4.5.1 and older read mapedFileSizeCommitLog and mapedFileSizeConsumeQueue (one p)."""
    f = tmp_path / "broker.conf"
    f.write_text("mapedFileSizeCommitLog=65536\nmapedFileSizeConsumeQueue=790\n")
    cfg = StoreConfig.from_file(f)
    assert (cfg.commitlog_file_size, cfg.cq_file_size) == (65536, 800)
    assert {"commitlog_file_size", "cq_file_size"} <= cfg.explicit
    f.write_text("mapedFileSizeCommitLog=65536\nmappedFileSizeCommitLog=131072\n")      # both: today's spelling
    assert StoreConfig.from_file(f).commitlog_file_size == 131072


@pytest.mark.parametrize("line", ["mappedFileSizeCommitLog=0", "mappedFileSizeConsumeQueue=-20",
                                  "mapedFileSizeConsumeQueue=0", "mapperFileSizeBatchConsumeQueue=-1",
                                  "mappedFileSizeConsumeQueueExt=0", "mappedFileSizeTimerLog=0"])
def test_a_size_of_no_bytes_is_one_line_usage_error(tmp_path, line):
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v5/store", store)
    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    for cmd in (["verify", store], ["recover", store, "--dry-run"], ["dump", store / "commitlog"]):
        r = run_cli(*cmd, "--broker-config", conf)
        err = r.stderr.decode()
        assert r.returncode == 2, (cmd, err)
        assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
        assert str(conf) in err and line.split("=")[0] in err, err


@pytest.mark.parametrize("lines", ["maxHashSlotNum=0", "maxIndexNum=-5", "maxIndexNum=0\nmaxHashSlotNum=100",
                                   "maxHashSlotNum=500000000\nmaxIndexNum=100000000"])
def test_an_index_geometry_the_broker_cannot_use_is_refused_before_any_change(tmp_path, lines):
    """No hash slot or no item (the broker divides by the slot count, or indexes nothing), or index files past
    a Java int: rebuild index once rewrote every index file empty with maxIndexNum=-5, and crashed on 0 slots."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v5/store", store)
    before = {p: p.read_bytes() for p in (store / "index").iterdir()}
    assert before
    conf = tmp_path / "broker.conf"
    conf.write_text(lines + "\n")
    for cmd in (["rebuild", "index", store], ["recover", store], ["rebuild", "index", store, "--dry-run"]):
        r = run_cli(*cmd, "--broker-config", conf)
        err = r.stderr.decode()
        assert r.returncode == 2, (cmd, err)
        assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
        assert str(conf) in err and ("maxIndexNum" in err or "maxHashSlotNum" in err), err
    assert {p: p.read_bytes() for p in (store / "index").iterdir()} == before


@pytest.mark.parametrize("opts", [["--index-slots", str(1 << 62)], ["--index-items", "0"],
                                  ["--index-slots", "2147483647", "--index-items", "2147483647"]])
def test_index_geometry_options_out_of_the_brokers_range_are_usage_errors(opts):
    ix = sorted((FIXTURES / "stores/basic-multifile-v5/store/index").iterdir())[0]
    r = run_cli("dump", ix, *opts)
    err = r.stderr.decode()
    assert r.returncode == 2 and "Traceback" not in err and "internal error" not in err, err
    assert r.stdout == b""


def test_recover_takes_an_unrounded_consume_queue_size_as_the_broker(tmp_path):
    """mappedFileSizeConsumeQueue=790 on a store whose queue files are 800 bytes: the broker maps 800-byte files,
    so recover plans nothing for them (it once planned to cut 10 bytes, half a unit, off every file)."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores/basic-multifile-v4/store", store)
    sizes = {p.stat().st_size for p in (store / "consumequeue").rglob("0*") if p.is_file()}
    assert sizes == {800}       # the store is what the test needs
    conf = tmp_path / "broker.conf"
    for size, cuts in (("790", False), ("780", True)):
        conf.write_text(f"mappedFileSizeConsumeQueue={size}\n")
        r = run_cli("recover", store, "--dry-run", "--broker-config", conf)
        assert (b"truncate_file consumequeue/" in r.stdout) is cuts, r.stdout.decode()[-2000:]
