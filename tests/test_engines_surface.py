"""Every rmqctl command and subcommand (found by walking the click command tree) on the stores of the other
engines -- DLedger commitlogs (dledger-v5, crash-dledger-v5) and RocksDB consume queues/metadata (rocksdb-v5,
crash-rocksdb-v5) -- in text and --json: each either works (exit 0, 1 for a command that changed the store, 4
for problems it reports) or refuses in ONE line that names the engine (exit 8). Never a traceback, an internal
error, or a finding that calls the store damaged where the broker reads it fine.

Commands that change a store run on a copy; the Spark engine is never started here (its refusal on a DLedger
log comes before the JVM; its RocksDB reading is tested in test_rocksdb.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import FIXTURES, invoke_cli

STORES = {
    "dledger-v5": FIXTURES / "stores" / "dledger-v5" / "store",
    "crash-dledger-v5": FIXTURES / "stores" / "crash-dledger-v5" / "store",
    "rocksdb-v5": FIXTURES / "rocksdb-stores" / "rocksdb-v5" / "store",
    "crash-rocksdb-v5": FIXTURES / "rocksdb-stores" / "crash-rocksdb-v5" / "store",
}
ENGINE_WORDS = {"dledger": "DLedger", "rocksdb": "RocksDB"}
RMQCTL = Path(sys.executable).parent / "rmqctl"
# words that claim the store is damaged; fine in a finding the broker agrees with (the crash stores' own)
DAMAGE = re.compile(r"\b(corrupt|damaged|truncated|torn)\b", re.I)


def commands():
    """(path, click.Command) of every leaf command, walking the lazy groups."""
    from rmqctl.cli import cli

    out = []

    def walk(cmd, path, ctx):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                walk(sub, path + [name], click.Context(sub, parent=ctx, info_name=name))
        else:
            out.append((path, cmd))

    walk(cli, [], click.Context(cli, info_name="rmqctl"))
    return out


def _copy(src: Path, dest: Path) -> Path:
    # sparse-aware: a DLedger index file is 160 MiB of mostly zeros
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dest)], check=True)
    for p in [dest, *dest.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dest


def _topic(name: str) -> str:
    return {"dledger-v5": "DlA", "crash-dledger-v5": "CrashDl"}.get(name, "TopicA")


def choices(cmd) -> list:
    """The values of a command's Choice argument (rebuild cq|index), each run; [None] when it has none."""
    for p in cmd.params:
        if isinstance(p, click.Argument) and isinstance(p.type, click.Choice):
            return list(p.type.choices)
    return [None]


def argv_for(path, cmd, name: str, store: Path, tmp: Path, export_dir: Path, choice=None) -> list[str]:
    """Arguments for a command from its parameters' names: the store where one is wanted, small values for the
    other required ones (what a user would type on a store of this engine)."""
    topic = _topic(name)
    args: list[str] = []
    values = {"name": "topics", "path": "topicConfigTable." + topic, "value": "{}", "group": "GroupNew",
              "topic": topic + "New", "source": str(export_dir)}
    for p in cmd.params:
        if isinstance(p, click.Argument):
            if p.name in ("store", "target", "store_dir", "store_a", "store_b", "stores", "paths"):
                args.append(str(store))
            elif p.name == "args":                       # config diff A B
                args += [str(store), str(store)]
            elif isinstance(p.type, click.Choice):
                args.append(choice)
            elif p.name in values:
                args.append(values[p.name])
            elif p.required:
                raise AssertionError(f"no value for argument {p.name} of {' '.join(path)}")
        elif isinstance(p, click.Option) and (p.required or p.name == "out"):    # export: --out unless --schema
            opt = p.opts[0]
            v = {"--out": str(tmp / "out"), "--to": "127.0.0.1:1", "--level": "1", "--offset": "0",
                 "--group": "GroupA", "--topic": topic, "--queue": "0", "--from": "GroupA",
                 "--to-group": "GroupB"}.get(opt)
            if p.is_flag:
                args.append(opt)
            elif v is None:
                raise AssertionError(f"no value for option {opt} of {' '.join(path)}")
            else:
                args += [opt, v]
    extra = {("config", "offsets", "clone"): [], ("config", "offsets", "reset"): ["--to-earliest"],
             ("config", "groups", "update"): ["--retry-max", "3"], ("quarantine", "prune"): ["--keep", "1"],
             ("query",): ["--topic", topic, "--queue", "0", "--offset", "1"]}
    args += extra.get(tuple(path), [])
    if path == ["config", "offsets", "clone"]:
        args[args.index("--to") + 1] = "GroupB"
    if path == ["config", "diff"]:
        args = [str(store), "topics"]
    if path[:1] == ["config"] and path[-1] in ("delete", "update") and len(path) == 3:
        args[1] = values["topic"] if path[1] == "topics" else "GroupA" if path[1] == "groups" else args[1]
        args[1] = topic if path[1] == "topics" else args[1]
    if path in (["stats"], ["export"]):
        args += ["--engine", "local"]
    if path == ["replay"]:
        args += ["--dry-run"]
    return args


def _has_json(cmd) -> bool:
    return any(isinstance(p, click.Option) and "--json" in p.opts for p in cmd.params)


def _check(label: str, code: int, out: str, err: str, name: str) -> list[str]:
    problems = []
    both = out + err
    if label.split(": ", 1)[1].startswith("rmqctl undo") and "rocksdb" in name and code == 2 \
            and "nothing to undo" in err:
        return []     # no command changes a RocksDB store (each refuses), so there is never a journal to undo
    if "Traceback" in both or "internal error" in both.lower():
        problems.append(f"{label}: traceback/internal error: {err[-400:]}")
    if code == 8:
        lines = [x for x in err.strip().splitlines() if x.strip()]
        word = ENGINE_WORDS["dledger" if "dledger" in name else "rocksdb"]
        if len(lines) != 1 or word not in lines[0]:
            problems.append(f"{label}: exit 8 without one line naming the engine: {err.strip()[:400]}")
    elif code not in (0, 1, 4):
        problems.append(f"{label}: exit {code}: {err.strip()[:400]}")
    if not name.startswith("crash") and DAMAGE.search(both):
        problems.append(f"{label}: calls a store the broker reads fine damaged: {both[:400]}")
    return problems


def _template(cli, name, src: Path, dest: Path) -> Path:
    """A copy of the fixture as a broker leaves it. The DLedger fixtures were written by the store alone (no
    config managers): give the copy the config files a broker writes (topics, groups, offsets, each saved twice so
    that a .bak exists) and one repair journal (a config edit), so every config command and undo has its input."""
    store = _copy(src, dest)
    if "dledger" in name:
        topic = _topic(name)
        for argv in (["config", "topics", "create", store, topic], ["config", "topics", "create", store, topic + "B"],
                     ["config", "groups", "create", store, "GroupA"], ["config", "groups", "create", store, "GroupB"],
                     ["config", "offsets", "set", store, "--group", "GroupA", "--topic", topic, "--queue", "0",
                      "--offset", "1"],
                     ["config", "offsets", "set", store, "--group", "GroupA", "--topic", topic, "--queue", "1",
                      "--offset", "2"]):
            code, _, err = cli(*argv)
            assert code in (0, 1), (argv, err)
    return store


def _run_all(cli, tmp_path):
    cmds = commands()
    assert len(cmds) >= 30 and ["rebuild"] in [p for p, _ in cmds]     # the walk found the whole tree
    results = []
    for name, src in STORES.items():
        export_dir = tmp_path / name / "_exported"
        code, _, err = cli("export", "--engine", "local", "--format", "jsonl", "--out", export_dir, src)
        assert code == 0, err
        src = _template(cli, name, src, tmp_path / name / "_template")
        for path, cmd in cmds:
            for choice in choices(cmd):
                for mode in (["--json"] if _has_json(cmd) else []) + [None]:
                    work = tmp_path / name / ("_".join(path) + (choice or "") + (mode or ""))
                    work.mkdir(parents=True)
                    store = _copy(src, work / "store")
                    argv = path + argv_for(path, cmd, name, store, work, export_dir, choice) + ([mode] if mode else [])
                    code, out, err = cli(*argv)
                    results.append((name, path + ([choice] if choice else []), mode, argv, code, out, err))
    return results


@pytest.fixture(scope="module")
def surface(tmp_path_factory):
    return _run_all(invoke_cli, tmp_path_factory.mktemp("surface"))


def test_every_command_works_or_refuses_in_one_line(surface):
    problems = []
    for name, path, mode, _argv, code, out, err in surface:
        problems += _check(f"{name}: rmqctl {' '.join(path)} {mode or ''}", code, out, err, name)
    assert not problems, "\n".join(problems)


def test_json_output_is_json(surface):
    bad = []
    n = 0
    for name, path, mode, _argv, code, out, _err in surface:
        if mode == "--json" and code in (0, 1, 4) and out.strip():
            n += 1
            text = out.strip()
            try:
                json.loads(text)
            except ValueError:
                try:
                    [json.loads(line) for line in text.splitlines()]      # JSON Lines (dump)
                except ValueError:
                    bad.append(f"{name}: {' '.join(path)} --json: {text[:200]}")
    assert n > 40 and not bad, bad


def test_what_works_per_engine(surface):
    """The commands the documentation says work on each engine do (exit 0/1/4), not refuse."""
    works = {(n, " ".join(p)) for n, p, m, _a, c, _o, _e in surface if c in (0, 1, 4)}
    for name in STORES:
        for c in ("dump", "verify", "query", "stats", "export", "replay"):
            assert (name, c) in works, (name, c)
    for name in ("dledger-v5", "crash-dledger-v5"):
        assert (name, "rebuild cq") in works and (name, "rebuild index") in works
    for name in ("rocksdb-v5", "crash-rocksdb-v5"):
        assert (name, "config show") in works


def test_console_script_on_each_engine():
    """The installed entry point, a few commands per engine: same rules, real exit codes."""
    for name, src in STORES.items():
        more = {"dledger-v5": [["stats", "--engine", "local", "--json", src], ["recover", "--dry-run", src]],
                "crash-rocksdb-v5": [["stats", "--engine", "local", "--json", src], ["rebuild", "cq", src]]}
        for argv in [["verify", "--json", src]] + more.get(name, []):
            r = subprocess.run([str(RMQCTL), *map(str, argv)], capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
            problems = _check(f"{name}: {argv[0]}", r.returncode, r.stdout, r.stderr, name)
            assert not problems, problems


def test_export_engine_local_on_a_file_store_is_the_reference_rows(tmp_path):
    """`export --engine local` (no Spark) writes the rows of the reference walk (dataset.local_messages over
    CommitLog.records) on a file store too; the Spark-only layouts are usage errors with it."""
    import base64
    import datetime as dt

    from rmqctl.spark.dataset import MESSAGE_COLUMNS, local_messages

    store = FIXTURES / "stores" / "basic-multifile-v5" / "store"
    code, _, err = invoke_cli("export", "--engine", "local", "--format", "jsonl", "--out", tmp_path / "x", store)
    assert code == 0, err
    rows = [json.loads(x) for x in (tmp_path / "x" / "part-00000.json").read_text().splitlines()]
    names = [n for n, _ in MESSAGE_COLUMNS] + ["body", "body_note"]
    want = [dict(zip(names, r)) for r in local_messages(store, name="basic-multifile-v5", body=True)]
    for w in want:
        w["body"] = base64.b64encode(w["body"]).decode()
    for r in rows:          # the schema's timestamp columns are the ms columns, as UTC times
        for ts, ms in (("born_time", "born_timestamp"), ("store_time", "store_timestamp")):
            t = dt.datetime.fromtimestamp(r[ms] / 1000, dt.timezone.utc)
            assert r.pop(ts) == t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{r[ms] % 1000:03d}Z"
    assert rows == want and len(rows) > 100
    code, _, err = invoke_cli("export", "--engine", "local", "--partition-by", "topic", "--out", tmp_path / "y", store)
    assert code == 0 and (tmp_path / "y" / "topic=TopicA").is_dir(), err      # Parquet: the Spark layout
    code, _, err = invoke_cli("export", "--engine", "local", "--format", "jsonl", "--partition-by", "topic", "--out",
                           tmp_path / "z", store)
    assert code == 2 and "--engine spark" in err
