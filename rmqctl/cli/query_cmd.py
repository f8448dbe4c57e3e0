"""rmqctl query: find messages in a stopped broker's store, the way the broker's own queries do."""
from __future__ import annotations

import sys

import click

from rmqctl.cli.completion import complete_topic
from rmqctl.cli.options import (body_option, build_store_config, json_option, require_store, resolve_time,
                                store_config_options, utc_option)
from rmqctl.errors import UsageError
from rmqctl.status import Exit


@click.command("query")
@click.argument("store_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--phys-offset", type=int, help="The message at this commitlog offset.")
@click.option("--msg-id", "-i", help="An offsetMsgId (store host + port + commitlog offset, 32 or 56 hex chars).")
@click.option("--topic", "-t", help="Topic for --key/--uniq-key/--offset/--time, or alone with --begin/--end.",
              shell_complete=complete_topic)
@click.option("--queue", "-q", type=click.IntRange(min=0),
              help="Queue id for --offset/--time (or to narrow a time range).")
@click.option("--offset", "-o", type=click.IntRange(min=0), help="Logical queue offset (needs --topic, --queue).")
@click.option("--key", "-k", help="A message key (KEYS), looked up in the index files (needs --topic).")
@click.option("--uniq-key", help="A client message id (UNIQ_KEY), looked up in the index files (needs --topic).")
@click.option("--time", help="First message of --topic/--queue stored at or after this time.")
@click.option("--begin", "-b", help="Start of the store-time window (epoch ms, ISO-8601, yyyy-MM-dd#HH:mm:ss:SSS, "
                              "now, -2h...).")
@click.option("--end", "-e", help="End of the store-time window, inclusive.")
@utc_option
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --phys-offset/--offset/--time: this many consecutive messages.")
@click.option("--max", "max_num", type=click.IntRange(min=1), default=None,
              help="At most N results [key queries: 64, the broker's maxMsgsNumBatch; time ranges: all].")
@click.option("--broker-version", type=click.Choice(["4", "5"]), default="5", show_default=True,
              help="--time: reproduce this broker's search (5.x: first offset at or after T; 4.9: nearest).")
@click.option("--scan", is_flag=True,
              help="Key queries: scan the whole commitlog instead of the index. Any query: go on (with a commitlog "
                   "scan if needed) even when --topic/--queue is named nowhere in the store.")
@json_option
@body_option
@store_config_options
@click.pass_context
def query(ctx, store_dir, phys_offset, msg_id, topic, queue, offset, key, uniq_key, time, begin, end, count,
          max_num, broker_version, scan, as_json, body, raw_body, broker_config, index_slots, index_items, utc):
    """Find messages by commitlog offset, message id, queue offset, key, unique key or store time.

    Each kind of lookup goes through the file the broker itself would use and reads only what it points
    at: the index files for keys (hash of TOPIC#KEY, slot chain, time window, at most 64 results, files
    newest first), the consume queue for queue offsets and times (the broker's binary search by store
    time). Index hits whose message does not really carry the key (hash collisions) are dropped and
    counted on stderr. With no index, or a damaged one, the commitlog is scanned instead, and stderr
    says so. Times are epoch milliseconds, ISO-8601, mqadmin's yyyy-MM-dd#HH:mm:ss:SSS, `now` or
    relative to now (-2h, -30m, -7d); a time without a zone is local time (TZ; --utc for UTC). The
    resolved instant is echoed on stderr in UTC and epoch milliseconds.

    Queue offsets answer what a consumer pulling the queue gets: on a 5.x BatchCQ topic the inner messages
    of each batch one by one (its batch consume queue); on a compaction topic the compaction log's first
    kept offset at or after the one asked (compacted offsets are skipped; stderr says so).

    Output is what `rmqctl dump` prints for a message (compressed bodies decompressed unless --raw-body);
    --json gives JSON Lines ("schema": "rmqctl.query/1", the fields of dump's messages; FIELDS in man
    rmqctl-query).
    Exit status: 0 when the query ran, whether or not anything matched ("no message matched" goes to
    stderr, stdout stays empty); 2 for a bad id, offset, time or option combination; 4 when damaged
    input was met on the way (bad CRC, a consume queue or index pointing nowhere, a looping index chain)
    — whatever was found is still printed.

    \b
    Example:
      rmqctl query store --phys-offset 0
      rmqctl query store --msg-id C0A8011400002A9F000000000000007B
      rmqctl query store --topic TopicTest --queue 1 --offset 100 --count 5
      rmqctl query store --topic TopicTest --key order-42 --begin 2024-05-01T00:00:00Z --json
      rmqctl query store --topic TopicTest --uniq-key C0A8010A30391B6D3586000003E80001
      rmqctl query store --topic TopicTest --queue 0 --time 1700000000000
      rmqctl query store --topic TopicTest --begin 2024-05-01T12:00Z --end 2024-05-01T12:05Z --max 100
      rmqctl query store -t TopicTest -k order-42 -b -2h        # mqadmin's short flags
      rmqctl queryMsgByKey store -t TopicTest -k order-42       # mqadmin's verb
    """
    from rmqctl.query import MAX_TIME, QueryEngine
    from rmqctl.render import message_json, message_text
    from rmqctl.schemas import schema_id
    from rmqctl.store.layout import Store

    time, begin, end = (resolve_time(f"--{n}", v, utc) for n, v in (("time", time), ("begin", begin), ("end", end)))
    modes = [m for m, on in (("--phys-offset", phys_offset is not None), ("--msg-id", msg_id is not None),
                             ("--key", key is not None), ("--uniq-key", uniq_key is not None),
                             ("--time", time is not None), ("--offset", offset is not None)) if on]
    if len(modes) > 1:
        raise UsageError(f"give one of {', '.join(modes)}")
    mode = modes[0] if modes else ("range" if topic is not None and (begin is not None or end is not None)
                                   else None)
    if mode is None:
        raise UsageError("say what to find: --phys-offset, --msg-id, --key/--uniq-key with --topic, "
                         "--topic --queue --offset/--time, or --topic with --begin/--end")
    if mode in ("--key", "--uniq-key", "--time", "--offset", "range") and not topic:
        raise UsageError(f"{mode} needs --topic")
    if mode in ("--time", "--offset") and queue is None:
        raise UsageError(f"{mode} needs --queue")
    if mode in ("--phys-offset", "--msg-id", "--time", "--offset") and (begin is not None or end is not None):
        raise UsageError(f"--begin/--end do not apply to {mode}")
    b = 0 if begin is None else begin
    e = MAX_TIME if end is None else end
    if b > e:
        raise UsageError(f"--begin {b} is after --end {e}")

    cfg = build_store_config(broker_config, index_slots, index_items)
    from rmqctl.store import dledger

    if dledger.find(store_dir):     # DLedger commitlog: messages are read at their offsets in dledger-<id>/data/
        token = dledger.READING.set(True)
        ctx.call_on_close(lambda: dledger.READING.reset(token))
    store = Store.open(require_store(store_dir), cfg, rocksdb=True)
    body = body or ("base64" if as_json else "text")
    verbose = (ctx.find_root().obj or {}).get("verbose", 0)
    if topic is not None and not scan:
        from rmqctl.queue_names import require_named

        require_named(store, topic, queue)

    def note(msg):
        from rmqctl.terminal import escape

        sys.stderr.write(f"rmqctl: {escape(msg)}\n")

    found = 0
    with QueryEngine(store, note=note, version=int(broker_version)) as q:
        if mode == "--phys-offset":
            it = q.by_phys_offset(phys_offset, count)
        elif mode == "--msg-id":
            it = q.by_msg_id(msg_id)
        elif mode == "--offset":
            it = q.by_queue_offset(topic, queue, offset, count)
        elif mode == "--time":
            it = q.by_time(topic, queue, time, count)
        elif mode == "range":
            it = q.by_time_range(topic, b, e, max_num, queue)
        else:
            k, uniq = (key, False) if mode == "--key" else (uniq_key, True)
            n = 64 if max_num is None else max_num
            it = q.scan_keys(topic, k, b, e, n, uniq) if scan else q.by_key(topic, k, b, e, n, uniq)
        w = sys.stdout.write
        sid = schema_id("query")
        for r in it:
            if as_json:
                w(message_json(r, body, raw_body, schema=sid) + "\n")
            else:
                w(("\n" if found else "") + message_text(r, body=body, raw_body=raw_body) + "\n")
            found += 1
        sys.stdout.flush()
        s = q.stats
        if verbose:
            note(f"read {s.index_item_reads} index items in {len(s.index_files_searched)} file(s), "
                 f"{s.cq_unit_reads} consume-queue units, {s.commitlog_reads} commitlog records directly, "
                 f"{s.scanned_records} by scanning")
        if not found:
            note("no message matched")
        elif not as_json and found > 1:
            note(f"{found} messages")
        return Exit.PROBLEMS if q.problems else Exit.OK
