"""Every file rmqctl writes into a store keeps the owner, group and mode of the file it replaces; a new
file or directory takes those of the directory it is created in. Operators run repairs with sudo on a
store owned by the broker's user: a root-owned consume-queue or config file makes the next start fail.

``check_can_keep(store)`` refuses, before anything changes, when that cannot be done: rmqctl is not
root and a store directory belongs to another user (chown would fail half-way).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from rmqctl.errors import IOFailure

# the directories whose owner new files take; checked up front
_TOP = ("", "commitlog", "consumequeue", "index", "config", "rmqctl-quarantine")


def check_can_keep(store) -> None:
    """IOFailure (exit 8) when rmqctl could not give new files the store's owner."""
    euid = os.geteuid()
    if euid == 0:
        return
    store = Path(store)
    for name in _TOP:
        p = store / name if name else store
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if st.st_uid != euid:
            raise IOFailure(f"owned by uid {st.st_uid} but rmqctl runs as uid {euid}: files it writes would "
                            f"change owner and the broker could not open them; run it as uid {st.st_uid} or as root",
                            path=p)


def _apply(path, uid: int, gid: int, mode: int | None, *, fd: int | None = None) -> None:
    st = os.fstat(fd) if fd is not None else os.lstat(path)
    if (st.st_uid, st.st_gid) != (uid, gid):
        if fd is not None:
            os.fchown(fd, uid, gid)
        else:
            os.lchown(path, uid, gid)
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        if fd is not None:
            os.fchmod(fd, mode)
        else:
            os.chmod(path, mode)


def like_file(path, ref: os.stat_result, *, fd: int | None = None) -> None:
    """Give `path` (or the open `fd`) the owner, group and mode of `ref` (the file it replaces)."""
    _apply(path, ref.st_uid, ref.st_gid, stat.S_IMODE(ref.st_mode), fd=fd)


def like_parent(path, *, fd: int | None = None, directory: bool = False) -> None:
    """A new file or directory: the owner and group of its directory; files take the directory's mode
    without the execute bits, directories take it whole."""
    parent = os.stat(Path(path).parent)
    mode = stat.S_IMODE(parent.st_mode)
    _apply(path, parent.st_uid, parent.st_gid, mode if directory else mode & 0o666, fd=fd)


def keep(new, target) -> None:
    """`new` (staged, not yet in place) is about to replace `target` or be created as `target`: give it
    the owner, group and mode it must have there."""
    try:
        ref = os.stat(target)
    except FileNotFoundError:
        parent = os.stat(Path(target).parent)
        _apply(new, parent.st_uid, parent.st_gid, stat.S_IMODE(parent.st_mode) & 0o666)
        return
    like_file(new, ref)


def stat_fields(st: os.stat_result) -> dict:
    """What a journal entry records so undo can give a restored file its owner back."""
    return {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}


def restore_fields(path, entry: dict) -> None:
    uid, gid = entry.get("uid"), entry.get("gid")
    if uid is None or gid is None:
        if entry.get("mode") is not None:
            os.chmod(path, entry["mode"])
        return
    _apply(path, uid, gid, entry.get("mode"))
