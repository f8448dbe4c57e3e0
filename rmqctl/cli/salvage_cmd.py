"""`rmqctl export STORE --unconsumed`: the options and the per-queue summary (the work is rmqctl.salvage)."""
from __future__ import annotations

import click

from rmqctl.errors import UsageError
from rmqctl.status import Exit


def unconsumed_options(f):
    f = click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
                     help="local: in this process, without Spark (Parquet to a local --out); spark: a Spark job; "
                          "auto: local below a few GiB of commitlog data, Spark above it, for Hadoop URIs and "
                          "whenever --master is given. With --unconsumed, auto is local (consume queues first).")(f)
    f = click.option("--no-offset", type=click.Choice(["min", "skip"]), default="min", show_default=True,
                     help="With --unconsumed: a queue the group has no committed offset for starts at the queue's "
                          "min (as a consumer of its retry topic does) or is skipped.")(f)
    f = click.option("--group", default=None, help="With --unconsumed: only this consumer group.")(f)
    f = click.option("--unconsumed", is_flag=True,
                     help="Salvage: per consumer group (config/consumerOffset.json, subscriptionGroup.json) and "
                          "queue, the messages from the group's committed offset to the queue's max, with a "
                          "group column; consume queues where intact, else the commitlog's QUEUEOFFSET. Prints "
                          "per queue what was placed and what could not be (exit 4).")(f)
    return f


def run(ctx, stores, fmt, out, overwrite, body, extra: dict, group, no_offset, engine, as_json, open_dataset,
        broker_config=None):
    """Exit code of `export --unconsumed`. extra: the export options that do not combine with it."""
    from rmqctl.cli.options import require_store
    from rmqctl.salvage import export_local, export_spark, summary_lines
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.store.layout import Store

    used = [k for k, v in extra.items() if v]
    if used:
        raise UsageError(f"--unconsumed does not combine with {', '.join(used)}")
    if len(stores) != 1:
        raise UsageError("--unconsumed takes one STORE")
    ref = parse_store_args(stores)[0]
    if ref.local is None:
        raise UsageError(f"{ref.uri}: --unconsumed reads a local store")
    root = require_store(ref.local)
    config = None
    if broker_config:
        from rmqctl.store.config import StoreConfig

        config = StoreConfig.from_file(broker_config)
    from rmqctl.engine_records import engine_reading

    with engine_reading(root):      # a DLedger commitlog: its entries' messages; RocksDB consume queues
        store = Store.open(root, config, rocksdb=True)
        if engine == "spark":
            from rmqctl.spark.session import spark_extra_required

            with spark_extra_required("rmqctl export --unconsumed --engine spark"):
                res = export_spark(open_dataset(body), store, out, fmt, group=group, no_offset=no_offset,
                                   overwrite=overwrite)
        else:
            res = export_local(store, out, fmt, group=group, no_offset=no_offset, body=body, overwrite=overwrite,
                               store_name=ref.name)
    if as_json:
        from rmqctl.render import emit_json

        emit_json("export-unconsumed", {k: v for k, v in res.items() if k != "files"} | {"files": len(res["files"])})
    else:
        from rmqctl.terminal import escape
        from rmqctl.terminal import out as console

        con = console()
        for n in res["notes"]:
            con.print(escape(n))
        for line in summary_lines(res):
            con.print(escape(line))
        con.print(f"exported {res['messages']:,} unconsumed messages of {len(res['queues'])} queues to "
                  f"{escape(str(res['out']))} ({fmt})")
    return Exit.PROBLEMS if any(q["not_placed"] for q in res["queues"]) else Exit.OK
