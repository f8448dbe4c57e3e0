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


def _text(d) -> list[str]:
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
    for q in differ:
        a = "-" if q["a_max"] is None else q["a_max"]
        b = "-" if q["b_max"] is None else q["b_max"]
        out.append(f"  {q['topic']} queue {q['queue_id']}: A {a}, B {b}")
    out.append(f"consumer offsets that differ: {len(d.offsets)}")
    for o in d.offsets:
        a = "-" if o["a"] is None else o["a"]
        b = "-" if o["b"] is None else o["b"]
        out.append(f"  {o['group']} {o['topic']} queue {o['queue_id']}: A {a}, B {b}")
    for k, label in (("only_a", "topics only in A"), ("only_b", "topics only in B"),
                     ("changed", "topics configured differently")):
        if d.topics.get(k):
            out.append(f"{label}: {', '.join(d.topics[k])}")
    for n in d.notes:
        out.append(f"note: {n}")
    out.append(f"HA: {d.ha}")
    out.append(f"verdict: {d.verdict_line()}")
    return out


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
        sys.stdout.write("\n".join(_text(d)) + "\n")
    return Exit.PROBLEMS if d.diverged else Exit.OK
