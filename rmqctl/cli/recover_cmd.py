"""`rmqctl recover` and `rmqctl rebuild cq|index`: change a store, with a plan, a quarantine and undo."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl.cli.completion import complete_topic
from rmqctl.cli.options import default_jobs, jobs_option, require_store
from rmqctl.errors import UsageError

RECOVER_EXITS = """\b
Exit status:
  0  nothing to do (with --dry-run: nothing would change)
  1  repaired (the broker will run a normal recovery)
  4  could not repair (a problem rmqctl will not fix by itself; nothing was changed) /
     with --dry-run: changes are needed
  8  could not run (store locked by a running broker, I/O error, read-only or full disk: the store
     is left unchanged)"""


def _config(store_dir: Path, conf: str | None):
    from rmqctl.store.config import StoreConfig

    return None if conf is None else StoreConfig.from_file(conf)


def _broker_config_options(f):
    """--broker-config [env RMQCTL_BROKER_CONFIG], as in every other command; --config stays as a hidden alias."""
    f = click.option("--config", "conf_alias", type=click.Path(dir_okay=False, exists=True), hidden=True)(f)
    return click.option("--broker-config", "conf", type=click.Path(dir_okay=False, exists=True),
                        envvar="RMQCTL_BROKER_CONFIG",
                        help="broker.conf (or JSON, or a fixture manifest.json) giving the store's file sizes and "
                             "delay levels [env RMQCTL_BROKER_CONFIG].")(f)


def _one_conf(conf, conf_alias):
    return conf_alias if conf_alias is not None else conf   # the old name, when given, wins over the env var


def _progress(total: int, desc: str, unit: str = "B"):
    from rmqctl.terminal import progress

    return progress(max(total, 1), desc, unit)


def _emit(ctx, as_json: bool, extra: dict, command: str) -> None:
    if as_json:
        from rmqctl.render import emit_json

        d = ctx.plan.to_json()
        d.update(extra)
        emit_json(command, d)
        sys.stdout.flush()
        return
    from rmqctl.terminal import escape

    # a damaged topic name (NUL, control bytes) stays one line of text on a pipe too, as in verify's findings
    lines = ctx.plan.text_lines() + [f"{k}: {v}" for k, v in extra.items()]
    sys.stdout.write("".join(escape(line) + "\n" for line in lines))
    sys.stdout.flush()


def _run(store_dir: str, conf: str | None, dry_run: bool, as_json: bool, op: str, build) -> int:
    """Parse, call the library's transaction (rmqctl.repair.transaction.run), render."""
    from rmqctl.repair import transaction as T

    root = require_store(store_dir)   # before the lock: nothing may be created in a directory that is not a store
    out = T.run(root, T.StoreJob(op, build), config=_config(root, conf), dry_run=dry_run, progress=_progress,
                warn=_warn)
    _emit(out.planned, as_json, _outcome_fields(out, root), op.split("-")[0])
    return out.status


def _outcome_fields(out, root: Path) -> dict:
    if out.dry_run:
        extra = {"dry_run": True}
        if out.unfinished:
            extra["rolled_back_first"] = (", ".join(out.unfinished) + " (interrupted; a real run rolls it back "
                                          "first, this plan is of the store as the interruption left it)")
        return extra
    if not out.applied:
        return {"applied": False}
    extra = {"applied": True, "journal": str(out.journal), "undo": f"rmqctl undo {root} --op {out.op_name}"}
    if out.rolled_back:
        extra["rolled_back_first"] = ", ".join(out.rolled_back)
    return extra


def _warn(text: str) -> None:
    sys.stderr.write(f"rmqctl: {text}\n")


@click.command(epilog=RECOVER_EXITS)
@click.argument("store_dir", type=click.Path(file_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the plan (and what the broker would do); change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as one JSON object.")
@click.option("--on-corruption", type=click.Choice(["stop", "quarantine"]), default="stop", show_default=True,
              help="A corrupt record followed by valid ones: stop there like the broker (the rest goes to the "
                   "quarantine), or replace the bad range by a placeholder record and keep what follows.")
@click.option("--from-start", is_flag=True,
              help="Validate and re-dispatch from the first commitlog file, not from the file the broker's own "
                   "recovery would start at (slower; catches queues lagging further back).")
@_broker_config_options
@jobs_option
@click.option("--apply", is_flag=True, hidden=True, help="Accepted for scripts; applying is the default.")
def recover(store_dir, dry_run, as_json, on_corruption, from_start, conf, conf_alias, jobs, apply):
    """Offline abnormal recovery: bring a crashed store back to a state the broker accepts.

    Does what the broker does after an unclean shutdown -- find the last valid record, truncate the
    commitlog's dirty tail, drop consume-queue units and index items beyond it, dispatch every valid
    record missing from its consume queue and the index, set the checkpoint, clamp the timer
    checkpoint (config/timercheck) to what is left, remove `abort` -- but
    offline, explained, and with every removed or overwritten byte saved first in
    STORE_DIR/rmqctl-quarantine/ (`rmqctl undo STORE_DIR` restores it bit-exact). Refuses to run
    while a broker holds the store lock. A run killed at any point can simply be run again.

    \b
    Example:
      rmqctl recover --dry-run /data/rocketmq/store        # the plan, nothing changes
      rmqctl recover /data/rocketmq/store                  # repair
      rmqctl recover --on-corruption quarantine --json /data/rocketmq/store
      rmqctl undo /data/rocketmq/store                     # put everything back
    """
    from rmqctl.store import dledger

    if dledger.find(store_dir):
        from rmqctl.dledger_view import refuse_recover

        refuse_recover(store_dir)   # exit 8, saying what DLedger's own recovery will keep and cut
    from rmqctl.repair import recover as R
    from rmqctl.repair.rocksdb_plan import refuse_offline_write

    refuse_offline_write(store_dir, "recover")
    opts = R.Options(on_corruption=on_corruption, from_start=from_start)

    def build(store, staging, pg):
        from rmqctl.allocator import for_long_passes

        opts.jobs = jobs or default_jobs(store)
        for_long_passes()
        return R.analyze(store, opts, staging, progress=pg)

    return _run(store_dir, _one_conf(conf, conf_alias), dry_run, as_json, "recover", build)


@click.command(epilog=RECOVER_EXITS)
@click.argument("what", type=click.Choice(["cq", "index"]))
@click.argument("store_dir", type=click.Path(file_okay=False))
@click.option("--topic", help="Only this topic's consume queues (cq).", shell_complete=complete_topic)
@click.option("--queue", type=int, help="Only this queue id (cq).")
@click.option("--dry-run", is_flag=True, help="Build in a temporary folder and list what would change.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as one JSON object.")
@_broker_config_options
@click.option("--include-deleted-topics", is_flag=True,
              help="Also dispatch topics absent from config/topics.json (deleted topics whose messages are still in "
                   "the commitlog); by default they are skipped and listed in the plan. System topics are always "
                   "kept; without a readable topics.json every topic is kept.")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", hidden=True)
@click.option("--master", default=None, hidden=True)
@jobs_option
def rebuild(what, store_dir, topic, queue, dry_run, as_json, conf, conf_alias, include_deleted_topics, engine,
            master, jobs):
    """Regenerate consume queues or index files from the commitlog, byte-identical to the broker's.

    Files are built beside the store (in the quarantine's staging folder, never inside commitlog/ or
    consumequeue/), compared with the current ones, and only those that differ are swapped in with
    an atomic rename; the old files are kept in STORE_DIR/rmqctl-quarantine/ (`rmqctl undo`).
    Index files keep their existing names; extra ones are named from the store time of the first
    message that made the broker open them.

    Topics absent from the config/topics.json the broker would load (a deleted topic's messages stay
    in the commitlog) are not dispatched, so deleted queues do not come back; the plan lists them
    with their message counts (--include-deleted-topics keeps them). `recover` re-dispatches every
    topic, like the broker's own recovery.

    \b
    Example:
      rmqctl rebuild cq /data/rocketmq/store
      rmqctl rebuild cq /data/rocketmq/store --topic TopicTest --queue 3
      rmqctl rebuild index --dry-run --json /data/rocketmq/store
      rmqctl rebuild cq --include-deleted-topics /data/rocketmq/store
    """
    from rmqctl.repair import rebuild as RB
    from rmqctl.spark.engine_choice import refuse_spark_rebuild

    refuse_spark_rebuild(engine, master)
    if what == "index" and (topic is not None or queue is not None):
        raise UsageError("--topic/--queue apply to `rebuild cq` only: index files mix every topic")
    if what == "cq":
        from rmqctl.repair.rocksdb_plan import refuse_offline_write

        refuse_offline_write(store_dir, "rebuild cq")
    if topic is not None and not include_deleted_topics:
        from rmqctl.store.layout import Store
        from rmqctl.queue_names import require_named

        st = Store.open(store_dir, _config(Path(store_dir), _one_conf(conf, conf_alias)))
        if st.looks_like_store():
            require_named(st, topic, queue, scan_hint="--include-deleted-topics goes on anyway")

    def build(store, staging, pg):
        from rmqctl.allocator import for_long_passes
        from rmqctl.store import dledger

        for_long_passes()
        dlog = dledger.find(store.root)   # DLedger commitlog: the messages its entries wrap
        return RB.analyze_rebuild(store, what, staging, topic=topic, queue=queue, progress=pg,
                                  include_deleted_topics=include_deleted_topics,
                                  records=dledger.records_for_rebuild(dledger.DLedgerLog.open(dlog)) if dlog else None,
                                  jobs=jobs or default_jobs(store))

    from rmqctl.store import dledger

    token = dledger.READING.set(bool(dledger.find(store_dir)))
    try:
        return _run(store_dir, _one_conf(conf, conf_alias), dry_run, as_json, f"rebuild-{what}", build)
    finally:
        dledger.READING.reset(token)

