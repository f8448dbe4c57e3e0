"""Executors that need nothing of rmqctl installed: the driver ships rmqctl and the pure-Python
packages its executor code imports, as one zip given to SparkContext.addPyFile (Spark copies it to every
executor and puts it first on the Python workers' sys.path). No pyspark import here.

What the workers' interpreter must still have: the same Python minor version as the driver (the zip
holds sources; pickled task closures name this version's modules) and the compiled packages Spark's
Arrow path needs there -- numpy and pyarrow (pyspark itself comes from Spark's own python/lib). Optional
compiled accelerators (isal, lz4, zstandard) are used when the worker has them: isal's CRC-32 falls back to
zlib's; lz4/zstd bodies with --body need them installed there.

Paths: executors run in their own working folder (a standalone worker's work/app-*/N), so every store
path is made absolute on the driver before anything is shipped (absolute_store).
"""
from __future__ import annotations

import hashlib
import importlib
import io
import os
import sys
import zipfile

# the modules executor code runs (task closures import from them); their imports decide what ships
EXECUTOR_MODULES = (
    "rmqctl.spark.dataset", "rmqctl.spark.batches", "rmqctl.spark.plan", "rmqctl.spark.remote",
    "rmqctl.spark.stats", "rmqctl.spark.export", "rmqctl.spark.engines", "rmqctl.scan", "rmqctl.scanvec",
    "rmqctl.dispatch", "rmqctl.bodies", "rmqctl.check.run", "rmqctl.check.commitlog", "rmqctl.repair.rebuild",
)
# compiled or provided by Spark: never shipped (the worker's own, see the docstring)
NOT_SHIPPED = frozenset({"numpy", "pyarrow", "pandas", "pyspark", "py4j", "isal", "lz4", "zstandard", "rocksdict",
                         "cython_runtime", "_cyutility"})
COMPILED = (".so", ".pyd", ".dylib")
# rmqctl's pure-Python dependencies, shipped also when only imported lazily inside executor functions
PURE_DEPENDENCIES = ("construct", "crcmod", "dateutil", "six")


def _top_level_modules() -> set[str]:
    """Third-party top-level packages loaded once the executor modules are imported."""
    for m in EXECUTOR_MODULES + PURE_DEPENDENCIES:
        try:
            importlib.import_module(m)
        except ImportError:          # an optional part (e.g. a module another extra needs): not shipped
            continue
    stdlib = set(sys.stdlib_module_names)
    names = set()
    for name, mod in list(sys.modules.items()):
        top = name.split(".")[0]
        if top in stdlib or top in NOT_SHIPPED or top.startswith("_") or mod is None:
            continue
        if getattr(sys.modules.get(top), "__file__", None) or getattr(sys.modules.get(top), "__path__", None):
            names.add(top)
    return names


def _files_of(top: str):
    """(archive name, file path) of a pure-Python top-level module or package; None when it holds
    compiled code that is not optional (then the worker needs it installed, and we say so)."""
    mod = sys.modules[top]
    if top == "rmqctl":     # the rmqctl.formats sources live in formats/ (package-dir mapping)
        roots = [("rmqctl", list(mod.__path__)[0]), ("rmqctl/formats", list(sys.modules["rmqctl.formats"].__path__)[0])]
    elif getattr(mod, "__path__", None):
        roots = [(top, list(mod.__path__)[0])]
    else:
        f = mod.__file__ or ""
        if f.endswith(COMPILED):
            return None
        return [(os.path.basename(f), f)]
    out = []
    for arc_root, root in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not (arc_root == "rmqctl" and x == "formats"))
            for fn in sorted(files):
                if fn.endswith((".pyc", ".pyo")) or fn.endswith(COMPILED):
                    continue           # compiled: crcmod's C extension has a pure fallback (_crcfunpy)
                p = os.path.join(d, fn)
                out.append((os.path.join(arc_root, os.path.relpath(p, root)).replace(os.sep, "/"), p))
    return out


def build_zip(folder: str) -> str:
    """The zip to ship (rmqctl + pure-Python dependencies), written into `folder`, named by its
    content's hash. Deterministic (sorted entries, fixed timestamps)."""
    entries = []
    for top in sorted(_top_level_modules()):
        files = _files_of(top)
        if files:
            entries.extend(files)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, path in sorted(set(entries)):
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as f:
                z.writestr(info, f.read())
    data = buf.getvalue()
    path = os.path.join(folder, f"rmqctl-executor-{hashlib.sha256(data).hexdigest()[:12]}.zip")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)
    return path


def shipped_names(zip_path: str) -> list[str]:
    """The top-level packages/modules inside a shipped zip (for tests and -v)."""
    with zipfile.ZipFile(zip_path) as z:
        return sorted({n.split("/")[0].removesuffix(".py") for n in z.namelist()})


def absolute_store(store):
    """The Store with an absolute root (executors do not run in the driver's folder): a copy without
    the file lists already cached from the relative root; the same object when already absolute."""
    import functools
    from pathlib import Path

    if Path(store.root).is_absolute():
        return store
    new = type(store).__new__(type(store))
    cached = {k for k in dir(type(store)) if isinstance(getattr(type(store), k, None), functools.cached_property)}
    new.__dict__.update({k: v for k, v in store.__dict__.items() if k not in cached})
    new.root = Path(os.path.abspath(store.root))
    return new
