"""rmqctl dump: any store file, a directory of them, or a whole store."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl import dumping
from rmqctl.cli.completion import complete_topic
from rmqctl.cli.options import body_option, build_store_config, json_option, store_config_options
from rmqctl.errors import FormatError, UsageError
from rmqctl.render import json_line, message_json, message_text
from rmqctl.status import Exit
from rmqctl.terminal import escape


@click.command("dump")
@click.argument("paths", metavar="[PATH]...", nargs=-1, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--kind", type=click.Choice(dumping.KIND_NAMES), help="File kind, when the path does not tell.")
@json_option
@body_option
@click.option("--from", "skip", type=click.IntRange(min=0), default=0, help="Skip the first N records/units.")
@click.option("--count", type=click.IntRange(min=0), default=None, help="Print at most N records/units.")
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="commitlog: start at this physical offset (must be a record start).")
@click.option("--topic", help="commitlog: only messages of this topic.", shell_complete=complete_topic)
@click.option("--queue", type=int, help="commitlog: only messages of this queue id.")
@click.option("--slots", is_flag=True, help="index: also list the non-empty hash slots.")
@click.option("--no-crc", is_flag=True, help="commitlog: do not check body CRCs.")
@click.option("--explain", is_flag=True, help="Print the byte layout of the file kind (from the schema) and exit.")
@store_config_options
def dump(paths, kind, as_json, body, raw_body, skip, count, offset, topic, queue, slots, no_crc, explain, broker_config,
         index_slots, index_items):
    """Print store files as readable lines, or as JSON Lines with --json.

    Each PATH may be one file (its kind comes from its place in the store: commitlog/, consumequeue/T/Q/,
    index/, checkpoint, config/*.json ...), a directory of files of one kind (commitlog/, a queue
    directory), or a whole store root, which is summarised. After the records, a trailer accounts
    for the rest of the file: "N zero bytes after the last record" (normal), or "N invalid bytes at
    offset X" (damage: exit 4, with a one-line error naming file, offset and field). With several
    PATHs, a damaged file is reported and the next one is still dumped.

    JSON Lines (--json): one object per record, "schema" ("rmqctl.dump/1") first, then "kind":
    message, cq_unit, bcq_unit, compaction_cq_unit (logical_offset = msg_base_offset),
    cq_ext_unit, index_header, index_slot, index_item, timerlog_unit,
    timerwheel_slot, checkpoint, timercheck, abort, lock, config, store (a whole store), and a
    "trailer" ending every file (valid_bytes, trailing: none|zeros|blank|end_filler|invalid, trailing_bytes, and
    "problem" when damaged). Every field of every kind: FIELDS in man rmqctl-dump.
    A compressed body (SYSFLAG 0x1) is shown decompressed (--raw-body: as stored) and adds
    body_compression (zlib|lz4|zstd|unknown(N)), body_decompressed (bool), body_decompressed_length,
    and body_note when it could not be decompressed (unknown type, corrupt stream: shown as stored).

    \b
    Example:
      rmqctl dump store/commitlog/00000000000000000000 --count 5
      rmqctl dump store/consumequeue/TopicTest/0 --json | jq .physical_offset
      rmqctl dump store/index/20240101120000000 --index-slots 5000000 --index-items 20000000
      rmqctl dump store            # summary of a whole store
      rmqctl dump store/checkpoint store/abort store/config/topics.json
      rmqctl dump --explain --kind commitlog
    """
    if explain:
        from rmqctl.explain import explain_kind

        if not kind and not paths:
            raise UsageError("--explain needs --kind or a PATH")
        rocks = not kind and paths and (Path(paths[0]) / "CURRENT").is_file()    # a RocksDB directory
        sys.stdout.write(explain_kind("rocksdb_cq" if rocks else kind or dumping.detect_kind(Path(paths[0]))) + "\n")
        return Exit.OK
    if not paths:
        raise UsageError("missing PATH (a store file, a directory of them, or a store root)")
    cfg = build_store_config(broker_config, index_slots, index_items)
    body = body or ("base64" if as_json else "text")
    emit = _Emitter(as_json, body, raw_body)
    problems, errors = [], []
    for path in map(Path, paths):
        try:
            _dump_one(path, emit, problems, kind=kind, cfg=cfg, skip=skip, count=count, offset=offset, topic=topic,
                      queue=queue, slots=slots, check_crc=not no_crc)
        except FormatError as e:
            if len(paths) == 1:
                raise
            errors.append(e)
            _report(e)
    if problems:
        f, p = problems[0]
        n = len(problems) - 1 + len(errors)
        more = f" (and {n} more files)" if n else ""
        raise FormatError(f"{p['check']}: {p['detail']}{more}", path=f, offset=p["offset"], field=p.get("field"))
    if errors:
        return Exit.PROBLEMS
    return Exit.OK


def _report(e) -> None:
    """One damaged file among several: its error line now, the next file next."""
    from rmqctl.terminal import escape

    sys.stdout.flush()
    sys.stderr.write(f"rmqctl: {escape(e)}\n")


def _dump_one(path: Path, emit, problems: list, *, kind, cfg, **kw) -> None:
    if path.is_dir() and kind is None and _is_store_root(path):
        from rmqctl.store.layout import Store
        from rmqctl.summary import summarize
        from rmqctl.store import dledger

        if dledger.find(path):
            from rmqctl.dledger_view import summary as dledger_summary

            emit.item(dledger_summary(Store(path, cfg)))
            return
        emit.summary(summarize(Store(path, cfg)))
        return
    if path.is_dir() and kind is None and (path / "CURRENT").is_file():     # a RocksDB (storeType=defaultRocksDB)
        from rmqctl.store.rocksdb_cq import dump_dir

        for item in dump_dir(path, topic=kw.get("topic"), queue=kw.get("queue"), skip=kw.get("skip") or 0,
                             count=kw.get("count")):
            emit.item(item)
        return
    files = _files_of(path) if path.is_dir() else [_named_file(path)]
    k = kind or dumping.detect_kind(files[0] if files else path / ("0" * 20))
    cfg = _with_store_inference(cfg, path)
    for f in files:
        for item in _json_batch(f, k, emit, kw) or _records(f, k, cfg, **kw):
            emit.item(item)
            if isinstance(item, tuple):
                item = item[1]
            if isinstance(item, dict) and item.get("problem"):
                problems.append((item["file"], item["problem"]))


def _is_store_root(path: Path) -> bool:
    return any((path / n).exists() for n in ("commitlog", "consumequeue", "checkpoint", "config", "index")) or any(
        p.name.startswith("dledger-") for p in path.iterdir())


def _files_of(d: Path) -> list[Path]:
    """The directory's regular files; a link out of the store or a special file is named on stderr, skipped."""
    from rmqctl.store.files import read_refusal
    from rmqctl.terminal import warn

    from rmqctl.store.files import check_named, store_root_of

    check_named(d)
    root = store_root_of(d / "x")
    out = []
    for p in sorted(d.iterdir(), key=lambda p: p.name):
        if p.is_dir() and not p.is_symlink():
            continue
        why = read_refusal(p, root)
        if why:
            warn(f"{p}: {why}")
        else:
            out.append(p)
    return out


def _named_file(path: Path) -> Path:
    """A file named on the command line: refused (one line, exit 8) when it is a link out of its
    store or not a regular file (a FIFO or device would block or never end)."""
    from rmqctl.store.files import check_named

    check_named(path)
    return path


def _with_store_inference(cfg, path: Path):
    """Sizes not given come from the files of the store the path belongs to."""
    from rmqctl.store.config import infer
    from rmqctl.store.layout import find_store_root

    try:
        return infer(cfg, find_store_root(path))
    except Exception:  # noqa: BLE001 - a lone file outside a store: keep defaults
        return cfg


def _json_batch(f: Path, kind: str, emit, kw: dict):
    """--json of a commitlog: whole windows of records rendered at once (rmqctl.dump_json_batch), unless
    RMQCTL_DUMP_JSON=record asks for the record-at-a-time path (same bytes, slower)."""
    import os

    if not emit.as_json or kind not in ("commitlog", "compaction_log"):
        return None
    if os.environ.get("RMQCTL_DUMP_JSON") == "record":
        return None
    return dumping.commitlog_json(f, body=emit.body, raw_body=emit.raw_body, skip=kw["skip"], count=kw["count"],
                                  topic=kw["topic"], queue=kw["queue"], check_crc=kw["check_crc"],
                                  from_offset=kw["offset"])


def _records(f: Path, kind: str, cfg, *, skip, count, offset, topic, queue, slots, check_crc):
    if kind in ("commitlog", "compaction_log"):
        yield from dumping.commitlog_file(f, skip=skip, count=count, topic=topic, queue=queue, check_crc=check_crc,
                                          from_offset=offset)
    elif kind == "consumequeue":
        yield from dumping.consumequeue_file(f, skip=skip, count=count)
    elif kind == "batchconsumequeue":
        yield from dumping.batch_consumequeue_file(f, skip=skip, count=count)
    elif kind == "compaction_cq":
        yield from dumping.compaction_cq_file(f, skip=skip, count=count)
    elif kind == "consumequeue_ext":
        yield from dumping.consumequeue_ext_file(f, skip=skip, count=count)
    elif kind == "index":
        yield from dumping.index_file(f, cfg.hash_slot_num, cfg.index_num, skip=skip, count=count, slots=slots)
    elif kind in ("dledger_data", "dledger_index", "dledger_checkpoint"):
        from rmqctl import dledger_view as dv

        fn = {"dledger_data": dv.data_file, "dledger_index": dv.index_file,
              "dledger_checkpoint": dv.properties_file}[kind]
        yield from fn(f, skip=skip, count=count)
    elif kind == "timerlog":
        yield from dumping.timerlog_file(f, skip=skip, count=count)
    else:
        fn = {"checkpoint": dumping.checkpoint_file, "abort": dumping.abort_file, "lock": dumping.lock_file,
              "timerwheel": dumping.timerwheel_file, "timercheck": dumping.timercheck_file,
              "config": dumping.config_file}[kind]
        yield from fn(f, skip=skip, count=count)


class _Emitter:
    def __init__(self, as_json: bool, body: str, raw_body: bool = False):
        self.as_json, self.body, self.raw_body = as_json, body, raw_body
        self.out = sys.stdout
        self.first = True

    def item(self, item):
        if isinstance(item, tuple):          # ("message", Record) / ("trailer", dict)
            tag, val = item
            if tag == "lines":               # UTF-8 JSON Lines of many records (rmqctl.dump_json_batch)
                self._write_bytes(val)
                return
            if tag == "message":
                if self.as_json:
                    self.out.write(message_json(val, self.body, self.raw_body) + "\n")
                else:
                    if not self.first:
                        self.out.write("\n")
                    self.out.write(message_text(val, self.body, raw_body=self.raw_body) + "\n")
                self.first = False
                return
            item = val
        if self.as_json:
            self.out.write(json_line("dump", item) + "\n")
        elif item.get("kind") == "trailer":
            self.out.write(dumping.trailer_text(item, item["file"]) + "\n")
            if item.get("note"):
                self.out.write(f"# note: {escape(item['note'])}\n")
        else:
            self.out.write(_line(item) + "\n")

    def _write_bytes(self, data: bytes):
        """Straight to the binary stream under a UTF-8 stdout (same bytes as writing the text)."""
        out = self.out
        inner = getattr(out, "_inner", out)
        raw = getattr(inner, "buffer", None)
        enc = (getattr(inner, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if raw is None or enc != "utf8" or getattr(out, "_guard", False):
            out.write(str(data, "utf-8"))      # bytes or a memoryview (rmqctl.dump_json_batch.lines)
            return
        out.flush()
        try:
            raw.write(data)
        except OSError as e:
            gone = getattr(out, "_gone", None)
            if gone is None:
                raise
            gone(e)

    def summary(self, s: dict):
        if self.as_json:
            self.out.write(json_line("dump", s) + "\n")
            return
        from rmqctl.cli.summary_text import render_summary

        render_summary(s)


def _line(d: dict) -> str:
    kind = d.get("kind", "")
    if kind == "config":
        import json

        head = (f"# {escape(d['file'])}: used {d['used'] or 'nothing'}; broker would {escape(d['verdict'])}; "
                f"main {escape(d['main'])}; .bak {escape(d['bak'])}")
        notes = "".join(f"\n# note: {escape(n)}" for n in d.get("notes", []))
        return head + notes + "\n" + json.dumps(d["content"], indent=2, ensure_ascii=False)
    fields = " ".join(f"{k}={escape(v)}" for k, v in d.items() if k != "kind")
    return f"{kind} {fields}"
