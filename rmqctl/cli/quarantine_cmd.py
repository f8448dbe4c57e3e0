"""`rmqctl quarantine list|prune`: the journals in STORE/rmqctl-quarantine/ (rmqctl.quarantine)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl.cli.options import json_option, require_store
from rmqctl.status import Exit


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _actions(a: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(a.items())) or "none"


@click.group("quarantine")
def quarantine():
    """List and prune the repair journals in STORE/rmqctl-quarantine/.

    Every rmqctl write (recover, rebuild, reclaim --move-to, config edits) saves what it removes or
    overwrites there, so that `rmqctl undo` can restore it; the folder grows inside the store
    (hard-linked segment files of GiB). `list` shows each journal's size; `prune` removes old ones
    (they can no longer be undone).

    \b
    Example:
      rmqctl quarantine list /data/rocketmq/store
      rmqctl quarantine prune /data/rocketmq/store --older-than 7d --dry-run
      rmqctl quarantine prune /data/rocketmq/store --keep 3
    """


@quarantine.command("list")
@click.argument("store", type=click.Path(path_type=Path, exists=True, file_okay=False))
@json_option
def list_cmd(store, as_json):
    """Each journal: state, operations, bytes on disk, hard-link counts.

    State: committed (undoable with `rmqctl undo`), undone, open (a killed run: the next rmqctl write
    rolls it back), aborted (a failed run, rolled back or to be), undo-in-progress (an interrupted
    undo: run `rmqctl undo` again). disk_bytes is what the folder allocates; linked_files are saved
    files whose inode has other links (their blocks stay used while the other path exists); frees_bytes
    is what removing the journal gives back.

    --json: JSON Lines, one object per journal: schema ("rmqctl.quarantine-list/1"), name, op, state,
    begun, begun_ms, actions (kind -> count), files, bytes, disk_bytes, linked_files, linked_bytes,
    max_links, frees_bytes.
    """
    from rmqctl.quarantine import list_journals
    from rmqctl.render import emit_json

    infos = list_journals(require_store(store))
    out = sys.stdout
    if as_json:
        for i in infos:
            emit_json("quarantine-list", i.to_dict())
        return Exit.OK
    if not infos:
        from rmqctl.terminal import escape

        sys.stderr.write(f"rmqctl: {escape(store)}: no quarantine journals\n")
        return Exit.OK
    for i in infos:
        links = f"  {i.linked_files} hard-linked (max {i.max_links} links)" if i.linked_files else ""
        out.write(f"{i.name}\t{i.state}\t{i.op}\t{_actions(i.actions)}\t{i.files} files\t"
                  f"{_size(i.disk_bytes)} on disk\tfrees {_size(i.frees_bytes)}{links}\n")
    total = sum(i.disk_bytes for i in infos)
    out.write(f"# {len(infos)} journal(s), {_size(total)} on disk, "
              f"{_size(sum(i.frees_bytes for i in infos))} only in the quarantine\n")
    return Exit.OK


@quarantine.command("prune")
@click.argument("store", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--older-than", metavar="DURATION", help="Remove journals begun more than this long ago (7d, 12h, 2w).")
@click.option("--keep", type=click.IntRange(min=0), default=None, help="Keep the N newest removable journals.")
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be removed; change nothing.")
@json_option
def prune(store, older_than, keep, dry_run, as_json):
    """Remove old journals (their operations can no longer be undone).

    Removes committed and undone journals older than --older-than, or beyond the --keep newest (both
    options: a journal must satisfy both). Never removes an unfinished journal (open, aborted) nor
    one whose undo was interrupted. Takes the store lock like every writer: refused while a broker
    runs. Safe to kill at any point; run it again to finish.

    --json: one object: schema ("rmqctl.quarantine-prune/1"), dry_run, removed (names), kept
    ([{name, state, why}]), leftovers (folders of an interrupted prune, removed), frees_bytes.

    \b
    Exit status:
      0  nothing to remove, or --dry-run
      1  journals removed
      2  usage error (neither --older-than nor --keep)
      8  could not run (store locked by a running broker, I/O error)
    """
    from rmqctl import quarantine as Q
    from rmqctl.render import emit_json

    require_store(store)
    older = Q.parse_duration(older_than) if older_than is not None else None
    if older is None and keep is None:
        from rmqctl.errors import UsageError

        raise UsageError("give --older-than DURATION or --keep N (or both)")
    if dry_run:
        p = Q.plan(store, older_than_s=older, keep=keep)
    else:
        from rmqctl.store.lock import store_write_lock

        with store_write_lock(store):
            p = Q.plan(store, older_than_s=older, keep=keep)
            Q.apply(store, p)
    if as_json:
        emit_json("quarantine-prune", {
            "dry_run": dry_run, "removed": [i.name for i in p.remove],
            "kept": [{"name": i.name, "state": i.state, "why": why} for i, why in p.keep],
            "leftovers": [d.name for d in p.leftovers], "frees_bytes": p.frees_bytes})
    else:
        verb = "would remove" if dry_run else "removed"
        for i in p.remove:
            sys.stdout.write(f"{verb}: {i.name} ({i.state}, {i.op}, frees {_size(i.frees_bytes)})\n")
        for d in p.leftovers:
            sys.stdout.write(f"{verb}: {d.name} (left by an interrupted prune)\n")
        for i, why in p.keep:
            if not i.prunable:
                sys.stdout.write(f"kept: {i.name} ({i.state}: {why})\n")
        sys.stdout.write(f"# {len(p.remove)} journal(s) {'would be ' if dry_run else ''}removed, "
                         f"{_size(p.frees_bytes)} {'would be ' if dry_run else ''}freed\n")
    if dry_run or not (p.remove or p.leftovers):
        return Exit.OK
    return Exit.FIXED
