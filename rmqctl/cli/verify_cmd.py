"""rmqctl verify: the whole-store integrity check, read-only, for shells and cron."""
from __future__ import annotations

import time

import click

from rmqctl.cli.options import build_store_config, store_config_options
from rmqctl.status import EXIT_CODES_DOC, Exit

AREA_CHOICES = ("commitlog", "cq", "index", "checkpoint", "config")


@click.command("verify", epilog=EXIT_CODES_DOC)
@click.argument("target", type=click.Path(exists=False))
@store_config_options
@click.option("--json", "as_json", is_flag=True, help="One JSON report on stdout (findings, counts, stats).")
@click.option("--summary", is_flag=True, help="A table: check, severity, count, first location.")
@click.option("--prometheus", "prom", type=click.Path(dir_okay=False, writable=True),
              help="Also write a node_exporter textfile (atomically) with counts per check.")
@click.option("--only", "only", multiple=True, type=click.Choice(AREA_CHOICES),
              help="Run only these areas (repeatable). Cross-checks need both sides.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Processes for the commitlog scan; the index files are checked by one of them beside it "
                   "[default: up to 2 on stores over 256 MiB].")
@click.option("--index-sample", type=click.IntRange(min=0), default=64, show_default=True,
              help="Index items per file checked against their message.")
@click.option("--broker-version", default=None, metavar="X.Y.Z",
              help="The RocketMQ version that wrote the store, for rules that changed between versions "
                   "(e.g. index hashSlotCount: 4.7.0 and older count every key) [default: what the files tell].")
@click.option("-v", "--verbose", count=True, help="Also print notes (info findings) and timings.")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
              help="spark: scan the commitlog files as Spark tasks (same checks, same findings); auto: spark when "
                   "--master (or SPARK_MASTER) is given, else local.")
@click.option("--master", envvar="SPARK_MASTER", default=None,
              help="Spark master URL (with --engine spark or auto) [default: embedded local[*]; env SPARK_MASTER].")
@click.pass_context
def verify(ctx, target, broker_config, index_slots, index_items, as_json, summary, prom, only, jobs,
           index_sample, broker_version, verbose, engine, master):
    """Check a store's integrity (or one file's): commitlog records, consume queues, index files,
    checkpoint/abort/lock, timer, compaction logs and queues (5.x cleanup.policy=COMPACTION topics:
    what the broker's load does with their files, units vs log records vs the commitlog, positions),
    config/*.json. Read-only, always: files are
    opened O_RDONLY, nothing is mapped or written (except the --prometheus file). Safe on a running
    broker's store: the lock is only probed, and an incomplete tail record is a note, not corruption.

    Prints nothing on a clean store; otherwise one line per finding on stdout:

      FILE: offset N: [warning: ]CHECK: expected X, actual Y: explanation

    Commitlog offsets are absolute (file start + position); other offsets are byte positions in
    FILE. Warnings (abort present, lock held, .bak in use) also exit 4: an operator must know.
    CHECK is a stable code (commitlog.body_crc, cq.behind, ...): FINDING CODES in man rmqctl-verify
    says, for each, what it means, what the broker will do with the store, and what to run.

    \b
    Example:
      rmqctl verify /data/rocketmq/store && echo clean
      rmqctl verify --summary /data/rocketmq/store
      rmqctl verify --json /data/rocketmq/store | jq '.findings[] | select(.severity=="error")'
      rmqctl verify --prometheus /var/lib/node_exporter/rmq_store.prom /data/rocketmq/store
      rmqctl verify /data/rocketmq/store/commitlog/00000000001073741824
    """
    from pathlib import Path

    from rmqctl.check.findings import Report, write_atomically
    from rmqctl.terminal import escape
    from rmqctl.check.run import AREAS, verify_file, verify_store
    from rmqctl.errors import RmqError, UsageError
    from rmqctl.store.layout import Store, find_store_root

    started = time.time()
    verbose = verbose or (ctx.parent.obj or {}).get("verbose", 0) if ctx.parent else verbose
    path = Path(target)
    if not path.exists():
        raise UsageError("no such file or directory", path=path)
    cfg = build_store_config(broker_config, index_slots, index_items)
    if broker_version:
        from dataclasses import replace

        from rmqctl.store.config import parse_version

        cfg = replace(cfg, broker_version=parse_version(broker_version))
    code = Exit.OK
    try:
        if path.is_dir():
            store = Store.open(path, cfg, check_supported=False)
            from rmqctl.store import dledger

            dlog = dledger.find(path)
            if dlog is not None:
                from rmqctl.check.dledger import verify_dledger

                report = verify_dledger(store, dledger.DLedgerLog.open(dlog))
            elif not store.looks_like_store():
                raise UsageError("not a store directory (no commitlog/, consumequeue/, checkpoint, config/ or "
                                 "index/ here)", path=path)
            else:
                if jobs is None:
                    from rmqctl.cli.options import default_jobs

                    jobs = default_jobs(store)
                from rmqctl.terminal import progress

                total = sum(f.size for f in store.commitlog.files)
                with progress(total, "verify") as bar:
                    if engine == "spark" or (engine == "auto" and master):
                        from rmqctl.spark.engines import verify_store as spark_verify
                        from rmqctl.spark.preflight import start_session

                        report = spark_verify(start_session(master, verbose=verbose), store, areas=tuple(only) or AREAS,
                                              index_sample=index_sample, progress=bar.advance)
                    else:
                        from rmqctl.allocator import for_long_passes

                        for_long_passes()
                        report = verify_store(store, jobs=jobs, areas=tuple(only) or AREAS, index_sample=index_sample,
                                              progress=bar.advance)
        else:
            from rmqctl.store.files import check_named

            check_named(path)
            try:
                store = Store(find_store_root(path), cfg)
            except UsageError:
                store = None
            report = verify_file(path, store, index_sample=index_sample)
    except RmqError as e:
        if prom:
            failed = Report(str(path))
            failed.stats["seconds"] = round(time.time() - started, 3)
            write_atomically(prom, failed.prometheus(int(e.exit_code), started))
        raise
    if report.problems:
        code = Exit.PROBLEMS
    if as_json:
        from rmqctl.render import emit_json

        emit_json("verify", report.to_json(verbose=True))
    elif summary:
        _print_summary(report, verbose)
    else:
        for line in report.text_lines(verbose=bool(verbose)):
            click.echo(escape(line))
    if verbose:
        s = report.stats
        secs = s.get("seconds") or 0
        mb = s.get("bytes", 0) / 1e6
        click.echo(f"rmqctl: verify: {s.get('messages', 0)} messages, {mb:.1f} MB in {secs:.2f} s"
                   + (f" ({mb / secs:.0f} MB/s)" if secs else "") + f", {len(report.problems)} problem(s)",
                   err=True)
    if prom:
        write_atomically(prom, report.prometheus(int(code), started))
    return code


def _print_summary(report, verbose: int) -> None:
    from rmqctl.tables import print_table
    from rmqctl.terminal import stdout_is_tty

    rows = [r for r in report.summary_rows() if verbose or r[1] != "info"]
    s = report.stats
    tty = stdout_is_tty()
    print_table(("check", "severity", "count", "first_at"), rows, right=(2,), tsv=True,
                title=f"verify {report.store}: {'clean' if not report.problems else 'PROBLEMS'}")
    if tty:
        click.echo(f"messages {s.get('messages', 0)}  bytes {s.get('bytes', 0)}  queues {s.get('queues', 0)}  "
                   f"seconds {s.get('seconds', 0)}")
    else:
        click.echo(f"# messages={s.get('messages', 0)} bytes={s.get('bytes', 0)} queues={s.get('queues', 0)} "
                   f"seconds={s.get('seconds', 0)} clean={'yes' if not report.problems else 'no'}")
