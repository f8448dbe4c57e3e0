"""Names an operator's machine really has: a store folder whose name holds an escape sequence and a byte that is
not UTF-8, a damaged config copy holding control bytes, a DLedger file renamed by hand. Every command shows them
escaped (text) or as valid UTF-8 JSON, on a pipe as well as on a terminal, and none ends in an internal error."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import FIXTURES, run_cli

BASIC = FIXTURES / "stores" / "basic-multifile-v4" / "store"
ODD = os.fsdecode(b"na\xff\x1b[31mme")       # ESC and a byte that is not UTF-8


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("odd") / ODD
    root.mkdir()
    shutil.copytree(BASIC, root / "store")
    assert os.fsencode(str(root)).count(b"\xff") == 1      # the name really holds the byte
    return root / "store"


def _clean(r, *codes):
    out, err = r.stdout, r.stderr
    assert r.returncode in codes, (r.returncode, err[-1500:])
    assert b"Traceback" not in err and b"internal error" not in err, err[-1500:]
    for stream in (out, err):
        assert b"\x1b" not in stream and b"\xff" not in stream, stream[-800:]
        stream.decode("utf-8")


@pytest.mark.parametrize("cmd", [["dump", "{S}"], ["verify", "-v", "{S}"], ["reclaim", "{S}"],
                                 ["diff", "{S}", str(BASIC)], ["quarantine", "list", "{S}"],
                                 ["rebuild", "cq", "--dry-run", "{S}"], ["stats", "--engine", "local", "{S}"]])
def test_a_store_path_with_odd_bytes_is_shown_escaped(odd_store, cmd):
    args = [str(odd_store) if a == "{S}" else a for a in cmd]
    r = run_cli(*args)
    _clean(r, 0, 4)
    assert b"\\x1b" in r.stdout + r.stderr or cmd[0] in ("stats",), (r.stdout + r.stderr)[-800:]


@pytest.mark.parametrize("cmd", [["dump", "--json", "{S}"], ["verify", "--json", "{S}"], ["diff", "--json", "{S}",
                                                                                          str(BASIC)]])
def test_json_naming_an_odd_path_is_valid_utf8_and_gives_the_name_back(odd_store, cmd):
    args = [str(odd_store) if a == "{S}" else a for a in cmd]
    r = run_cli(*args)
    _clean(r, 0, 4)
    docs = [json.loads(line) for line in r.stdout.decode("utf-8").splitlines()]
    assert any(str(odd_store) in v for v in _strings(docs))


def _strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_from_and_into_odd_paths(odd_store, tmp_path, fmt):
    r = run_cli("export", odd_store, "--engine", "local", "--format", fmt, "--out", tmp_path / "a")
    _clean(r, 0)
    out = odd_store.parent / f"out-{fmt}"
    r = run_cli("export", BASIC, "--engine", "local", "--format", fmt, "--out", out)
    _clean(r, 0)
    assert b"141 messages" in r.stdout
    assert sum(len(f) for _d, _s, f in os.walk(out)) > 1


def test_config_diff_shows_control_bytes_of_a_damaged_copy_escaped(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(BASIC, store)
    bak = store / "config" / "delayOffset.json.bak"
    bak.write_bytes(b'{"offsetTable":{"garbage\x1b[31mRED\x00":{}}}')
    for extra in ([], ["--json"]):
        r = run_cli("config", "diff", *extra, store, "delayOffset")
        _clean(r, 4)
        assert b"\x00" not in r.stdout
    assert b"garbage\\x1b[31mRED\\x00" in run_cli("config", "diff", store, "delayOffset").stdout


@pytest.mark.parametrize("kind", ["dledger_index", "dledger_data"])
@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 20])
def test_a_dledger_file_renamed_by_hand_is_dumped(tmp_path, kind, content):
    f = tmp_path / "renamed.bin"
    f.write_bytes(content)
    for extra in ([], ["--json"]):
        r = run_cli("dump", "--kind", kind, *extra, f)
        _clean(r, 0, 4)
