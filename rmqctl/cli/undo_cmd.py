"""`rmqctl undo`: restore, bit-exact, what a previous rmqctl write changed (from the quarantine journal)."""
from __future__ import annotations

from pathlib import Path

import click

from rmqctl.status import Exit


@click.command("undo")
@click.argument("store", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--op", "op", metavar="NAME", help="The operation to undo (folder name or op name); default: the latest "
                                                  "one not yet undone.")
@click.option("--list", "list_ops", is_flag=True, help="List the journaled operations and their state.")
@click.option("--dry-run", "-n", is_flag=True, help="Show what would be restored; change nothing.")
@click.option("--force", is_flag=True, help="Restore even if a broker holds the store lock or a file changed since.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
def undo(store, op, list_ops, dry_run, force, as_json):
    """Restore what a previous rmqctl operation changed, bit-exact, from STORE/rmqctl-quarantine/.

    Entries are restored in reverse order; a file already back to its old content is skipped, so
    undo can be re-run after an interruption. Refuses while a broker holds the store lock, and
    refuses (changing nothing) when a file was changed after the operation, unless --force, or when
    the disk lacks the space that restoring needs (saved hard links are renamed back and need none).
    Directories the operation created are removed again. Undoing an operation twice is a no-op.

    \b
    Example:
      rmqctl undo /data/rocketmq/store --list
      rmqctl undo /data/rocketmq/store
      rmqctl undo /data/rocketmq/store --op 20250101T120000.000000Z-offsets-reset
    """
    from rmqctl.config.persist import store_lock
    from rmqctl.journal import core as journal
    from rmqctl.render import emit_json

    if list_ops:
        ops = journal.list_ops(store)
        for rec in ops:
            if as_json:
                emit_json("undo-list", {"op": rec.name, "name": rec.op, "state": rec.state,
                                        "actions": len(rec.entries), "begun": rec.begun})
            else:
                click.echo(f"{rec.name}  {rec.state:<9}  {len(rec.entries)} action(s)")
        return Exit.OK
    if not dry_run:
        from rmqctl.store.ownership import check_can_keep

        check_can_keep(store)
    with store_lock(store, force):
        res = journal.undo(store, op, force=force, dry_run=dry_run)
    if as_json:
        emit_json("undo", {"op": res.op.name, "already_undone": res.already, "dry_run": dry_run,
                           "steps": [{"path": s.entry["path"], "kind": s.entry["kind"],
                                      "action": s.action, "reason": s.reason} for s in res.steps]})
        return Exit.OK
    if res.already:
        click.echo(f"{res.op.name}: already undone")
        return Exit.OK
    for s in res.steps:
        verb = {"restore": "would restore" if dry_run else "restored", "skip": "unchanged",
                "conflict": "would overwrite" if dry_run else "overwrote"}[s.action]
        what = {"create_file": "removed created file", "create_dir": "removed created directory"}.get(
            s.entry["kind"], s.entry["kind"])
        click.echo(f"{verb}: {s.entry['path']} ({what}{'; ' + s.reason if s.reason else ''})")
    click.echo(f"{res.op.name}: " + ("dry run, nothing changed" if dry_run else "undone"))
    return Exit.OK
