"""Carry out a recover/rebuild plan through the journal, action by action (run inside
rmqctl.repair.transaction.run, which rolls it back on any error)."""
from __future__ import annotations

import os
from pathlib import Path

from rmqctl.errors import IOFailure
from rmqctl.repair.plan import Ctx


def apply(store, ctx: Ctx, journal, *, progress=None) -> int:
    """Carry out the plan in order, journaling each step. Returns the number of steps done."""
    from rmqctl.journal import ops as JO

    n = 0
    for a in ctx.plan.actions:
        if a.kind == "delete_file":
            p = Path(a.payload)
            if p.exists():
                JO.delete_file(journal, p)
        elif a.kind == "zero_range":
            path, off, length = a.payload
            JO.write_range(journal, path, off, zeros=length)
        elif a.kind == "truncate_file":
            path, new_len = a.payload
            journal.before_truncate(path, new_len)
            os.truncate(path, new_len)
            JO.fsync_file(path)
        elif a.kind in ("write_record", "write_bytes"):
            path, off, data = a.payload
            JO.write_range(journal, path, off, data)
        elif a.kind in ("write_file", "create_file"):
            path, staged = a.payload
            JO.install_file(journal, path, staged)
        elif a.kind == "remove_abort":
            if Path(a.payload).exists():
                JO.delete_file(journal, a.payload)
        n += 1
        if progress:
            progress.advance(1)
    return n


def check_space(store, ctx: Ctx) -> None:
    """Refuse before changing anything when the staged files cannot be installed: hard links and
    renames need no space, but journaled ranges are copied into the quarantine."""
    need = sum(a.length or 0 for a in ctx.plan.actions if a.kind in ("zero_range", "write_record", "write_bytes"))
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise IOFailure(f"not enough free space for the quarantine copy: need {need} bytes, {free} free; "
                        "nothing was changed", path=store.root)
