"""Refusals and size repairs recover and rebuild plan before reading any record: symlinks out of the
store, stray files in commitlog/, consume-queue files of the wrong size (docs/recovery.md)."""
from __future__ import annotations

from rmqctl.errors import IOFailure
from rmqctl.formats import OFFSET_NAME
from rmqctl.repair.plan import Action, Plan, rel_path
from rmqctl.store import rules


def check_layout(store, plan: Plan) -> None:
    """No symlink followed out of the store; nothing the broker would refuse in commitlog/."""
    for name in ("commitlog", "consumequeue", "index", "checkpoint", "abort"):
        p = store.root / name
        if p.is_symlink():
            raise IOFailure(f"refused: {name} is a symlink; rmqctl never writes through a symlink", path=p)
    for p, why in store.commitlog.strays:
        plan.problems.append(f"{rel_path(store, p)}: {why} (the broker refuses to start; move it away by hand)")


def cq_size_plan(store, plan: Plan) -> None:
    """MappedFileQueue.load refuses a consume-queue file whose size is not mappedFileSizeConsumeQueue (4.5.1+
    except 4.9.2): bytes past the size are cut (kept in the quarantine); a short file is left to the operator."""
    fs = store.config.cq_file_size
    base = store.consumequeue_dir
    for topic, qid in store.queues():
        for name, size in _regular_files(store.queue_dir_entries(topic, qid)):
            if size == fs or size == 0:
                continue
            path = base.joinpath(topic, str(qid), name)
            if size > fs:
                plan.add(Action("truncate_file", rel_path(store, path),
                                f"{size - fs} bytes past mappedFileSizeConsumeQueue {fs}: {rules.SIZE_MISMATCH}; "
                                "the extra bytes are cut (kept in the quarantine)",
                                offset=fs, length=size - fs, group="consumequeue", payload=(path, fs)))
            else:
                plan.problems.append(f"{rel_path(store, path)}: size {size} < mappedFileSizeConsumeQueue {fs}; "
                                     f"{rules.SIZE_MISMATCH}; not repaired automatically")


def _regular_files(entries) -> list:
    """(name, size) of the mapped files among a queue directory's entries (Store.queue_dir_entries), in offset
    order: regular files named by a start offset, as FileQueue.scan without a root takes them (no link followed),
    from the entries' types and one lstat per file (a store may hold tens of thousands of queues)."""
    return [(e.name, e.stat(follow_symlinks=False).st_size) for e in sorted(entries or (), key=lambda e: e.name)
            if not e.is_symlink() and e.is_file(follow_symlinks=False) and OFFSET_NAME.match(e.name)]
