"""rmqctl.repair.transaction.run called as a library, without the CLI: a repair is one transaction
(lock, journal, stage, apply, rollback) whatever calls it."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import faultlib as F
import pytest
from conftest import FIXTURES
from faultlib import tree_hashes

from rmqctl.errors import IOFailure
from rmqctl.journal import core
from rmqctl.repair import recover as R
from rmqctl.repair import transaction as T
from rmqctl.status import Exit
from rmqctl.store.config import StoreConfig


def crashed(tmp: Path) -> Path:
    F.copy_store(FIXTURES / "stores" / "crash-multifile-v5", tmp / "s")
    root = tmp / "s" / "store"
    F.torn_tail(root)
    return root


def recover_job() -> T.StoreJob:
    return T.StoreJob("recover", lambda store, staging, pg: R.analyze(store, R.Options(), staging, progress=pg))


def config(root: Path) -> StoreConfig:
    return StoreConfig.from_file(root.parent / "manifest.json")


def test_library_run_repairs_then_has_nothing_to_do(tmp_path):
    root = crashed(tmp_path)
    before = tree_hashes(root)
    dry = T.run(root, recover_job(), config=config(root), dry_run=True)
    assert dry.status == Exit.PROBLEMS and dry.planned.plan.actions and tree_hashes(root) == before
    out = T.run(root, recover_job(), config=config(root))
    assert out.status == Exit.FIXED and out.applied and out.journal.is_dir()
    assert tree_hashes(root) != before
    again = T.run(root, recover_job(), config=config(root))
    assert again.status == Exit.OK and not again.applied
    core.undo(root, out.op_name)
    assert tree_hashes(root) == before


@pytest.mark.parametrize("err,words", [(errno.ENOSPC, "disk full"), (errno.EROFS, "read-only file system")])
@pytest.mark.parametrize("after", [1, 2])
def test_disk_error_after_some_actions_leaves_the_store_unchanged(tmp_path, monkeypatch, err, words, after):
    """The (after+1)-th journaled action fails (its entry cannot be written): the `after` actions already
    applied are rolled back, and the error names the errno."""
    root = crashed(tmp_path)
    before = tree_hashes(root)
    real, seen = core.Journal._append, [0]

    def failing(self, entry):
        if entry.get("kind") in core._ACTIONS and entry.get("kind") != "create_dir":
            seen[0] += 1
            if seen[0] > after:
                raise OSError(err, os.strerror(err), str(self.dir / core.JOURNAL))
        return real(self, entry)

    monkeypatch.setattr(core.Journal, "_append", failing)
    with pytest.raises(IOFailure) as ei:
        T.run(root, recover_job(), config=config(root))
    monkeypatch.undo()
    assert seen[0] == after + 1, "the fault was not reached"
    assert words in str(ei.value) and "unchanged" in str(ei.value)
    assert tree_hashes(root) == before
    [op] = core.list_ops(root)
    assert op.state == "undone" and len([e for e in op.entries if e["kind"] != "create_dir"]) == after
