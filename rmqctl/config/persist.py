"""Write a config file the way the broker's persist() does, but safe for every version's loader
(docs/store-format.md, Config JSON files):

1. render in the broker's dialect and validate: re-parse what will be written and require it to render
   to the same bytes; never ``null``, never empty;
2. take the store lock (refuse while a broker holds it, unless ``force``);
3. journal the previous bytes of ``.bak`` and main (``rmqctl undo`` restores them) inside the store's one
   journal transaction (``rmqctl.journal.transaction.journaled``: an interrupted op is rolled back first,
   a failure rolls this one back);
4. copy the current main to ``.bak`` (as the broker's persist does) -- only when the current main is good by
   meaning *and* not worse than ``.bak``: a main the broker cannot decode, or one it loads as EMPTY (misspelt
   or null table), never replaces ``.bak``; nor does a main whose dataVersion counter is older than
   ``.bak``'s (then ``.bak`` is kept and ``PersistResult.bak_note`` says why) -- via tmp + fsync + rename;
5. write ``<file>.tmp``, fsync, ``os.replace`` onto main, fsync the directory.

On any error the ``.tmp`` files this call created are removed (a full disk leaves nothing behind). Writes
happen only inside a store (a directory with ``config/``, ``commitlog/``, ``consumequeue/``, ``checkpoint``,
``lock`` or ``index/``), where the undo journal lives; a bare directory of JSON files is refused.

``dry_run`` returns the unified diff and writes nothing.
"""
from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rmqctl import fastjson
from rmqctl.config.files import LOAD_MAIN, Loaded, file_mode_or_default
from rmqctl.errors import FormatError, IOFailure, RmqError, UsageError
from rmqctl.journal.core import write_file_durably
from rmqctl.journal.transaction import journaled
from rmqctl.store.files import check_writes
from rmqctl.store.lock import store_write_lock
from rmqctl.terminal import escape_text


@contextmanager
def store_lock(store: Path, force: bool):
    """The broker's lock when ``store`` is a store (has ``lock`` or ``commitlog/``); a bare config
    folder outside any store has no broker to exclude, and we do not create a lock file there."""
    if (Path(store) / "lock").exists() or (Path(store) / "commitlog").is_dir():
        with store_write_lock(store, force=force):
            yield
    else:
        yield


def settle_before_edit(store: Path, *, dry_run: bool = False) -> list[str]:
    """Roll back an rmqctl op a killed run left unfinished, before the edit reads the file: the edit
    then starts from what the last complete op left (a killed `config set` re-run converges). Skipped
    for a dry run and while a broker holds the lock (persist reports that)."""
    from rmqctl.errors import StoreLockedError
    from rmqctl.journal.core import settle_unfinished

    if dry_run:
        return []
    try:
        with store_lock(store, False):
            return settle_unfinished(store)
    except StoreLockedError:
        return []


@dataclass
class PersistResult:
    path: Path
    diff: str
    changed: bool
    written: bool
    journal: str | None = None      # quarantine op name, for `rmqctl undo --op`
    bak_updated: bool = False
    bak_note: str | None = None     # why .bak was left as it was (it is better than the main it would replace)


_STORE_MARKS = ("commitlog", "consumequeue", "checkpoint", "lock", "index", "abort")


def require_store(target) -> None:
    """Refuse to write outside a store: the journal (undo) goes to the store root, never to some parent."""
    cdir = Path(target.config_dir)
    if cdir.name == "config" and Path(target.store) == cdir.parent:
        return
    if any((Path(target.store) / m).exists() for m in _STORE_MARKS):
        return
    raise UsageError(f"{cdir} is not the config/ directory of a broker store; rmqctl edits config files only "
                     f"inside a store (where it keeps the undo journal): copy the file into STORE/config/ or give "
                     f"the store directory", path=target.path)


def _counter(c):
    """dataVersion.counter of a copy as it is on disk (the loaded doc may already carry the edit)."""
    try:
        doc = fastjson.loads(c.raw) if c.usable and c.raw else None
    except FormatError:
        return None
    dv = doc.get("dataVersion") if isinstance(doc, dict) else None
    try:
        return int(dv.get("counter")) if isinstance(dv, dict) else None
    except (TypeError, ValueError):
        return None


def rotate_decision(loaded: Loaded) -> tuple[bool, str | None]:
    """(copy main to .bak?, why not). Main goes to .bak only if it is good and not worse than .bak."""
    main, bak = loaded.main, loaded.bak
    if main.raw is None or not main.usable:
        return False, None  # the broker would not load main: .bak (if any) is the better copy, keep it
    if loaded.used != "main" or loaded.verdict != LOAD_MAIN:
        return False, None if bak.status == "missing" else f"kept .bak: main {main.describe()}"
    mc, bc = _counter(main), _counter(bak)
    if mc is not None and bc is not None and bc > mc:
        return False, f"kept .bak: its dataVersion counter {bc} is newer than main's {mc}"
    return True, None


@contextmanager
def _no_tmp_leftovers(*paths: Path):
    """Remove ``<path>.tmp`` files created inside the block when it fails (ENOSPC, EIO, Ctrl-C)."""
    tmps = [p.with_name(p.name + ".tmp") for p in paths]
    existed = {t for t in tmps if t.exists()}
    try:
        yield
    except BaseException:
        for t in tmps:
            if t not in existed:
                try:
                    t.unlink()
                except OSError:
                    pass
        raise


def render(doc, *, compact: bool = False, path=None) -> bytes:
    if doc is None:
        raise FormatError("refusing to write `null`", path=path)
    if not isinstance(doc, dict):
        raise FormatError("refusing to write a top-level value that is not an object", path=path)
    data = fastjson.dump_bytes(doc, compact=compact)
    # validate: what we write must parse back to the same document
    again = fastjson.loads(data, path)
    if fastjson.dump_bytes(again, compact=compact) != data or not data.strip():
        raise FormatError("internal check failed: the rendered JSON does not re-parse to itself", path=path)
    return data


def unified_diff(old: bytes | None, new: bytes, path: Path, old_label: str | None = None,
                 new_label: str | None = None) -> str:
    a = [] if old is None else old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    for lines in (a, b):
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    d = "".join(difflib.unified_diff(a, b, old_label or f"{path} (current)", new_label or f"{path} (new)"))
    return escape_text(d)    # a damaged copy's control bytes are shown, not sent to whatever reads the diff


def persist(loaded: Loaded, doc, *, op: str, force: bool = False, dry_run: bool = False) -> PersistResult:
    """Write ``doc`` as the new content of ``loaded``'s file. ``loaded`` is the state read before the
    edit (its main copy decides whether main may be copied to .bak)."""
    target = loaded.target
    path = target.path
    if target.bak_only:
        raise RmqError("refusing to edit a .bak file directly; edit the main file (or `config restore --from-bak`)",
                       path=path.with_name(path.name + ".bak"))
    if target.kind.binary:
        raise RmqError("timercheck is binary; rmqctl does not edit it", path=path)
    data = render(doc, compact=target.kind.compact, path=path)
    old = loaded.main.raw
    diff = unified_diff(old, data, path)
    changed = old != data
    rotate, bak_note = rotate_decision(loaded)
    if dry_run or not changed:
        return PersistResult(path, diff, changed, False, bak_note=bak_note if changed else None)
    require_store(target)
    bak = path.with_name(path.name + ".bak")
    check_writes(target.store, (path, bak))   # never through a link, refused before anything changes
    with store_lock(target.store, force), _no_tmp_leftovers(path, bak):
        # re-read under the lock: refuse if the file changed since we decided what to write
        try:
            now = path.read_bytes()
        except FileNotFoundError:
            now = None
        if now != old:
            raise RmqError("the file changed while rmqctl was preparing the edit; nothing written, try again",
                           path=path)
        mode = file_mode_or_default(path)
        bak_updated = False
        cur_bak = None
        try:
            # the lock is held (store_lock); an OSError is worded below, with the .bak it may have rotated
            with journaled(target.store, op, lock=False, name_errno=False) as j:   # creates config/ if missing
                if rotate:
                    try:
                        cur_bak = bak.read_bytes()
                    except FileNotFoundError:
                        cur_bak = None
                    if cur_bak != old:
                        j.before_write(bak, old)
                        write_file_durably(bak, old, mode=mode)
                        bak_updated = True
                j.before_write(path, data)
                write_file_durably(path, data, mode=mode)
        except OSError as e:
            raise IOFailure(_failed_write(e, path, data, bak, cur_bak if bak_updated else False, mode),
                            path=path) from e
        return PersistResult(path, diff, True, True, j.name, bak_updated, bak_note)


def _read_or_none(p: Path):
    try:
        return p.read_bytes()
    except OSError:
        return None


def _failed_write(e: OSError, path: Path, data: bytes, bak: Path, old_bak, mode) -> str:
    """One line for a write that failed part-way (full disk, read-only, I/O error); puts a rotated .bak back.
    ``old_bak``: False when .bak was not touched, else its previous bytes (None: it did not exist)."""
    why = e.strerror or str(e)
    try:
        written = path.read_bytes() == data
    except OSError:
        written = False
    if written:
        return f"{why} after the new content was in place (not confirmed on disk); `rmqctl undo` reverts it"
    if old_bak is not False:
        try:
            if old_bak is None and not bak.exists() or old_bak is not None and _read_or_none(bak) == old_bak:
                pass  # the journal's rollback already put it back
            elif old_bak is None:
                bak.unlink()
            else:
                write_file_durably(bak, old_bak, mode=mode)
        except OSError:
            return f"{why}: the edit was not made; {bak.name} now holds the previous main (`rmqctl undo` restores it)"
    return f"{why}: the edit was not made, main and .bak are as they were"


def restore_from_bak(loaded: Loaded, *, force: bool = False, dry_run: bool = False,
                     op: str = "config-restore") -> PersistResult:
    """Put the .bak content back as main (byte for byte), keeping .bak. Refuses an unusable .bak."""
    target = loaded.target
    path = target.path
    bak = loaded.bak
    if not bak.usable:
        raise RmqError(f".bak is {bak.describe()}; nothing to restore from", path=bak.path)
    data = bak.raw
    old = loaded.main.raw
    diff = unified_diff(old, data, path, new_label=f"{bak.path}")
    if dry_run or old == data:
        return PersistResult(path, diff, old != data, False)
    require_store(target)
    check_writes(target.store, (path,))
    with store_lock(target.store, force), _no_tmp_leftovers(path):
        mode = file_mode_or_default(bak.path)
        with journaled(target.store, op, lock=False) as j:
            j.before_write(path, data)
            write_file_durably(path, data, mode=mode)
        return PersistResult(path, diff, True, True, j.name)
