#!/usr/bin/env python3
"""Where the wall time of one rmqctl command goes, parent and workers: runs the command in this process with
timestamps around chosen functions (inherited by the forked workers), then prints each function's first start,
last end, summed wall seconds and summed CPU seconds of its thread, parent and workers apart.

    python bench/phases.py verify --json -j 16 STORE
    python bench/phases.py --what repair rebuild index --dry-run --json -j 16 STORE
    python bench/phases.py --trace rmqctl.check.index:index_file_facts,... verify ...

--what verify|repair picks a set of functions (below); --trace adds module:attribute pairs. Output goes to
/dev/null; the timeline is written to --log (default: a temporary file) as `pid start end name cpu`. Times are
seconds from this script's start (its imports included). The wrappers cost a few microseconds a call: keep to
functions called per range or per file, not per batch. Run it from outside the checkout (or with the tree on
PYTHONPATH) to time an installed rmqctl."""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import importlib
import os
import sys
import tempfile
import time

T0 = time.time()

SETS = {
    "verify": ["rmqctl.kernels:expect", "rmqctl.check.commitlog_batch:preload", "rmqctl.check.run:_scan_parallel",
               "rmqctl.check.run:_range_job", "rmqctl.check.run:_scan_job", "rmqctl.check.run:_index_job",
               "rmqctl.check.index:index_file_facts", "rmqctl.check.queues_many:check_queues"],
    "repair": ["rmqctl.repair.vecdispatch:expect_walk", "rmqctl.repair.parallel:walk",
               "rmqctl.repair.parallel:_walk_range", "rmqctl.repair.parallel:Dispatch.consume",
               "rmqctl.repair.batch_dispatch:put_windows", "rmqctl.repair.rebuild_index:IndexRebuilder.dispatch_many",
               "rmqctl.repair.parallel:_close"],
}


def _wrap(spec: str, log) -> None:
    modname, attr = spec.split(":")
    obj = importlib.import_module(modname)
    parts = attr.split(".")
    for p in parts[:-1]:
        obj = getattr(obj, p)
    fn = getattr(obj, parts[-1])
    label = f"{modname.rsplit('.', 1)[-1]}.{attr}"

    @functools.wraps(fn)
    def timed(*a, **k):
        s, c = time.time(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            log.write(f"{os.getpid()} {s - T0:.4f} {time.time() - T0:.4f} {label} {time.thread_time() - c:.4f}\n")

    setattr(obj, parts[-1], timed)


def summary(path: str) -> None:
    rows = [line.split() for line in open(path)]
    parent = rows[0][0]
    spans: dict = collections.defaultdict(list)
    cpu: dict = collections.defaultdict(float)
    busy: dict = collections.defaultdict(float)
    for pid, s, e, name, c in rows:
        key = ("parent" if pid == parent else "worker", name)
        spans[key].append((float(s), float(e)))
        cpu[key] += float(c)
        if pid != parent and name.endswith(("_range_job", "_scan_job", "_index_job", "_walk_range")):
            busy[pid] += float(e) - float(s)
    print(f"{'who':7} {'what':44} {'calls':>6} {'first':>7} {'last end':>8} {'wall s':>7} {'CPU s':>7}")
    for key, v in sorted(spans.items(), key=lambda kv: min(s for s, _ in kv[1])):
        print(f"{key[0]:7} {key[1]:44} {len(v):6} {min(s for s, _ in v):7.3f} {max(e for _, e in v):8.3f} "
              f"{sum(e - s for s, e in v):7.3f} {cpu[key]:7.3f}")
    if busy:
        print(f"{len(busy)} workers, busy {min(busy.values()):.3f} .. {max(busy.values()):.3f} s each")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=sorted(SETS), help="the set of functions (default: from the command)")
    ap.add_argument("--trace", default="", help="more module:attribute pairs, comma-separated")
    ap.add_argument("--log", help="the timeline file (default: a temporary file)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="rmqctl's arguments")
    a = ap.parse_args()
    what = a.what or ("verify" if a.command[:1] == ["verify"] else "repair")
    log_path = a.log or tempfile.mktemp(prefix="rmqctl-phases-")
    log = open(log_path, "w", buffering=1)
    log.write(f"{os.getpid()} 0 {time.time() - T0:.4f} start 0\n")
    for spec in SETS[what] + [s for s in a.trace.split(",") if s]:
        _wrap(spec, log)
    from rmqctl.cli import main as rmqctl_main

    sys.argv = ["rmqctl", *a.command]
    code = 0
    with open(os.devnull, "w") as out, contextlib.redirect_stdout(out):
        try:
            rmqctl_main()
        except SystemExit as e:
            code = e.code
    log.write(f"{os.getpid()} 0 {time.time() - T0:.4f} end 0\n")
    log.close()
    print(f"exit {code}; timeline in {log_path}")
    summary(log_path)


if __name__ == "__main__":
    main()
