"""The one way a repair changes a store: ``run(store, job)``.

plan -> stage -> journal -> apply, under the broker's lock, with every applied step rolled back on any
error (``rmqctl.journal.transaction``). recover, rebuild and reclaim are ``Job``s; config edits go
through the same journal transaction from ``config/persist.py`` (config sits beside repair, not above
it). A library caller gets the same safety as the CLI, which only parses options and renders the
``Outcome``::

    from rmqctl.repair import recover as R, transaction as T
    job = T.StoreJob("recover", lambda store, staging, pg: R.analyze(store, R.Options(), staging, progress=pg))
    out = T.run("/data/rocketmq/store", job)          # Outcome: .status, .planned.plan, .journal

Order in a real run (docs/architecture.md, "A repair, end to end"): lock; roll back an op a killed
run left unfinished; open the store (after the rollback: a killed run's changes must not shape the
plan); begin the journal; ``job.plan`` builds replacement files in the journal's ``staging/``;
``job.check`` refuses (links, foreign files) before anything changes; problems -> ``PROBLEMS`` with
nothing changed; nothing to do -> ``OK``; ``job.prepare`` (free space); ``job.apply`` action by
action; commit -> ``FIXED``. A dry run plans in a temporary folder, without the lock, and changes
nothing.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqctl.journal import core
from rmqctl.journal.transaction import finish, journaled
from rmqctl.status import Exit


class _Quiet:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def advance(self, n: int) -> None:
        pass


def no_progress(total: int, description: str, unit: str = "B") -> _Quiet:
    return _Quiet()


class Job:
    """What a store-changing command plans and applies. Subclasses set ``op`` and override ``plan``
    and ``apply``; the defaults suit a planned object with a ``.plan`` (``repair.plan.Plan``)."""

    op = "repair"

    def plan(self, store, staging: Path, progress) -> Any:
        raise NotImplementedError

    def work(self, store) -> int:
        """Size of the planning work, for a progress bar (bytes of commitlog)."""
        return sum(f.size for f in store.commitlog.files)

    def problems(self, planned) -> list[str]:
        return planned.plan.problems

    def nothing_to_do(self, planned) -> bool:
        return planned.plan.nothing_to_do

    def check(self, store, planned) -> None:
        """Refusals before anything changes, also in a dry run: no planned write through a symlink or
        onto a special file."""
        from rmqctl.store.files import check_writes

        check_writes(store.root, (store.root / a.path for a in planned.plan.actions))

    def prepare(self, store, planned) -> None:
        """Last refusals in a real run, under the lock, before the first change (free space)."""
        from rmqctl.repair.apply import check_space

        check_space(store, planned)

    def steps(self, planned) -> int:
        return len(planned.plan.actions)

    def apply(self, store, planned, journal: core.Journal, progress) -> None:
        from rmqctl.repair.apply import apply

        apply(store, planned, journal, progress=progress)


class StoreJob(Job):
    """recover / rebuild: ``build(store, staging, progress)`` returns a ``recover.Ctx``."""

    def __init__(self, op: str, build: Callable):
        self.op = op
        self.build = build

    def plan(self, store, staging, progress):
        return self.build(store, staging, progress)


@dataclass
class Outcome:
    planned: Any                  # what job.plan returned
    status: Exit                  # OK: nothing to do; PROBLEMS: left unfixed / dry run with changes; FIXED
    applied: bool = False
    dry_run: bool = False
    journal: Path | None = None   # the op's quarantine folder (applied runs)
    op_name: str | None = None    # for `rmqctl undo --op`
    rolled_back: list[str] = field(default_factory=list)   # interrupted ops rolled back first
    unfinished: list[str] = field(default_factory=list)    # dry run: ops a real run would roll back first


def run(store_dir, job: Job, *, config=None, dry_run: bool = False, progress=no_progress, warn=None) -> Outcome:
    """Plan and (unless ``dry_run``) apply ``job`` on the store at ``store_dir`` as one journaled,
    locked transaction. Raises the ``rmqctl.errors`` kinds: StoreLockedError, IOFailure (the errno
    named; every applied change rolled back), ProblemsFound/UsageError from the job's refusals.
    ``progress(total, description[, unit])`` gives a context manager with ``advance(n)``."""
    from rmqctl.store.layout import Store

    root = Path(store_dir)
    if dry_run:
        return _dry_run(root, job, config, progress)
    with journaled(root, job.op, warn=warn) as j:
        store = Store.open(root, config)          # after the rollback of an interrupted op
        staging = make_staging(j.dir / "staging")
        with progress(job.work(store), "analysing") as pg, store.listed_once():
            planned = job.plan(store, staging, pg)
        job.check(store, planned)
        out = Outcome(planned, Exit.OK, journal=j.dir, op_name=j.name, rolled_back=j.rolled_back)
        problems = job.problems(planned)
        if problems:
            finish(j, committed=False, why="problems: " + "; ".join(problems))
            out.status = Exit.PROBLEMS
            return out
        if job.nothing_to_do(planned):
            finish(j, committed=True)
            return out
        job.prepare(store, planned)
        with progress(job.steps(planned), "applying", "steps") as pg:
            job.apply(store, planned, j, pg)
    out.applied, out.status = True, Exit.FIXED
    return out


def _dry_run(root: Path, job: Job, config, progress) -> Outcome:
    from rmqctl.store.layout import Store

    store = Store.open(root, config)
    staging = make_staging(None)
    try:
        with progress(job.work(store), "planning") as pg, store.listed_once():
            planned = job.plan(store, staging, pg)
        job.check(store, planned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    unfinished = [r.name for r in core.list_ops(root) if r.state in ("open", "aborted")]
    changes = bool(job.problems(planned)) or not job.nothing_to_do(planned)
    return Outcome(planned, Exit.PROBLEMS if changes else Exit.OK, dry_run=True, unfinished=unfinished)


def make_staging(parent: Path | None) -> Path:
    """The folder replacement files are built in: ``parent`` (the journal's ``staging/``, emptied of a
    previous build), or a new temporary folder for a dry run."""
    import tempfile

    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
        for sub in ("index", "cq"):
            if (parent / sub).exists():
                shutil.rmtree(parent / sub)
        return parent
    return Path(tempfile.mkdtemp(prefix="rmqctl-plan-"))
