"""`-j N` under RMQCTL_KERNEL=auto: a parent about to fork workers over a walk past the auto threshold loads
the compiled kernel once, and the forked workers inherit it (each worker alone walks too little to load it);
below the threshold nothing is loaded. Either way the results are those of one numpy process."""
from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys

import faultlib as F
import numba  # noqa: F401  -- installed with the `fast` extra: the kernel auto can load
from conftest import FIXTURES
from rmqctl import kernels

FX = FIXTURES / "stores" / "crash-multifile-v5"


def _child_kernel(q):
    q.put(kernels.name())


def _store(root):
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    cfg = json.loads((FX / "manifest.json").read_text())["store_config"]
    return Store.open(root, StoreConfig().with_values(cfg), check_supported=False)


def _findings(rep):
    rep.stats.pop("seconds", None)
    return [f.line() for f in rep.findings], rep.stats


def test_small_walks_load_nothing():
    code = ("import sys; from rmqctl import kernels; kernels.before_fork(kernels.AUTO_AFTER - 1); "
            "print('numba' in sys.modules, kernels._walked[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "0"]


def test_big_walk_loads_the_kernel_once_and_workers_inherit_it(tmp_path, monkeypatch):
    from rmqctl.check import run

    root = F.copy_store(FX / "store", tmp_path / "s")
    monkeypatch.setenv(kernels.ENV, "numpy")
    want = _findings(run.verify_store(_store(root), jobs=1))

    monkeypatch.setenv(kernels.ENV, "auto")
    monkeypatch.setattr(kernels, "AUTO_AFTER", 1)       # this tiny store counts as big
    monkeypatch.setattr(kernels, "_walked", [0])
    monkeypatch.setattr(kernels, "_loaded", {})
    monkeypatch.setattr(run, "RANGE_BYTES", 3000)       # many ranges, so the workers really walk
    assert _findings(run.verify_store(_store(root), jobs=2)) == want
    assert kernels._walked[0] >= 1 and kernels._loaded.get("auto") is not None   # loaded in the parent
    q = mp.get_context("fork").SimpleQueue()
    p = mp.get_context("fork").Process(target=_child_kernel, args=(q,))
    p.start()
    p.join()
    assert q.get() == "numba"
