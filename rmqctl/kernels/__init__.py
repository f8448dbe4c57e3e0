"""Which record kernel the batch passes use: RMQCTL_KERNEL=auto|numba|numpy.

``numpy``: rmqctl.scanvec's array kernel (always there). ``numba``: the same walk compiled by numba
(rmqctl.kernels.walk_nb), installed with the `fast` extra. ``auto`` (the default): the numpy kernel for the
first AUTO_AFTER bytes a process walks, then numba when it imports and its on-disk compile cache has a
writable home, else numpy, silently: loading numba costs ~0.7 CPU s per process (LLVM), which the compiled
walk pays back only after about a GiB, so small stores and small files never load it (a pass that knows its
share up front, verify, calls ``expect`` and gets numba from the start past AUTO_UPFRONT). The kernels are
proven equal record for record, so switching between windows changes nothing but speed. Nothing here imports numpy or
numba: ``check_env`` runs on every command and costs one dictionary lookup.

The compile cache: NUMBA_CACHE_DIR as the user set it, else $XDG_CACHE_HOME/rmqctl/numba (default
~/.cache/rmqctl/numba), set before numba is first imported. The first batch pass compiles the kernel
(seconds) and stores it there; later processes load it.
"""
from __future__ import annotations

import os

from rmqctl.errors import UsageError

ENV = "RMQCTL_KERNEL"
CHOICES = ("auto", "numba", "numpy")
AUTO_AFTER = 1 << 30
_loaded: dict = {}
_walked = [0]
_eager = [False]


def load_now():
    """For a caller that knows a long pass is ahead (dump --json of a big file): under auto, load the
    compiled kernel now instead of after AUTO_AFTER bytes. Returns walk_kernel()."""
    _eager[0] = True
    return walk_kernel()


def note_walked(n: int) -> None:
    """Count the bytes this process's batch passes have walked (auto switches to numba past AUTO_AFTER)."""
    _walked[0] += n


AUTO_UPFRONT = 512 << 20


def expect(nbytes: int) -> None:
    """A pass that knows it will walk about `nbytes` in this process (verify: its share of the store) lets auto
    decide up front: from AUTO_UPFRONT on, numba is loaded now (in the parent, before workers fork: they inherit
    it), as it pays back its ~0.5 CPU s load after about half a GiB of verify's per-record work."""
    if nbytes >= AUTO_UPFRONT and requested() == "auto" and _walked[0] < AUTO_AFTER:
        _walked[0] = AUTO_AFTER
        walk_kernel()


def requested() -> str:
    """The RMQCTL_KERNEL value (auto when unset or empty); UsageError (exit 2) for an unknown one."""
    v = os.environ.get(ENV, "").strip().lower() or "auto"
    if v not in CHOICES:
        raise UsageError(f"unknown kernel {os.environ.get(ENV)!r} (use one of: {', '.join(CHOICES)})",
                         field=ENV)
    return v


def check_env() -> None:
    """RMQCTL_KERNEL names a kernel, and numba is installed when it is asked for by name (a usage error
    before the command runs, not at its first batch); numba is looked up, not imported."""
    if requested() == "numba" and not _installed("numba"):
        raise UsageError(_NEEDS_NUMBA, field=ENV)


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_NEEDS_NUMBA = ("the numba kernel needs numba (pip install 'rmqctl[fast]') and a writable cache directory "
                "(NUMBA_CACHE_DIR)")


def cache_dir() -> str | None:
    """A writable directory for numba's compile cache (NUMBA_CACHE_DIR when set, else rmqctl's own), or None
    (then numba is not used: without a cache it would compile in every process and warn about it)."""
    d = os.environ.get("NUMBA_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "rmqctl", "numba")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK | os.X_OK) else None


def walk_kernel():
    """The compiled window walk (rmqctl.kernels.walk_nb.Kernel) when the numba kernel is selected and
    loads, else None (the numpy kernel). RMQCTL_KERNEL=numba with numba missing is a usage error."""
    want = requested()
    if want == "numpy" or (want == "auto" and _walked[0] < AUTO_AFTER and not _eager[0]):
        return None
    if want in _loaded:
        return _loaded[want]
    k = None
    d = cache_dir()
    if d is not None:
        os.environ.setdefault("NUMBA_CACHE_DIR", d)
        try:
            from rmqctl.kernels import walk_nb

            k = walk_nb.Kernel()
        except Exception:   # noqa: BLE001 -- numba missing, or unusable with this numpy/CPU: the numpy kernel
            k = None
        if k is not None:
            import gc

            # numba's import leaves ~10^5 long-lived objects that every full collection would walk again (measured
            # ~7 % of a recover): they and everything imported so far move to the permanent generation
            gc.freeze()
    if k is None and want == "numba":
        raise UsageError(_NEEDS_NUMBA, field=ENV)
    _loaded[want] = k
    return k


def index_kernel():
    """rmqctl.kernels.index_nb (verify's compiled index-item checks) when this process has already loaded the
    numba kernel for its walk, else None: an index check alone never loads numba (a second of loading for a
    pass that takes a fraction of that on a small file)."""
    if _loaded.get(requested()) is None:
        return None
    k = _loaded.get("index")
    if k is None:
        try:
            from rmqctl.kernels import index_nb as k

            k.warm()
        except Exception:   # noqa: BLE001 -- a numba that cannot build it: the numpy checks
            k = False
        _loaded["index"] = k
    return k or None


def dispatch_kernel():
    """rmqctl.kernels.dispatch_nb (compiled dispatch helpers) when the numba kernel is in use, else None."""
    if walk_kernel() is None:
        return None
    k = _loaded.get("dispatch")
    if k is None:
        from rmqctl.kernels import dispatch_nb as k

        _loaded["dispatch"] = k
    return k


def rebuild_kernel():
    """rmqctl.kernels.rebuild_nb (the compiled rebuild/recover dispatch) when the numba kernel is in use, else
    None."""
    if dispatch_kernel() is None:
        return None
    from rmqctl.kernels import rebuild_nb

    return rebuild_nb


def name() -> str:
    """The kernel a batch pass uses now: 'numba' or 'numpy'."""
    return "numpy" if walk_kernel() is None else "numba"


def expect_walk(n: int, pays_after: int) -> None:
    """A pass about to walk n bytes, whose compiled path pays numba's load back after `pays_after` bytes
    (rebuild and recover, whose dispatch is compiled too: rmqctl.kernels.rebuild_nb), lets auto use numba
    from its first window. The kernel loads here, before any worker forks (workers inherit it)."""
    if n >= pays_after and requested() == "auto" and _walked[0] < AUTO_AFTER:
        _walked[0] = AUTO_AFTER
        import gc

        was = gc.isenabled()
        gc.disable()        # numba's import makes ~10^5 objects: the collector's passes cost ~15 % of the load
        try:
            walk_kernel()
        finally:
            if was:
                gc.enable()
