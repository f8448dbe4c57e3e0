"""One journaled operation on a store: lock, settle, begin, run, commit -- or roll back.

``journaled(store, op)`` is the only way a store-changing command opens a journal:

1. take the broker's lock (``lock=False`` when the caller already holds it; held -> exit 8);
2. roll back every op a killed run left unfinished (``core.settle_unfinished``), so the body starts
   from a store some complete op left;
3. begin the op's journal and hand it to the body; every change goes through its ``before_*`` calls
   or ``ops``;
4. commit when the body returns; on ANY exception (Ctrl-C included) append ``aborted``, undo what was
   applied, drop a journal that recorded nothing, and raise: an ``OSError`` as one ``IOFailure`` line
   naming the errno ("disk full", "read-only file system", ...) and whether the store is unchanged.

``rmqctl.repair.transaction.run`` builds plan -> stage -> apply on top of it; ``config/persist.py``
uses it directly. Details of the journal itself: ``core`` (docs/architecture.md, "A repair, end to
end").
"""
from __future__ import annotations

import errno
import shutil
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rmqctl.errors import IOFailure, RmqError
from rmqctl.journal import core

ERRNO_WORDS = {errno.ENOSPC: "disk full", errno.EROFS: "read-only file system",
               errno.EDQUOT: "disk quota exceeded"}


def errno_words(e: OSError) -> str:
    """What an OSError means to an operator, in a few words."""
    return ERRNO_WORDS.get(e.errno, e.strerror or str(e))


def drop_if_empty(j: core.Journal) -> None:
    """An op that changed nothing leaves no quarantine folder behind."""
    if not core.read_op(j.dir).entries:
        shutil.rmtree(j.dir, ignore_errors=True)
        try:
            j.dir.parent.rmdir()
        except OSError:
            pass


def roll_back(root: Path, j: core.Journal, exc: BaseException) -> str | None:
    """Mark the op aborted and undo what it applied. None when the store is back as it was, else why
    not (the op stays in the quarantine; `rmqctl undo --op` or the next op finishes it)."""
    try:
        j._append({"kind": "aborted", "error": f"{type(exc).__name__}: {exc}"})
    except OSError:
        pass
    j.close()
    try:
        if core.read_op(j.dir).entries:
            core.undo(root, op=j.name, force=True, _unfinished=True)
        else:
            drop_if_empty(j)
        return None
    except (OSError, RmqError) as e2:
        return str(e2)


def failure(e: OSError, root: Path, j: core.Journal, incomplete: str | None) -> IOFailure:
    """The one line for an OSError that stopped an op: the errno in words and the store's state."""
    what = errno_words(e)
    if incomplete is not None:
        return IOFailure(f"{what}; the rollback is incomplete: run `rmqctl undo {root} --op {j.name}`",
                         path=e.filename or root)
    kept = f" (rolled-back journal kept in {j.dir})" if j.dir.exists() else ""
    return IOFailure(f"{what}; every change was rolled back, the store is unchanged{kept}", path=e.filename or root)


@contextmanager
def journaled(store, op: str, *, lock: bool = True, force: bool = False, name_errno: bool = True, warn=None):
    """Run the ``with`` body as one journaled op (see the module doc). Yields the ``Journal``; its
    ``rolled_back`` lists the interrupted ops settled first. ``name_errno=False`` re-raises an OSError
    as it is (after the rollback) for a caller that words its own line; ``warn(text)`` is told when a
    rollback is incomplete."""
    from rmqctl.store.lock import store_write_lock
    from rmqctl.store.ownership import check_can_keep

    root = Path(store)
    if lock:
        check_can_keep(root)        # before anything changes: new files must get the store's owner
    with store_write_lock(root, force=force) if lock else nullcontext():
        settled = core.settle_unfinished(root)
        j = core.Journal.begin(root, op)
        j.rolled_back = settled + j.rolled_back
        try:
            yield j
            if j.dir.exists() and core.read_op(j.dir).state == "open":   # not ended by finish()
                j.commit()
        except BaseException as e:
            incomplete = roll_back(root, j, e)
            if incomplete is not None and warn is not None:
                warn(f"rollback incomplete ({incomplete}); run `rmqctl undo {root} --op {j.name}`")
            if isinstance(e, OSError) and name_errno:
                raise failure(e, root, j, incomplete) from e
            raise
        finally:
            shutil.rmtree(j.dir / "staging", ignore_errors=True)


def finish(j: core.Journal, *, committed: bool, why: str = "") -> None:
    """End an op early with nothing applied (nothing to do: committed; problems: aborted with `why`),
    and drop its folder when it recorded nothing."""
    if committed:
        j.commit()
    else:
        j._append({"kind": "aborted", "error": why})
        j.close()
    drop_if_empty(j)
