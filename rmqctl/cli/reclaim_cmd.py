"""`rmqctl reclaim STORE`: free disk space the way the broker's own expiry would, the plan first."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl.errors import UsageError
from rmqctl.status import Exit

RECLAIM_EXITS = """\b
Exit status:
  0  the plan was printed (nothing changes without --move-to or --delete), or nothing to reclaim
  1  files were moved or deleted
  2  usage error
  4  refused before any change (a file already in --move-to DIR, DIR inside the store, a store not
     shut down cleanly: run `rmqctl recover` first)
  8  could not run (store locked by a running broker, I/O error: every change rolled back)"""


def _text(p, extra: dict) -> list:
    """Lines, and (headers, rows) tables in between."""
    from rmqctl import reclaim as RC

    out = [f"{p.root}: commitlog [{p.min_before}, {p.max_offset}), fileReservedTime {p.reserved_hours} h"]
    for kind in ("commitlog", "consumequeue", "batchconsumequeue", "index"):
        fs = p.by_kind(kind)
        if fs:
            out.append(f"{kind}: {len(fs)} file(s), {sum(f.size for f in fs)} bytes")
            out.append((["file", "bytes", "why"], [[f.rel(p.root), f.size, f.reason] for f in fs]))
    if p.stopped:
        out.append(f"stops at: {p.stopped}")
    if p.blocked_by:
        out.append("blocked by: " + ", ".join(f"{g} (first unconsumed message at {o})"
                                              for g, o in sorted(p.blocked_by.items())))
    for g, rows in sorted(p.losses.items()):
        key = "lost" if g in p.forced else "lost_if_forced"
        flag = "delayed" if g == RC.DELAY_GROUP else g
        verb = "loses" if g in p.forced else f"would lose if forced (--force-unconsumed {flag})"
        rows = [r for r in rows if r[key]]
        if rows:
            out.append(f"group {g} {verb}: {sum(r[key] for r in rows)} unconsumed message(s): " +
                       ", ".join(f"{r['topic']} queue {r['queue_id']}: {r[key]}" for r in rows))
    for n in p.notes:
        out.append(f"note: {n}")
    out.append(f"new min offset: {p.min_after}; frees {p.bytes} bytes")
    out += [f"{k}: {v}" for k, v in extra.items()]
    return out


def _emit(p, as_json: bool, extra: dict) -> None:
    if as_json:
        from rmqctl.render import emit_json

        d = p.to_json()
        d.update(extra)
        emit_json("reclaim", d)
    else:
        from rmqctl.tables import print_table
        from rmqctl.terminal import escape

        for part in _text(p, extra):
            if isinstance(part, str):
                sys.stdout.write(escape(part) + "\n")     # store paths and topics are the operator's data
            else:
                print_table(*part, right=(1,))
    sys.stdout.flush()


@click.command("reclaim", epilog=RECLAIM_EXITS)
@click.argument("store_dir", type=click.Path(file_okay=False))
@click.option("--move-to", "move_to", type=click.Path(file_okay=False, path_type=Path),
              help="Apply: move the files to DIR (another disk), journaled; `rmqctl undo STORE` brings them back.")
@click.option("--delete", is_flag=True, help="Apply: delete the files, WITHOUT a copy (undo cannot restore them).")
@click.option("--force-unconsumed", "force", multiple=True, metavar="GROUP",
              help="Also reclaim files holding messages GROUP has not consumed (repeatable; the plan says how many "
                   "it loses). `delayed`: scheduled messages not yet delivered (delayOffset.json).")
@click.option("--file-reserved-time", "hours", type=click.IntRange(min=0),
              help="fileReservedTime in hours [default: from --config, else 72].")
@click.option("--ignore-reserved-time", is_flag=True,
              help="Do not wait for fileReservedTime (what the broker itself does when the disk is above "
                   "diskSpaceCleanForciblyRatio).")
@click.option("--config", "conf", type=click.Path(dir_okay=False),
              help="broker.conf (or a JSON map) giving fileReservedTime and the store's file sizes.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as one JSON object.")
def reclaim(store_dir, move_to, delete, force, hours, ignore_reserved_time, conf, as_json):
    """Free disk space on a broker stopped by a full disk: what its own expiry would delete.

    Plans first (the default changes nothing): the commitlog files older than fileReservedTime (by
    file mtime, like the broker) that hold no message a consumer group has not consumed yet
    (config/consumerOffset.json and the consume queues), then the consume-queue and index files that
    only point below the new min offset, with the bytes each frees and what each group would lose if
    forced. Like the broker it never removes the last file of a kind nor leaves a hole.

    Applying needs --move-to DIR (the files go to DIR/<path in the store>, journaled in
    STORE/rmqctl-quarantine/, undoable with `rmqctl undo STORE`) or --delete (gone for good; said so).
    Refused while a broker holds the store lock.

    \b
    Example:
      rmqctl reclaim /data/rocketmq/store                       # the plan
      rmqctl reclaim /data/rocketmq/store --move-to /mnt/spare/rmq-reclaimed
      rmqctl reclaim /data/rocketmq/store --delete --force-unconsumed old-group
    """
    from rmqctl import reclaim as RC
    from rmqctl.cli.recover_cmd import _config, _warn
    from rmqctl.store.layout import Store

    if move_to is not None and delete:
        raise UsageError("give either --move-to DIR or --delete, not both")
    root = Path(store_dir)
    config = _config(root, conf)
    if hours is None:
        hours = (RC.reserved_hours_from(conf) if conf else None)
        hours = RC.DEFAULT_RESERVED_HOURS if hours is None else hours
    force = sorted({g for item in force for g in item.split(",") if g})
    if not Store.open(root, config).looks_like_store():
        raise UsageError("not a RocketMQ store: no commitlog/, consumequeue/, index/, config/ or checkpoint", path=root)

    from rmqctl.repair import transaction as T

    job = RC.ReclaimJob(reserved_hours=hours, ignore_reserved_time=ignore_reserved_time, force_unconsumed=force,
                        move_to=move_to, warn=_warn)
    out = T.run(root, job, config=config, dry_run=move_to is None and not delete, warn=_warn)
    p = out.planned
    if out.dry_run:
        _emit(p, as_json, {"applied": False,
                           "apply_with": "--move-to DIR (undoable) or --delete (no copy)" if p.files else None})
        return Exit.OK
    if not out.applied:
        _emit(p, as_json, {"applied": False})
        return Exit.OK
    extra = {"applied": True, "journal": str(out.journal)}
    if out.rolled_back:
        extra["rolled_back_first"] = ", ".join(out.rolled_back)
    if move_to is not None:
        extra.update({"moved_to": str(move_to), "undo": f"rmqctl undo {root} --op {out.op_name}"})
    else:
        extra["deleted_without_copy"] = True
    _emit(p, as_json, extra)
    return Exit.FIXED
