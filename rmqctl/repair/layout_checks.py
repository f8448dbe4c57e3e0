"""Refusals and size repairs recover and rebuild plan before reading any record: symlinks out of the
store, stray files in commitlog/, consume-queue files of the wrong size (docs/recovery.md)."""
from __future__ import annotations

from rmqctl.errors import IOFailure
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
    from rmqctl.store.files import FileQueue

    fs = store.config.cq_file_size
    for topic, qid in store.queues():
        for f in FileQueue.scan(store.consumequeue_dir / topic / str(qid)).files:
            if f.size > fs:
                plan.add(Action("truncate_file", rel_path(store, f.path),
                                f"{f.size - fs} bytes past mappedFileSizeConsumeQueue {fs}: {rules.SIZE_MISMATCH}; "
                                "the extra bytes are cut (kept in the quarantine)",
                                offset=fs, length=f.size - fs, group="consumequeue", payload=(f.path, fs)))
            elif 0 < f.size < fs:
                plan.problems.append(f"{rel_path(store, f.path)}: size {f.size} < mappedFileSizeConsumeQueue {fs}; "
                                     f"{rules.SIZE_MISMATCH}; not repaired automatically")
