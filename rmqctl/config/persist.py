"""Write a config file the way the broker's persist() does, but safe for every version's loader
(store-format.md §6.2):

1. render in the broker's dialect and validate: re-parse what will be written and require it to render
   to the same bytes; never ``null``, never empty;
2. take the store lock (refuse while a broker holds it, unless ``force``);
3. journal the previous bytes of ``.bak`` and main (``rmqctl undo`` restores them);
4. copy the current main to ``.bak`` -- only when the current main is itself loadable, so a corrupt main
   never overwrites a good ``.bak`` (faults.md R5) -- via tmp + fsync + rename;
5. write ``<file>.tmp``, fsync, ``os.replace`` onto main, fsync the directory.

``dry_run`` returns the unified diff and writes nothing.
"""
from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rmqctl import fastjson
from rmqctl.config.files import Loaded, file_mode_or_default
from rmqctl.errors import FormatError, RmqError
from rmqctl.repair.journal import Journal, write_file_durably
from rmqctl.store.files import check_writes
from rmqctl.store.lock import store_write_lock


@contextmanager
def store_lock(store: Path, force: bool):
    """The broker's lock when ``store`` is a store (has ``lock`` or ``commitlog/``); a bare config
    folder outside any store has no broker to exclude, and we do not create a lock file there."""
    if (Path(store) / "lock").exists() or (Path(store) / "commitlog").is_dir():
        with store_write_lock(store, force=force):
            yield
    else:
        yield


@dataclass
class PersistResult:
    path: Path
    diff: str
    changed: bool
    written: bool
    journal: str | None = None      # quarantine op name, for `rmqctl undo --op`
    bak_updated: bool = False


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
    return "".join(difflib.unified_diff(a, b, old_label or f"{path} (current)", new_label or f"{path} (new)"))


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
    if dry_run or not changed:
        return PersistResult(path, diff, changed, False)
    bak = path.with_name(path.name + ".bak")
    check_writes(target.store, (path, bak))   # never through a link, refused before anything changes
    with store_lock(target.store, force):
        # re-read under the lock: refuse if the file changed since we decided what to write
        try:
            now = path.read_bytes()
        except FileNotFoundError:
            now = None
        if now != old:
            raise RmqError("the file changed while rmqctl was preparing the edit; nothing written, try again",
                           path=path)
        mode = file_mode_or_default(path)
        path.parent.mkdir(exist_ok=True)
        with Journal.begin(target.store, op) as j:
            bak_updated = False
            if loaded.main.usable and old is not None:
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
        return PersistResult(path, diff, True, True, j.name, bak_updated)


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
    check_writes(target.store, (path,))
    with store_lock(target.store, force):
        mode = file_mode_or_default(bak.path)
        with Journal.begin(target.store, op) as j:
            j.before_write(path, data)
            write_file_durably(path, data, mode=mode)
        return PersistResult(path, diff, True, True, j.name)
