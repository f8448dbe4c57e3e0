"""`rmqctl diff STORE_A STORE_B`: compare two replicas, read-only."""
from __future__ import annotations

import sys

import click

from rmqctl.status import Exit

DIFF_EXITS = """\b
Exit status:
  0  identical, or one is a prefix of the other (a slave behind)
  2  usage error
  4  diverged (or the commitlogs do not overlap)
  8  could not run (I/O error, unsupported store)"""


def _print_text(d) -> None:
    """The text report; the queue and consumer-offset differences as tables (rmqctl.tables)."""
    from rmqctl.tables import print_table
    from rmqctl.terminal import escape

    w = sys.stdout.write
    for part in _text(d):
        if isinstance(part, str):
            w(escape(part) + "\n")     # store paths, topics and keys are the operator's data
        else:
            headers, rows = part
            print_table(headers, rows, right=[h for h in headers if h not in ("topic", "group")])


def _text(d) -> list:
    """Lines, and (headers, rows) tables in between."""
    out = []
    for name, s in (("A", d.a), ("B", d.b)):
        out.append(f"{name}: {s.root}: commitlog [{s.min_offset}, {s.max_offset}) in {s.files} file(s), "
                   f"confirm offset {s.confirm_offset if s.confirm_offset is not None else '-'}")
    out.append(f"common prefix: up to physical offset {d.common_end} "
               f"({d.stats['probes']} file probes, {d.stats['bytes_compared']} bytes compared)")
    if d.divergent:
        for name in ("a", "b"):
            r = d.divergent.get(name)
            if r is None:
                out.append(f"first divergent record in {name.upper()}: none (no valid record there)")
            else:
                out.append(f"first divergent record in {name.upper()}: {r['topic']} queue {r['queue_id']} "
                           f"offset {r['queue_offset']} at {r['physical_offset']} ({r['size']} bytes), "
                           f"keys {r['keys'] or '-'}, uniq key {r['uniq_key'] or '-'}")
    differ = [q for q in d.queues if q["a_max"] != q["b_max"]]
    out.append(f"queues: {len(d.queues)}, max offsets differ in {len(differ)}")
    if differ:
        out.append((["topic", "queue", "A max offset", "B max offset"],
                    [[q["topic"], q["queue_id"], _dash(q["a_max"]), _dash(q["b_max"])] for q in differ]))
    out.append(f"consumer offsets that differ: {len(d.offsets)}")
    if d.offsets:
        out.append((["group", "topic", "queue", "A offset", "B offset"],
                    [[o["group"], o["topic"], o["queue_id"], _dash(o["a"]), _dash(o["b"])] for o in d.offsets]))
    for k, label in (("only_a", "topics only in A"), ("only_b", "topics only in B"),
                     ("changed", "topics configured differently")):
        if d.topics.get(k):
            out.append(f"{label}: {', '.join(d.topics[k])}")
    for n in d.notes:
        out.append(f"note: {n}")
    out.append(f"HA: {d.ha}")
    out.append(f"verdict: {d.verdict_line()}")
    return out


def _dash(v):
    return "-" if v is None else v


@click.command("diff", epilog=DIFF_EXITS)
@click.argument("store_a", type=click.Path(file_okay=False))
@click.argument("store_b", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("--config", "conf", type=click.Path(dir_okay=False),
              help="broker.conf (or a fixture manifest.json) giving the store's file sizes.")
def diff(store_a, store_b, as_json, conf):
    """Compare two replicas of a store (master and slave, or two backups), read-only.

    Prints each side's commitlog range and checkpoint confirm offset, the longest common prefix (a
    binary search over the commitlog files' first records, then a record-by-record compare inside
    one file), the first divergent record on each side, per-queue max offsets, the consumer offsets
    and topics that differ, what the broker's HA would do, and a verdict: "identical", "B is a prefix
    of A (A ahead by N messages / X bytes)" or "diverged at physical offset P".

    \b
    Example:
      rmqctl diff /data/master/store /data/slave/store
      rmqctl diff --json backup-1/store backup-2/store | jq .verdict
    """
    from rmqctl.cli.recover_cmd import _config
    from pathlib import Path

    from rmqctl.replica import diff as run_diff

    from rmqctl.errors import UsageError
    from rmqctl.store.layout import Store

    for s in (store_a, store_b):
        if not Store.open(Path(s)).looks_like_store():
            raise UsageError("not a RocketMQ store: no commitlog/, consumequeue/, index/, config/ or checkpoint",
                             path=s)
    d = run_diff(store_a, store_b, _config(Path(store_a), conf))
    if as_json:
        from rmqctl.render import emit_json

        emit_json("diff", d.to_json())
    else:
        _print_text(d)
    return Exit.PROBLEMS if d.diverged else Exit.OK
