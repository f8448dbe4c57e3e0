"""`rmqctl config ...`: read and edit store/config/* the way the broker does.

Every reading command loads a file like ``ConfigManager.load()`` (main, else ``.bak``) and says on
stderr which copy was used and what the broker would do; it exits 4 when the main copy is not usable
(the broker would load ``.bak``, fail to start, or start with empty tables). Every writing command
has ``--dry-run`` (print the diff, write nothing) and ``--force`` (write although a broker holds the
store lock); writes keep the previous bytes in ``.bak`` and in the quarantine journal (``rmqctl undo``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl import fastjson
from rmqctl.cli.completion import complete_group, complete_topic
from rmqctl.cli.options import resolve_time, utc_option
from rmqctl.config import edit as ed
from rmqctl.config.files import EMPTY, FAIL, KINDS, LOAD_MAIN, Loaded, config_dir_of, load_config, locate
from rmqctl.errors import ProblemsFound, RmqError, UsageError
from rmqctl.status import Exit
from rmqctl.terminal import escape, warn

# -- shared plumbing -----------------------------------------------------------------------------------

_NAMES = ", ".join(KINDS)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")(f)


def write_options(f):
    f = click.option("--force", is_flag=True, help="Write even though a running broker holds the store lock.")(f)
    f = click.option("--dry-run", "-n", is_flag=True, help="Print the unified diff; write nothing.")(f)
    return f


def _emit_json(obj) -> None:
    """One object of this command's schema (rmqctl.config-<subcommand>/<n>), from the command being run."""
    from rmqctl.render import emit_json

    emit_json(_command_name(), obj)


def _command_name() -> str:
    """`rmqctl config offsets show` -> "config-offsets-show" (the man page's name, the schema's command)."""
    ctx = click.get_current_context()
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.command.name)
        ctx = ctx.parent
    return "-".join(reversed(names))


def _status_to_stderr(ld: Loaded) -> None:
    if ld.verdict != LOAD_MAIN or ld.main.status != "ok":
        warn(ld.summary())
        for n in ld.notes:
            warn(n)


def _copy_json(c) -> dict:
    d = {"path": str(c.path), "status": c.status, "size": c.size, "description": c.describe()}
    if c.error is not None:
        d["error"] = str(c.error)
    if c.stale_tail:
        d["stale_tail"] = {"value_end": c.stale_tail[0], "trailing_bytes": c.stale_tail[1]}
    m = c.meaning
    if m is not None:
        d["meaning"] = {"decode_error": m.decode_error, "entries": m.entries, "missing_tables": m.missing_tables,
                        "null_tables": m.null_tables, "unknown_keys": m.unknown_keys, "warnings": m.warnings}
    return d


def _loaded_json(ld: Loaded) -> dict:
    d = {"file": ld.target.kind.name, "path": str(ld.target.path), "used": ld.used, "verdict": ld.verdict,
         "main": _copy_json(ld.main), "bak": _copy_json(ld.bak), "notes": ld.notes}
    if ld.verdict != LOAD_MAIN:
        d["problem"] = ld.problem() if ld.verdict in (FAIL, EMPTY) else ld.summary()
    return d


def _load_for_read(where, name) -> Loaded:
    ld = load_config(locate(where, name))
    if ld.verdict in (FAIL, EMPTY):
        raise ProblemsFound(ld.problem(), path=ld.target.path)
    return ld


def _load_for_write(where, name) -> tuple[Loaded, dict]:
    """The document a write starts from: what the broker would load. Both copies missing -> a new,
    empty file (a fresh store). A main the broker loads as EMPTY (misspelt or null table) -> refused while
    .bak holds entries (the edit would bury them), else edited as it is. Anything else unusable -> refuse,
    exit 4, nothing written."""
    from rmqctl.config.persist import settle_before_edit

    target = locate(where, name)
    ctx = click.get_current_context(silent=True)
    settle_before_edit(target.store, dry_run=bool(ctx and ctx.params.get("dry_run")))
    ld = load_config(target)
    if ld.target.kind.binary:
        raise UsageError(f"{ld.target.kind.filename} is binary; rmqctl does not edit it")
    if ld.verdict in (FAIL, EMPTY):
        if ld.main.status == "missing" and ld.bak.status == "missing":
            warn(f"{ld.target.path.name} does not exist (nor .bak): creating it")
            return ld, {}
        bm = ld.bak.meaning
        bak_better = ld.bak.usable and bm is not None and not bm.empties and bool(bm.entries)
        m = ld.main.meaning
        if ld.used == "main" and m is not None and m.empties and not bak_better:
            warn(f"{ld.problem()}: editing main as it is")
            return ld, ld.doc
        hint = ""
        if bak_better and ld.used != ".bak":
            hint = f"; `rmqctl config restore {ld.target.store} {ld.kind.name} --from-bak` puts .bak back first"
        raise ProblemsFound(ld.problem() + "; nothing written" + hint, path=ld.target.path)
    if ld.used == ".bak":
        warn(f"{ld.summary()}: editing the .bak content; the bad main is kept in the quarantine journal")
    return ld, ld.doc


def _finish_write(ld: Loaded, doc, *, op: str, dry_run: bool, force: bool, as_json: bool, changes: list) -> int:
    from rmqctl.config.persist import persist

    res = persist(ld, doc, op=op, force=force, dry_run=dry_run)
    if as_json:
        _emit_json({"file": ld.target.kind.name, "path": str(res.path), "changes": changes, "changed": res.changed,
                    "written": res.written, "dry_run": dry_run, "journal": res.journal, "diff": res.diff,
                    "bak_updated": res.bak_updated, "bak_note": res.bak_note})
        return Exit.OK
    for c in changes:
        click.echo(c)
    if not res.changed:
        click.echo(f"{res.path}: no change")
    elif dry_run:
        sys.stdout.write(res.diff)
        click.echo("dry run: nothing written")
    else:
        click.echo(f"wrote {res.path}" + (" (previous content copied to .bak)" if res.bak_updated else ""))
        if res.bak_note:
            click.echo(res.bak_note)
        click.echo(f"undo: rmqctl undo {ld.target.store} --op {res.journal}")
    return Exit.OK


def _exit_for(ld: Loaded) -> int:
    return Exit.OK if ld.verdict == LOAD_MAIN and ld.used == "main" and ld.main.status == "ok" else Exit.PROBLEMS


def _table(headers: list[str], rows: list[list]) -> None:
    from rmqctl.tables import print_table

    print_table(headers, rows)


def _open_store(store_dir: Path):
    """The store's consume queues, or None (a bare config dir, or an unsupported store)."""
    if not (Path(store_dir) / "consumequeue").is_dir():
        return None
    try:
        from rmqctl.store import dledger
        from rmqctl.store.layout import Store

        if dledger.find(store_dir):    # DLedger commitlog: messages are read at their offsets in dledger-<id>/data/
            token = dledger.READING.set(True)
            ctx = click.get_current_context(silent=True)
            if ctx is not None:
                ctx.call_on_close(lambda: dledger.READING.reset(token))
        return Store.open(store_dir)
    except RmqError as e:
        warn(f"consume queues not read: {e}")
        return None


# -- the group ------------------------------------------------------------------------------------------


@click.group("config")
def config():
    """Read and edit store/config/* the way the broker does.

    TARGET is a store directory, its config/ directory, or a single config file. NAME is one of
    topics, subscriptionGroup, consumerOffset, lmqConsumerOffset, delayOffset, consumerFilter,
    consumerOrderInfo, topicQueueMapping, messageRequestMode, timermetrics, transactionMetrics,
    timercheck (or the file name). Files are read like the broker's ConfigManager.load(): the main
    file, else its .bak; stderr says which copy was used and what the broker would do.

    \b
    Example:
      rmqctl config status /data/rocketmq/store
      rmqctl config show /data/rocketmq/store consumerOffset
      rmqctl config offsets reset /data/rocketmq/store --group G --topic T --to-time 2024-05-01T00:00:00Z
    """


@config.command("status")
@click.argument("target", type=click.Path(path_type=Path))
@json_option
def status(target, as_json):
    """What the broker would do with each config file: load main, load .bak, fail to start, or start
    with EMPTY tables. Exits 4 when any file is not loaded from a good main copy.

    \b
    Example:
      rmqctl config status /data/rocketmq/store
      rmqctl config status store/config --json | jq -r .verdict
    """
    _, cdir = config_dir_of(target)
    code = Exit.OK
    rows = []
    for kind in KINDS.values():
        p = cdir / kind.filename
        if not (p.exists() or p.with_name(p.name + ".bak").exists()):
            continue
        ld = load_config(locate(cdir, kind.name))
        if _exit_for(ld) != Exit.OK:
            code = Exit.PROBLEMS
        if as_json:
            _emit_json(_loaded_json(ld))
        else:
            rows.append([kind.filename, ld.main.describe(), ld.bak.describe(), ld.verdict_text])
    if not as_json:
        if not rows:
            warn(f"no known config files in {cdir}")
        else:
            _table(["FILE", "MAIN", ".BAK", "BROKER WOULD"], rows)
    return code


@config.command("show")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("name", required=False)
@json_option
def show(target, name, as_json):
    """Print a config file as the broker would load it (broker dialect), status on stderr.

    Exits 4 if the main copy is unusable (the content shown then comes from .bak).

    \b
    Example:
      rmqctl config show /data/rocketmq/store consumerOffset
      rmqctl config show store/config/topics.json --json
    """
    from rmqctl.store.rocksdb_cq import config_table

    rk = config_table(target, name)
    if rk is not None:                       # storeType=defaultRocksDB: the metadata RocksDB
        from rmqctl.cli.rocksdb_show import show_rocksdb

        return show_rocksdb(rk[0], rk[1], as_json, _emit_json)
    ld = load_config(locate(target, name))
    if as_json:
        d = _loaded_json(ld)
        d["content"] = fastjson.to_plain(ld.doc)
        _emit_json(d)
        return _exit_for(ld)
    _status_to_stderr(ld)
    if ld.verdict in (FAIL, EMPTY):
        raise ProblemsFound(ld.problem(), path=ld.target.path)
    if ld.kind.binary:
        for k, v in ld.doc.items():
            click.echo(f"{escape(k)}: {escape(v)}")
    else:
        click.echo(fastjson.dumps(ld.doc, compact=ld.kind.compact))
    return _exit_for(ld)


@config.command("get")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("name")
@click.argument("path")
@json_option
def get(target, name, path, as_json):
    """Print the value at PATH (e.g. offsetTable.TopicTest@GroupA.0).

    An all-digit segment is an integer key ({0:113085}) or an array index; quote a segment
    ("a.b") to force a string key. With --json, one object: {"schema", "file", "path", "key",
    "value"} (the value itself is "value").

    \b
    Example:
      rmqctl config get /data/rocketmq/store consumerOffset offsetTable.TopicTest@GroupA.0
      rmqctl config get store topics topicConfigTable.TopicTest --json
    """
    ld = _load_for_read(target, name)
    _status_to_stderr(ld)
    v = ed.get(ld.doc, path)
    if as_json:
        _emit_json({"file": ld.target.kind.name, "path": str(ld.target.path), "key": path,
                    "value": fastjson.to_plain(v)})
    elif isinstance(v, str):
        click.echo(escape(v))
    else:
        click.echo(fastjson.dumps(v))
    return _exit_for(ld)


@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("name")
@click.argument("path")
@click.argument("value")
@click.option("--string", "as_string", is_flag=True, help="Store VALUE as a string even if it looks like JSON.")
@write_options
@json_option
def set_cmd(target, name, path, value, as_string, dry_run, force, as_json):
    """Set the value at PATH to VALUE (broker JSON: 5, -3, true, "x", {0:1}; a bare word is a string).

    Setting a field of a topic or group that does not exist yet creates the whole entry first with the
    fields the broker fills (as `config topics create` / `config groups create`).

    \b
    Example:
      rmqctl config set /data/rocketmq/store consumerOffset offsetTable.TopicTest@GroupA.0 1000 --dry-run
      rmqctl config set store topics topicConfigTable.TopicTest.perm 4
    """
    ld, doc = _load_for_write(target, name)
    try:
        old_v = ed.get(doc, path)
    except UsageError:
        old_v = None
    new_v = ed.parse_value(value, old=old_v, as_string=as_string)
    created = ed.fill_new_entry(ld.kind.name, doc, path, new_v)
    old = ed.set_(doc, path, new_v)
    change = f"{path}: {_short(old)} -> {_short(new_v)}"
    return _finish_write(ld, doc, op=f"config-set-{ld.kind.name}", dry_run=dry_run, force=force,
                         as_json=as_json, changes=[created] if created else [change])


@config.command("delete")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("name")
@click.argument("path")
@write_options
@json_option
def delete_cmd(target, name, path, dry_run, force, as_json):
    """Delete the key or array element at PATH.

    \b
    Example:
      rmqctl config delete /data/rocketmq/store consumerOffset offsetTable.TopicTest@OldGroup --dry-run
    """
    ld, doc = _load_for_write(target, name)
    old = ed.delete(doc, path)
    return _finish_write(ld, doc, op=f"config-delete-{ld.kind.name}", dry_run=dry_run, force=force,
                         as_json=as_json, changes=[f"deleted {path} (was {_short(old)})"])


def _short(v, limit: int = 60) -> str:
    if v is None:
        return "(none)"
    s = v if isinstance(v, str) else fastjson.dumps(v, compact=True)
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[:limit - 3] + "..."


@config.command("diff")
@click.argument("args", nargs=-1, required=True)
@json_option
def diff(args, as_json):
    """Compare main with .bak (TARGET NAME), or the same file in two stores (STORE1 STORE2 NAME).

    Compares the parsed content (broker dialect): copies whose bytes differ only in layout
    (whitespace, indentation, key order) are reported as such and exit 0; copies that differ in
    content print a unified diff and exit 4. Unreadable copies are compared as raw text.

    \b
    Example:
      rmqctl config diff /data/rocketmq/store consumerOffset
      rmqctl config diff /backup/store /data/rocketmq/store topics
    """
    from rmqctl.config.persist import unified_diff

    if len(args) == 2:
        t = locate(args[0], args[1])
        a_path, b_path = t.path.with_name(t.path.name + ".bak"), t.path
    elif len(args) == 3:
        ta, tb = locate(args[0], args[2]), locate(args[1], args[2])
        a_path, b_path = ta.path, tb.path
    elif len(args) == 1 and Path(args[0]).is_file():
        t = locate(args[0])
        a_path, b_path = t.path.with_name(t.path.name + ".bak"), t.path
    else:
        raise UsageError("usage: config diff TARGET NAME  |  config diff STORE1 STORE2 NAME")
    a = a_path.read_bytes() if a_path.exists() else None
    b = b_path.read_bytes() if b_path.exists() else None
    if a is None and b is None:
        raise UsageError(f"neither {a_path} nor {b_path} exists")
    d = unified_diff(a, b or b"", b_path, old_label=str(a_path), new_label=str(b_path))
    same = a == b or _same_content(a, b)
    if as_json:
        _emit_json({"a": str(a_path), "b": str(b_path), "identical": a == b, "same_content": same,
                    "layout_only": same and a != b, "diff": d})
    elif a != b and same:
        click.echo(f"{a_path} and {b_path}: same content; only the layout differs (whitespace, indentation, "
                   f"key order)")
    else:
        sys.stdout.write(d)
    return Exit.OK if same else Exit.PROBLEMS


def _same_content(a: bytes | None, b: bytes | None) -> bool:
    """Both parse (broker dialect) to the same document: tables are maps, so key order is layout too."""
    if a is None or b is None:
        return False
    try:
        return fastjson.loads(a) == fastjson.loads(b)
    except (RmqError, ValueError):
        return False


@config.command("restore")
@click.argument("target", type=click.Path(path_type=Path))
@click.argument("name", required=False)
@click.option("--from-bak", is_flag=True, required=True, help="Copy the .bak content back to the main file.")
@write_options
@json_option
def restore(target, name, from_bak, dry_run, force, as_json):
    """Put the .bak copy back as the main file, byte for byte (the old main goes to the journal).

    \b
    Example:
      rmqctl config restore /data/rocketmq/store consumerOffset --from-bak --dry-run
    """
    from rmqctl.config.persist import restore_from_bak, settle_before_edit

    where = locate(target, name)
    settle_before_edit(where.store, dry_run=dry_run)
    ld = load_config(where)
    res = restore_from_bak(ld, force=force, dry_run=dry_run, op=f"config-restore-{ld.kind.name}")
    if as_json:
        _emit_json({"path": str(res.path), "changed": res.changed, "written": res.written, "journal": res.journal,
                    "diff": res.diff})
    elif not res.changed:
        click.echo(f"{res.path}: already identical to .bak")
    elif dry_run:
        sys.stdout.write(res.diff)
        click.echo("dry run: nothing written")
    else:
        click.echo(f"restored {res.path} from .bak")
        click.echo(f"undo: rmqctl undo {ld.target.store} --op {res.journal}")
    return Exit.OK


# -- offsets --------------------------------------------------------------------------------------------


@config.group("offsets")
def offsets():
    """Consumer offsets (consumerOffset.json): show with lag, set, reset, clone.

    \b
    Example:
      rmqctl config offsets show /data/rocketmq/store --group GroupA
    """


@offsets.command("show")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--group", "-g", help="Only this consumer group.", shell_complete=complete_group)
@click.option("--topic", "-t", help="Only this topic.", shell_complete=complete_topic)
@json_option
def offsets_show(store, group, topic, as_json):
    """Committed offsets per group/topic/queue, with the queue's min/max offset and the lag
    (max - committed) from the local consume queues.

    \b
    Example:
      rmqctl config offsets show /data/rocketmq/store
      rmqctl config offsets show /data/rocketmq/store --group GroupA --json
    """
    from rmqctl.config import offsets as off

    ld = _load_for_read(store, "consumerOffset")
    _status_to_stderr(ld)
    rs = off.rows(ld.doc, group=group, topic=topic)
    off.add_lag(rs, _open_store(ld.target.store))
    if as_json:
        for r in rs:
            _emit_json(r.as_dict())
    else:
        _table(["GROUP", "TOPIC", "QUEUE", "OFFSET", "MIN", "MAX", "LAG"],
               [[r.group, r.topic, r.queue, r.offset, r.min, r.max, r.lag] for r in rs])
    return _exit_for(ld)


@offsets.command("set")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--group", "-g", required=True, shell_complete=complete_group)
@click.option("--topic", "-t", required=True, shell_complete=complete_topic)
@click.option("--queue", "-q", type=int, required=True, help="Queue id.")
@click.option("--offset", "offset", type=int, required=True, help="Next logical offset to consume.")
@click.option("--strict", is_flag=True, help="Refuse (exit 4) an offset outside the queue's [min, max] in this store.")
@write_options
@json_option
def offsets_set(store, group, topic, queue, offset, strict, dry_run, force, as_json):
    """Set one queue's committed offset. An offset outside the queue's [min, max] (from the store's
    consume queue) is written with a warning, or refused with --strict.

    \b
    Example:
      rmqctl config offsets set /data/rocketmq/store --group GroupA --topic TopicTest --queue 0 --offset 1000
    """
    from rmqctl.config import offsets as off

    ld, doc = _load_for_write(store, "consumerOffset")
    why = off.out_of_range(_open_store(ld.target.store), topic, queue, offset)
    if why and strict:
        raise ProblemsFound(f"{why}; refused (--strict)")
    if why:
        warn(why)
    old = off.set_offset(doc, topic, group, queue, offset)
    off.finish(doc)
    return _finish_write(ld, doc, op="offsets-set", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"{topic}@{group} queue {queue}: {_short(old)} -> {offset}"])


@offsets.command("reset")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--group", "-g", required=True, shell_complete=complete_group)
@click.option("--topic", "-t", required=True, shell_complete=complete_topic)
@click.option("--to-earliest", "mode", flag_value="earliest", help="Each queue's min offset.")
@click.option("--to-latest", "mode", flag_value="latest", help="Each queue's max offset (skip everything).")
@click.option("--to-time", "-s", "when", metavar="TIME",
              help="First message stored at/after TIME: epoch ms, ISO 8601, yyyy-MM-dd#HH:mm:ss:SSS, now or "
                   "-2h/-30m/-7d; no zone = local time (TZ).")
@utc_option
@click.option("--broker-version", type=click.Choice(["4", "5"]), default="5", show_default=True,
              help="--to-time rule of the broker line: 5 = first message at/after TIME (5.x), "
                   "4 = the message stored nearest to TIME (4.9.x getOffsetInQueueByTime).")
@write_options
@json_option
def offsets_reset(store, group, topic, mode, when, utc, broker_version, dry_run, force, as_json):
    """Reset every queue of TOPIC for GROUP offline, computed from the local consume queues and the
    commitlog store timestamps (like mqadmin resetOffsetByTime, with the broker down).

    \b
    Example:
      rmqctl config offsets reset /data/rocketmq/store -g GroupA -t TopicTest --to-time 2024-05-01T08:00:00Z -n
      rmqctl config offsets reset /data/rocketmq/store -g GroupA -t TopicTest --to-earliest
    """
    from rmqctl.config import offsets as off

    if when is not None and mode is not None or (when is None and mode is None):
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-time")
    ts = resolve_time("--to-time", when, utc)
    ld, doc = _load_for_write(store, "consumerOffset")
    st = _open_store(ld.target.store)
    topics_doc = None
    try:
        tl = load_config(locate(ld.target.config_dir, "topics"))
        topics_doc = tl.doc
    except RmqError:
        pass
    res = off.reset(doc, topic, group, mode or "time", st, timestamp=ts, topics_doc=topics_doc,
                    broker_version=int(broker_version))
    off.finish(doc)
    how = f"time {ts}" if ts is not None else mode
    changes = [f"{topic}@{group} queue {q}: {_short(o)} -> {n} ({how})" for q, o, n in res]
    return _finish_write(ld, doc, op="offsets-reset", dry_run=dry_run, force=force, as_json=as_json,
                         changes=changes)


@offsets.command("clone")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--from", "src", required=True, help="Source group.")
@click.option("--to", "dst", required=True, help="Destination group.")
@click.option("--topic", "-t", help="Only this topic.", shell_complete=complete_topic)
@write_options
@json_option
def offsets_clone(store, src, dst, topic, dry_run, force, as_json):
    """Copy every committed offset of one group to another (like mqadmin cloneGroupOffset).

    \b
    Example:
      rmqctl config offsets clone /data/rocketmq/store --from GroupA --to GroupB
    """
    from rmqctl.config import offsets as off

    ld, doc = _load_for_write(store, "consumerOffset")
    res = off.clone(doc, src, dst, topic=topic)
    off.finish(doc)
    changes = [f"{t}@{dst} queue {q}: {_short(o)} -> {n}" for t, q, o, n in res]
    return _finish_write(ld, doc, op="offsets-clone", dry_run=dry_run, force=force, as_json=as_json,
                         changes=changes)


# -- topics ---------------------------------------------------------------------------------------------


@config.group("topics")
def topics():
    """Topics (topics.json): list, create, update, delete.

    \b
    Example:
      rmqctl config topics list /data/rocketmq/store
    """


@topics.command("list")
@click.argument("store", type=click.Path(path_type=Path))
@json_option
def topics_list(store, as_json):
    """List topics with queue numbers and permissions.

    \b
    Example:
      rmqctl config topics list /data/rocketmq/store --json
    """
    from rmqctl.config import topics as tp

    ld = _load_for_read(store, "topics")
    _status_to_stderr(ld)
    rs = tp.rows(ld.doc)
    if as_json:
        for r in rs:
            _emit_json(fastjson.to_plain(r))
    else:
        _table(["TOPIC", "READ", "WRITE", "PERM", "ORDER", "ATTRIBUTES"],
               [[r["topic"], r["readQueueNums"], r["writeQueueNums"], tp.perm_text(r["perm"]), r["order"],
                 ",".join(f"{k}={v}" for k, v in r["attributes"].items())] for r in rs])
    return _exit_for(ld)


def _topic_opts(f):
    f = click.option("--order/--no-order", default=None, help="Ordered topic flag.")(f)
    f = click.option("--perm", "-p", type=click.IntRange(0, 7),
                     help="4 read + 2 write + 1 inherit (6 = read/write).")(f)
    f = click.option("--write-queues", "-w", type=int, help="writeQueueNums.")(f)
    f = click.option("--read-queues", "-r", type=int, help="readQueueNums.")(f)
    return f


@topics.command("create")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("topic")
@_topic_opts
@click.option("--attr", multiple=True, metavar="K=V", help="5.x attribute, e.g. queue.type=BatchCQ.")
@write_options
@json_option
def topics_create(store, topic, read_queues, write_queues, perm, order, attr, dry_run, force, as_json):
    """Create a topic (defaults: 8 read and 8 write queues, perm 6).

    \b
    Example:
      rmqctl config topics create /data/rocketmq/store NewTopic -r 4 -w 4
    """
    from rmqctl.config import topics as tp

    attrs = dict(a.split("=", 1) for a in attr if "=" in a)
    if len(attrs) != len(attr):
        raise UsageError("--attr takes K=V")
    ld, doc = _load_for_write(store, "topics")
    tp.create(doc, topic, read=8 if read_queues is None else read_queues,
              write=8 if write_queues is None else write_queues, perm=6 if perm is None else perm,
              order=bool(order), attributes=attrs or None)
    return _finish_write(ld, doc, op="topics-create", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"created topic {topic}"])


@topics.command("update")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("topic")
@_topic_opts
@write_options
@json_option
def topics_update(store, topic, read_queues, write_queues, perm, order, dry_run, force, as_json):
    """Change a topic's queue numbers, perm or order flag.

    \b
    Example:
      rmqctl config topics update /data/rocketmq/store TopicTest --perm 4 --dry-run
    """
    from rmqctl.config import topics as tp

    ld, doc = _load_for_write(store, "topics")
    ch = tp.update(doc, topic, read=read_queues, write=write_queues, perm=perm, order=order)
    return _finish_write(ld, doc, op="topics-update", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"{topic}.{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in ch.items()])


@topics.command("delete")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("topic")
@write_options
@json_option
def topics_delete(store, topic, dry_run, force, as_json):
    """Delete a topic from topics.json (its consume queues and offsets stay).

    \b
    Example:
      rmqctl config topics delete /data/rocketmq/store OldTopic --dry-run
    """
    from rmqctl.config import topics as tp

    ld, doc = _load_for_write(store, "topics")
    tp.delete(doc, topic)
    return _finish_write(ld, doc, op="topics-delete", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"deleted topic {topic}"])


# -- groups ---------------------------------------------------------------------------------------------


@config.group("groups")
def groups():
    """Subscription groups (subscriptionGroup.json): list, create, update, delete.

    \b
    Example:
      rmqctl config groups list /data/rocketmq/store
    """


@groups.command("list")
@click.argument("store", type=click.Path(path_type=Path))
@json_option
def groups_list(store, as_json):
    """List subscription groups and their retry/consume settings.

    \b
    Example:
      rmqctl config groups list /data/rocketmq/store
    """
    from rmqctl.config import groups as gp

    ld = _load_for_read(store, "subscriptionGroup")
    _status_to_stderr(ld)
    rs = gp.rows(ld.doc)
    if as_json:
        for r in rs:
            _emit_json(r)
    else:
        _table(["GROUP", "RETRY_MAX", "RETRY_QUEUES", "BROADCAST", "CONSUME", "FROM_MIN", "ORDERLY"],
               [[r["group"], r["retryMaxTimes"], r["retryQueueNums"], r["consumeBroadcastEnable"],
                 r["consumeEnable"], r["consumeFromMinEnable"], r["consumeMessageOrderly"]] for r in rs])
    return _exit_for(ld)


def _group_opts(f):
    f = click.option("--set", "extra", multiple=True, metavar="FIELD=VALUE",
                     help="Any other SubscriptionGroupConfig field, e.g. consumeTimeoutMinute=30.")(f)
    f = click.option("--consume-orderly/--no-consume-orderly", "consumeMessageOrderly", default=None)(f)
    f = click.option("--consume-from-min/--no-consume-from-min", "consumeFromMinEnable", default=None)(f)
    f = click.option("--consume/--no-consume", "consumeEnable", default=None, help="consumeEnable.")(f)
    f = click.option("--broadcast/--no-broadcast", "consumeBroadcastEnable", default=None,
                     help="consumeBroadcastEnable.")(f)
    f = click.option("--retry-queues", "retryQueueNums", type=int, help="retryQueueNums.")(f)
    f = click.option("--retry-max", "retryMaxTimes", type=int, help="retryMaxTimes.")(f)
    return f


def _group_settings(kw: dict, extra) -> dict:
    from rmqctl.config.groups import FIELDS

    s = {k: v for k, v in kw.items() if v is not None}
    for item in extra:
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"--set takes FIELD=VALUE, got {item!r}")
        typ = FIELDS.get(k)
        if typ is bool:
            if v.lower() not in ("true", "false"):
                raise UsageError(f"{k} takes true or false")
            s[k] = v.lower() == "true"
        elif typ is int:
            try:
                s[k] = int(v)
            except ValueError:
                raise UsageError(f"{k} takes an integer") from None
        else:
            s[k] = ed.parse_value(v)
    return s


@groups.command("create")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("group")
@_group_opts
@write_options
@json_option
def groups_create(store, group, extra, dry_run, force, as_json, **kw):
    """Create a subscription group with the broker's defaults (retryMaxTimes 16, retryQueueNums 1).

    \b
    Example:
      rmqctl config groups create /data/rocketmq/store GroupC --retry-max 3 --no-broadcast
    """
    from rmqctl.config import groups as gp

    ld, doc = _load_for_write(store, "subscriptionGroup")
    gp.create(doc, group, _group_settings(kw, extra))
    return _finish_write(ld, doc, op="groups-create", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"created group {group}"])


@groups.command("update")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("group")
@_group_opts
@write_options
@json_option
def groups_update(store, group, extra, dry_run, force, as_json, **kw):
    """Change a group's retry, broadcast or consume settings.

    \b
    Example:
      rmqctl config groups update /data/rocketmq/store GroupA --retry-max 5 --dry-run
    """
    from rmqctl.config import groups as gp

    s = _group_settings(kw, extra)
    if not s:
        raise UsageError("nothing to change: give at least one setting")
    ld, doc = _load_for_write(store, "subscriptionGroup")
    ch = gp.update(doc, group, s)
    return _finish_write(ld, doc, op="groups-update", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"{group}.{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in ch.items()])


@groups.command("delete")
@click.argument("store", type=click.Path(path_type=Path))
@click.argument("group")
@write_options
@json_option
def groups_delete(store, group, dry_run, force, as_json):
    """Delete a subscription group (its offsets stay in consumerOffset.json).

    \b
    Example:
      rmqctl config groups delete /data/rocketmq/store OldGroup
    """
    from rmqctl.config import groups as gp

    ld, doc = _load_for_write(store, "subscriptionGroup")
    gp.delete(doc, group)
    return _finish_write(ld, doc, op="groups-delete", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"deleted group {group}"])


# -- delay ----------------------------------------------------------------------------------------------


@config.group("delay")
def delay():
    """Delay offsets (delayOffset.json): per delay level, the next SCHEDULE_TOPIC_XXXX offset.

    \b
    Example:
      rmqctl config delay show /data/rocketmq/store
    """


@delay.command("show")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--broker-config", type=click.Path(dir_okay=False, exists=True), envvar="RMQCTL_BROKER_CONFIG",
              help="broker.conf (or JSON) whose messageDelayLevel names the levels [default: the broker's "
                   "18 levels, 1s ... 2h; env RMQCTL_BROKER_CONFIG].")
@json_option
def delay_show(store, broker_config, as_json):
    """Per delay level: delayOffset.json's offset beside the SCHEDULE_TOPIC_XXXX queue it drives.

    For level L (queue L-1): OFFSET is delayOffset.json's entry (empty: absent, the broker starts at 0),
    MIN/MAX the queue's offsets, PENDING the messages from where the broker resumes (OFFSET clamped to
    [MIN, MAX], as its delivery task does) to MAX, EARLIEST/LATEST the due times of those messages (the
    units' tagsCode: store time + the level's delay), in UTC.

    --json: JSON Lines, one object per level: schema ("rmqctl.config-delay-show/1"), level, delay,
    delay_ms, queue, offset (null when absent), min, max, start, pending, earliest_due_ms,
    latest_due_ms (null without a queue or pending message).

    \b
    Example:
      rmqctl config delay show /data/rocketmq/store
      rmqctl config delay show /data/rocketmq/store --json --broker-config /etc/rocketmq/broker.conf
    """
    from rmqctl.config.delay_pending import level_rows
    from rmqctl.render import fmt_time
    from rmqctl.store.config import StoreConfig

    ld = load_config(locate(store, "delayOffset"))
    absent = ld.main.status == "missing" and ld.bak.status == "missing"
    if ld.verdict == FAIL or (ld.verdict == EMPTY and not absent):
        raise ProblemsFound(ld.problem(), path=ld.target.path)
    if absent:   # a store whose broker never persisted delay offsets: every level starts at 0
        warn(f"{ld.target.path}: missing, and no .bak: the broker starts every delay level at offset 0")
    else:
        _status_to_stderr(ld)
    st = _open_store(ld.target.store)
    levels = StoreConfig.from_file(broker_config).delay_levels if broker_config else StoreConfig().delay_levels
    rs = level_rows(None if absent else ld.doc, st, levels)
    if as_json:
        for r in rs:
            _emit_json({"schema": "rmqctl.config-delay-show/1", **r})
    else:
        def due(ms):
            return None if ms is None else fmt_time(ms)

        _table(["LEVEL", "DELAY", "QUEUE", "OFFSET", "MIN", "MAX", "PENDING", "EARLIEST_DUE", "LATEST_DUE"],
               [[r["level"], r["delay"], r["queue"], r["offset"], r["min"], r["max"], r["pending"],
                 due(r["earliest_due_ms"]), due(r["latest_due_ms"])] for r in rs])
    return Exit.OK if absent else _exit_for(ld)


@delay.command("set")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--level", "-l", type=int, required=True, help="Delay level (1-based).")
@click.option("--offset", "offset", type=int, required=True)
@write_options
@json_option
def delay_set(store, level, offset, dry_run, force, as_json):
    """Set the offset of one delay level.

    \b
    Example:
      rmqctl config delay set /data/rocketmq/store --level 3 --offset 120
    """
    from rmqctl.config import delay as dl

    ld, doc = _load_for_write(store, "delayOffset")
    old = dl.set_level(doc, level, offset)
    return _finish_write(ld, doc, op="delay-set", dry_run=dry_run, force=force, as_json=as_json,
                         changes=[f"level {level}: {_short(old)} -> {offset}"])
