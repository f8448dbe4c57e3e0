"""rmqctl stats / rmqctl export: the commitlog as a Spark dataset (pyspark is imported inside the
commands only, never when rmqctl.cli loads)."""
from __future__ import annotations

import sys

import click

from rmqctl.cli.completion import complete_topic
from rmqctl.cli.options import report_json_option, resolve_time, utc_option
from rmqctl.cli.salvage_cmd import unconsumed_options
from rmqctl.errors import UsageError
from rmqctl.status import Exit


def spark_options(f):
    f = click.option("--master", envvar="SPARK_MASTER", default=None,
                     help="Spark master URL: local[N], spark://host:port, yarn, k8s://... "
                          "[default: embedded local[*]; env SPARK_MASTER]")(f)
    f = click.option("--io", type=click.Choice(["auto", "pread", "binaryfiles"]), default="auto", show_default=True,
                     help="Kept for old command lines: local paths are read with pread (the same path on every "
                          "executor), hdfs://, webhdfs:// (and fsspec) URIs by byte range, whatever this says "
                          "(docs/spark-remote.md).")(f)
    f = click.option("--split-size", type=click.IntRange(min=1), default=None,
                     help="Bytes per Spark task inside a commitlog file [default: sized to the cores, "
                          "16-256 MiB].")(f)
    f = click.option("--broker-config", type=click.Path(dir_okay=False, exists=True), envvar="RMQCTL_BROKER_CONFIG",
                     help="broker.conf or JSON with mappedFileSizeCommitLog, messageDelayLevel... "
                          "[env RMQCTL_BROKER_CONFIG]")(f)
    f = click.option("--no-crc", is_flag=True, help="Do not check body CRCs (body_crc_ok is then null).")(f)
    return f


def filter_options(f):
    f = click.option("--topic", "topics", multiple=True, help="Only this topic (repeatable).",
                     shell_complete=complete_topic)(f)
    f = click.option("--queue", "queues", type=int, multiple=True, help="Only this queue id (repeatable).")(f)
    f = click.option("--key", "keys", multiple=True,
                     help="Only messages with this KEYS entry or UNIQ_KEY (repeatable).")(f)
    f = click.option("--begin", help="Store time >= this (epoch ms, ISO 8601, yyyy-MM-dd#HH:mm:ss:SSS, now, "
                                      "-2h...; no zone = local time, TZ or --utc to change).")(f)
    f = click.option("--end", help="Store time < this.")(f)
    f = utc_option(f)
    f = click.option("--transaction-type", "tx_types", multiple=True,
                     type=click.Choice(["NOT", "PREPARED", "COMMIT", "ROLLBACK"], case_sensitive=False),
                     help="Only this transaction type (repeatable).")(f)
    return f


def _filter(topics, queues, keys, begin, end, tx_types, utc=False):
    from rmqctl.spark.dataset import Filter

    b, e = resolve_time("--begin", begin, utc), resolve_time("--end", end, utc)
    if b is not None and e is not None and b >= e:
        raise UsageError(f"--begin {int(b)} is not before --end {int(e)} (--end is exclusive): nothing to select")
    return Filter(frozenset(topics), frozenset(queues), frozenset(keys), b, e,
                  frozenset(t.upper() for t in tx_types))


def _store_refs(stores):
    """The STORE arguments, checked before any JVM starts (spark.preflight)."""
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.spark.preflight import check_stores

    if not stores:
        raise UsageError("give at least one STORE directory")
    refs = parse_store_args(stores)
    check_stores(refs)
    return refs


def _dataset(ctx, stores, master, io, split_size, broker_config, no_crc, body=False, conf=None):
    """The stores opened as read_commitlog opens them (rmqctl.spark.api.open_dataset), after the checks."""
    from rmqctl.spark.api import open_dataset
    from rmqctl.spark.preflight import start_session

    _store_refs(stores)
    base = _base_config(broker_config)
    verbose = (ctx.obj or {}).get("verbose", 0) if ctx.obj else 0
    spark = start_session(master, verbose=verbose, conf=conf)     # probes a spark:// master first
    ds = open_dataset(spark, stores, broker_config=base, io=io, split_size=split_size, check_crc=not no_crc,
                      body=body)
    for info in ds.stores:      # a Hadoop URI can only be listed once the session is up
        if info.ref.local is None and not info.files and info.consumer_offsets is None:
            from rmqctl.errors import IOFailure

            raise IOFailure(f"{info.ref.uri}: no commitlog files under {info.ref.uri}/commitlog and no "
                            "config/consumerOffset.json: not a store root")
    return ds


def _conf(pairs) -> dict:
    """--conf KEY=VALUE pairs -> a dict (a usage error for anything else)."""
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"--conf {p!r}: give KEY=VALUE, e.g. spark.executor.memory=4g")
        out[k.strip()] = v
    return out


def _base_config(broker_config):
    if not broker_config:
        return None
    from rmqctl.store.config import StoreConfig

    return StoreConfig.from_file(broker_config)


def engine_option(f):
    return click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
                        help="local: in this process, without Spark (local paths only); spark: a Spark job; auto: "
                             "local below a few GiB of commitlog data, Spark above it, for Hadoop URIs and "
                             "whenever --master (or SPARK_MASTER) is given.")(f)


def _fmt_ts(ms):
    import datetime as dt

    if ms is None:
        return ""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


@click.command("stats")
@click.argument("stores", nargs=-1, metavar="STORE...")
@spark_options
@filter_options
@report_json_option
@click.option("--chart", type=click.Path(dir_okay=False, writable=True),
              help="Write messages per minute per topic as a self-contained chart: FILE.html or FILE.svg.")
@click.option("--queues/--no-queues", "show_queues", default=None,
              help="Show the per-queue table [default: when there are at most 64 queues].")
@engine_option
@click.pass_context
def stats(ctx, stores, master, io, split_size, broker_config, no_crc, topics, queues, keys, begin, end, tx_types, utc,
          as_json, chart, show_queues, engine):
    """Per store, topic and queue: messages, bytes, first/last store time, size distribution, peak rate,
    distinct keys (HyperLogLog estimate), and consumer lag per group from config/consumerOffset.json.

    STORE is a store root (the directory holding commitlog/), optionally NAME=PATH; several stores
    (a whole cluster's brokers) run as one Spark job and are told apart by the `store` column/field.
    Paths may be hdfs:// or webhdfs:// URIs (read by byte range, docs/spark-remote.md). Read-only.

    Max offset of a queue = the next queue offset after its last dispatched commitlog message (what
    a consume-queue rebuild gives); lag = max offset - committed consumer offset.

    \b
    Example:
      rmqctl stats /data/broker-a/store /data/broker-b/store
      rmqctl stats store --topic Orders --begin 2024-05-01T00:00 --chart orders.html
      rmqctl stats a=/mnt/a/store b=/mnt/b/store --master spark://10.0.0.5:7077 --json | jq .totals
    """
    from rmqctl.spark import stats as st
    from rmqctl.spark.session import spark_extra_required

    if chart and not chart.endswith((".html", ".htm", ".svg")):
        raise UsageError("--chart FILE must end in .html or .svg")
    from rmqctl.spark.engine_choice import choose

    flt = _filter(topics, queues, keys, begin, end, tx_types, utc)
    refs = _store_refs(stores)
    engine = choose(engine, master, refs, local_ok=io != "binaryfiles",
                    why_not_local="reads the files itself (no --io binaryfiles)")
    with spark_extra_required("rmqctl stats"):
        if engine == "local":
            result = st.compute_local(None, flt or None, config=_base_config(broker_config), check_crc=not no_crc,
                                      names=refs)
        else:
            ds = _dataset(ctx, stores, master, io, split_size, broker_config, no_crc)
            result = st.compute(ds, flt or None)
    if chart:
        with open(chart, "w", encoding="utf-8") as f:
            f.write(st.chart_svg(result) if chart.endswith(".svg") else st.chart_html(result))
    if as_json:
        from rmqctl.render import emit_json

        emit_json("stats", result)
    else:
        _print_stats(result, show_queues)
    return Exit.OK


def _print_stats(result, show_queues):
    from rmqctl.tables import print_table
    from rmqctl.terminal import escape, out

    con = out()
    e = escape
    t = result["totals"]
    con.print(f"stores: {e(', '.join(result['stores']))}   messages: {t['messages']:,}   bytes: {_size(t['bytes'])}"
              f"   topics: {t['topics']}   queues: {t['queues']}")
    for name, info in result["scan"]["stops"].items():
        stop = info.get("stop")
        if stop and stop["kind"] not in ("zeros", "end", "blank"):
            con.print(f"{e(name)}: commitlog ends at offset {stop['offset']}: {stop['kind']}"
                      f"{' (' + e(stop['detail']) + ')' if stop.get('detail') else ''}; later records not counted")
    multi = len(result["stores"]) > 1
    st = ["store"] if multi else []

    def store_of(r):
        return [r["store"]] if multi else []

    cols = st + ["topic", "queues", "messages", "bytes", "first stored", "last stored", "avg size", "max size",
                 "distinct keys"]
    print_table(cols, [store_of(r) + [r["topic"], r["queues"], f"{r['messages']:,}", _size(r["bytes"]),
                                      _fmt_ts(r["first_store_timestamp"]), _fmt_ts(r["last_store_timestamp"]),
                                      f"{r['avg_size']:.0f}" if r["avg_size"] is not None else "",
                                      r["max_size"] or "", f"~{r['distinct_keys']:,}"] for r in result["topics"]],
                title="Topics", right=[c for c in cols if c not in ("store", "topic", "first stored", "last stored")],
                no_wrap=("first stored", "last stored"))
    qs = result["queues"]
    if show_queues or (show_queues is None and len(qs) <= 64):
        cols = st + ["topic", "queue", "messages", "bytes", "max offset", "peak/min", "first stored", "last stored"]
        print_table(cols, [store_of(r) + [r["topic"], r["queue_id"], f"{r['messages']:,}", _size(r["bytes"]),
                                          r["max_offset"], r["peak_per_minute"], _fmt_ts(r["first_store_timestamp"]),
                                          _fmt_ts(r["last_store_timestamp"])] for r in qs],
                    title="Queues", right=[c for c in cols if c not in ("store", "topic", "first stored",
                                                                        "last stored")],
                    no_wrap=("first stored", "last stored"))
    if result["consumer_lag"]:
        cols = st + ["group", "topic", "queue", "consumer offset", "max offset", "lag"]
        print_table(cols, [store_of(r) + [r["group"], r["topic"], r["queue_id"], r["consumer_offset"], r["max_offset"],
                                          "" if r["lag"] is None else f"{r['lag']:,}"]
                           for r in result["consumer_lag"]],
                    title="Consumer lag", right=[c for c in cols if c not in ("store", "group", "topic")])
    # size distribution of the whole job, as one line of buckets
    hist: dict = {}
    for r in result["topics"]:
        for k, v in r["size_histogram"].items():
            hist[k] = hist.get(k, 0) + v
    if hist:
        con.print("record sizes: " + "  ".join(f"{k}: {v:,}" for k, v in hist.items()))


@click.command("export")
@click.argument("stores", nargs=-1, metavar="STORE...")
@click.option("--format", "fmt", type=click.Choice(["parquet", "jsonl"]), default="parquet", show_default=True)
@click.option("--out", help="Output directory (local path or a Hadoop URI such as s3a://b/p). Required.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output directory.")
@click.option("--body/--no-body", default=True, show_default=True,
              help="Include message bodies (binary in Parquet, base64 in JSON Lines), compressed ones "
                   "(SYSFLAG 0x1) decompressed, with a body_note column saying why one could not be.")
@click.option("--raw-body", is_flag=True, help="Bodies as stored (compressed ones not decompressed).")
@click.option("--partition-by", type=click.Choice(["store", "topic", "date", "queue_id", "none"]), multiple=True,
              help="Hive-style output folders (repeatable, in order); date = the UTC date of store_time; none = "
                   "one flat folder. [default: store, topic, date for Parquet; flat for JSON Lines]")
@click.option("--files", type=click.IntRange(min=1), default=None, help="Write at most N files.")
@click.option("--since", help="Only messages stored at or after this time (like --begin; for time-based "
                              "incremental exports).")
@click.option("--from-offsets", "state", type=click.Path(dir_okay=False),
              help="Incremental export: start each store's commitlog where this state file says the previous "
                   "run stopped (a missing file starts at the beginning), add the new files next to the earlier "
                   "ones in --out, and rewrite the file with where this run stopped.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting for the session (repeatable), e.g. --conf spark.executor.memory=4g.")
@click.option("--schema", "show_schema", is_flag=True,
              help="Print the messages schema (version, columns, layout) and exit; with --json as JSON.")
@spark_options
@filter_options
@unconsumed_options
@report_json_option
@click.pass_context
def export(ctx, stores, fmt, out, overwrite, body, raw_body, partition_by, files, since, state, conf, show_schema,
           master, io, split_size, broker_config, no_crc, topics, queues, keys, begin, end, tx_types, utc,
           unconsumed, group, no_offset, engine, as_json):
    """Export messages to Parquet or JSON Lines (the documented, versioned messages schema).

    Columns (`rmqctl export --schema`; MESSAGES SCHEMA below): store, topic, queue_id, queue_offset,
    physical_offset, size, sys_flag, transaction_type, tags, tags_code, keys, uniq_key, msg_id, born and
    store time (timestamps, and ms bigints), hosts, reconsume_times, body_crc_ok, properties, body,
    body_note. Parquet goes to Hive-style folders store=/topic=/date= by default (date: UTC). Readable
    by pandas/pyarrow, DuckDB and Spark. Read-only on the store.

    \b
    Example:
      rmqctl export store --out /tmp/orders --topic Orders --begin 2024-05-01 --end 2024-05-02
      rmqctl export a=/data/a/store b=/data/b/store --format jsonl --out /tmp/all --no-body
      duckdb -c "select topic, count(*) from read_parquet('/tmp/orders/**/*.parquet', hive_partitioning=1) group by 1"
      rmqctl export store --out /lake/mq --from-offsets /lake/mq.state    # run again: only new messages
      rmqctl export --schema --json
      rmqctl export store --unconsumed --group OrderGroup --format jsonl --out /tmp/salvage
    """
    from rmqctl.spark.session import spark_extra_required

    if show_schema:
        from rmqctl.spark import schema

        if as_json:
            from rmqctl.render import emit_json

            emit_json("export-schema", schema.as_dict())
        else:
            sys.stdout.write(schema.as_text())
        return Exit.OK
    if not out:
        raise UsageError("give --out DIRECTORY")
    spark_conf = _conf(conf)
    if unconsumed and (since or state or conf):
        raise UsageError("--since, --from-offsets and --conf do not go with --unconsumed")
    if unconsumed:
        from rmqctl.cli import salvage_cmd

        extra = {"--topic": topics, "--queue": queues, "--key": keys, "--begin": begin, "--end": end,
                 "--transaction-type": tx_types, "--partition-by": partition_by, "--files": files}
        return salvage_cmd.run(ctx, stores, fmt, out, overwrite, body, extra, group, no_offset, engine, as_json,
                               lambda b: _dataset(ctx, stores, master, io, split_size, broker_config, no_crc, body=b),
                               broker_config)
    if group:
        raise UsageError("--group goes with --unconsumed")
    if "none" in partition_by and len(partition_by) > 1:
        raise UsageError("--partition-by none does not combine with other columns")
    from rmqctl.spark.engine_choice import choose
    from rmqctl.spark.schema import DEFAULT_PARTITION_BY

    flt = _filter(topics, queues, keys, begin, end, tx_types, utc)
    if since is not None:
        from dataclasses import replace

        s_ms = resolve_time("--since", since, utc)
        flt = replace(flt, begin=s_ms if flt.begin is None else max(flt.begin, s_ms))
        if flt.end is not None and flt.begin >= flt.end:
            raise UsageError(f"--since {s_ms} is not before --end {flt.end}: nothing to select")
    refs = _store_refs(stores)
    local_out = "://" not in out.replace("file://", "", 1)
    if local_out and not overwrite and not state:     # before any JVM starts (export checks it again)
        import os

        path = out.replace("file://", "", 1)
        if os.path.isdir(path) and os.listdir(path):
            raise UsageError("output directory exists and is not empty (use --overwrite)", path=path)
    if not partition_by:
        partition_by = DEFAULT_PARTITION_BY if fmt == "parquet" else ()
    elif partition_by == ("none",):
        partition_by = ()
    engine = choose(engine, master, refs,
                    local_ok=(local_out and not files and not state and not conf and io != "binaryfiles"
                              and (fmt == "parquet" or not partition_by)),
                    why_not_local="writes to a local --out, without --files, --from-offsets, --conf, "
                                  "--io binaryfiles or a partitioned JSON Lines layout")
    body = "raw" if body and raw_body else body
    with spark_extra_required("rmqctl export"):
        if engine == "local":       # in this process, without Spark (rmqctl.local_export)
            from rmqctl.local_export import export_local

            res = export_local(refs, out, fmt, flt or None, config=_base_config(broker_config),
                               check_crc=not no_crc, body=body, overwrite=overwrite,
                               partition_by=tuple(partition_by))
        else:
            from rmqctl.spark.export import export as run_export
            from rmqctl.spark.export import load_state

            load_state(state)      # a bad state file is reported before Spark starts
            ds = _dataset(ctx, stores, master, io, split_size, broker_config, no_crc, body=body, conf=spark_conf)
            res = run_export(ds, out, fmt, flt or None, overwrite=overwrite, partition_by=tuple(partition_by),
                             files=files, state=state)
    if as_json:
        from rmqctl.render import emit_json

        emit_json("export", {k: v for k, v in res.items() if k not in ("files", "offsets")}
                  | {"files": len(res["files"])})
    else:
        from rmqctl.terminal import escape

        sys.stdout.write(f"exported {res['messages']:,} messages to {escape(res['out'])} ({fmt}, "
                         f"{len(res['files'])} files)\n")
    return Exit.OK
