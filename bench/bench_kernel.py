#!/usr/bin/env python3
"""Benchmark the record kernels (RMQCTL_KERNEL=numpy|numba) side by side with their ceilings, one run:

  crc       bare zlib.crc32 / ISA-L crc32 passes over every commitlog byte, 8 MiB preads, 1 core
  walk      the window walk alone (rmqctl.scanvec.walk_file, every check on) in a fresh process per kernel
            and per CRC the numba kernel calls (ISA-L, the system libz, the numba slice-by-8 table)
  verify    `rmqctl verify -j 1` with each kernel
  rebuild   `rmqctl rebuild cq` and `rmqctl rebuild index` with each kernel (one process)
  broker    `tests/oracle/oracle v5 bench-recover --abnormal` with the checkpoint zeroed: RocketMQ 5.3.3's
            full abnormal recovery (CRC + re-dispatch of every CQ unit and index key), its timer around load()
  startup   the numba kernel's first load with an empty compile cache (compiles) and with the cache filled;
            `rmqctl --help` and `dump` of one small file

Usage:
  python bench/bench_kernel.py --store /tmp/bench_kernel/store [--generate --count 880000 --size 1024]
Peak RSS per child process: resource.getrusage(RUSAGE_CHILDREN) in a wrapper (wait4 rusage).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench_verify import ORACLE, commitlog_files, crc_pass, run_measured  # noqa: E402

WALK = """
import os, sys, time
t = time.perf_counter()
from rmqctl.scanvec import walk_file      # loads the selected kernel
load = time.perf_counter() - t
n = recs = 0
t, c = time.perf_counter(), time.process_time()
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    size = os.fstat(fd).st_size
    for bt in walk_file(fd, int(os.path.basename(p)), size):
        n += int(bt.total_size.sum()); recs += len(bt)
    os.close(fd)
print(n, recs, time.perf_counter() - t, load, time.process_time() - c)
"""

LOAD = "import time; t=time.perf_counter(); from rmqctl import kernels; k=kernels.walk_kernel(); " \
       "print(time.perf_counter()-t, kernels.name())"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("/tmp/bench_kernel/store"))
    ap.add_argument("--generate", action="store_true", help="write the store with the oracle if missing")
    ap.add_argument("--count", type=int, default=880_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--no-broker", action="store_true")
    a = ap.parse_args()
    store = a.store
    if not (store / "commitlog").is_dir():
        if not a.generate:
            sys.exit(f"no store at {store}; use --generate")
        r = subprocess.run([ORACLE, "v5", "bench-write", "--store", store, "--count", str(a.count),
                            "--size", str(a.size)], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr[-2000:])
    files = [str(p) for p in commitlog_files(store)]
    load0 = os.getloadavg()
    rows = []
    crc_pass(store)                       # warm the page cache
    c0 = time.process_time()
    nb, s = crc_pass(store)
    rows.append(("bare zlib.crc32, 1 core", nb, None, s, None, f"ceiling; CPU {time.process_time() - c0:.2f} s"))
    try:
        from isal.isal_zlib import crc32 as isal_crc32

        c0 = time.process_time()
        nb, s = crc_pass(store, isal_crc32)
        rows.append(("bare ISA-L crc32, 1 core", nb, None, s, None, f"ceiling; CPU {time.process_time() - c0:.2f} s"))
    except ImportError:
        pass
    zlib_s = rows[0][1] / rows[0][3]
    for label, env in (("walk, numpy kernel", {"RMQCTL_KERNEL": "numpy"}),
                       ("walk, numba kernel, ISA-L CRC", {"RMQCTL_KERNEL": "numba"}),
                       ("walk, numba kernel, libz CRC", {"RMQCTL_KERNEL": "numba", "RMQCTL_CRC": "zlib"}),
                       ("walk, numba kernel, table CRC", {"RMQCTL_KERNEL": "numba", "RMQCTL_CRC": "table"})):
        subprocess.run([sys.executable, "-c", LOAD], env={**os.environ, **env}, capture_output=True)  # fill cache
        out, err, meta = run_measured([sys.executable, "-c", WALK, *files], env)
        if meta["rc"]:
            sys.exit(f"{label}: {err[-2000:]}")
        n, recs, secs, load, cpu = out.split()
        rows.append((label, int(n), int(recs), float(secs), meta["maxrss_kib"],
                     f"in-process (import+kernel load {float(load):.2f} s); CPU {float(cpu):.2f} s; "
                     f"{int(n) / float(secs) / zlib_s:.2f}x bare zlib"))
    messages = None
    for k in ("numpy", "numba"):
        out, err, meta = run_measured([sys.executable, "-m", "rmqctl", "verify", "--json", "-j", "1", store],
                                      {"RMQCTL_KERNEL": k})
        if meta["rc"] not in (0, 4):
            sys.exit(f"verify failed ({meta['rc']}): {err[-2000:]}")
        st = json.loads(out)["stats"]
        messages = st["messages"]
        rows.append((f"verify -j 1, {k} kernel", st["bytes"], st["messages"], meta["wall"], meta["maxrss_kib"],
                     f"{st['bytes'] / meta['wall'] / zlib_s:.2f}x bare zlib; CPU {meta['cpu']:.1f} s"))
    nbytes = rows[-1][1]
    rebuilds = []
    for what in ("cq", "index"):
        for k in ("numpy", "numba"):
            out, err, meta = run_measured([sys.executable, "-m", "rmqctl", "rebuild", what, store],
                                          {"RMQCTL_KERNEL": k})
            if meta["rc"] not in (0, 1):
                sys.exit(f"rebuild {what} failed ({meta['rc']}): {err[-2000:]}")
            rebuilds.append(len(rows))
            rows.append((f"rebuild {what}, {k} kernel", nbytes, messages, meta["wall"], meta["maxrss_kib"],
                         f"CPU {meta['cpu']:.1f} s"))
    if not a.no_broker:
        ck = store / "checkpoint"
        saved = ck.read_bytes()
        ck.write_bytes(bytes(len(saved)))
        try:
            out, err, meta = run_measured([ORACLE, "v5", "bench-recover", "--store", store, "--abnormal"])
        finally:
            ck.write_bytes(saved)
            (store / "abort").unlink(missing_ok=True)
        if meta["rc"]:
            sys.exit(f"bench-recover failed: {err[-2000:]}")
        b = json.loads(out)
        rows.append(("broker full abnormal recovery (5.3.3, CRC on)", b["bytes"], b["messages"], b["seconds"],
                     meta["maxrss_kib"], f"timer around load(); JVM wall {meta['wall']:.1f} s"))
        for i in rebuilds:
            r = rows[i]
            rows[i] = r[:5] + (r[5] + f"; {b['seconds'] / r[3]:.2f}x the broker",)
    # start-up: the compile on an empty cache, the load from a filled one, the quick paths
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "NUMBA_CACHE_DIR": d, "RMQCTL_KERNEL": "numba"}
        cold = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True).stdout.split()
        warm = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True).stdout.split()
    rows.append(("numba kernel load, empty cache (compiles)", 0, None, float(cold[0]), None, "in-process"))
    rows.append(("numba kernel load, cache filled", 0, None, float(warm[0]), None, "in-process"))
    one = files[0]
    for label, cmd in (("rmqctl --help", ["--help"]),
                       ("rmqctl dump <commitlog file> --count 10", ["dump", one, "--count", "10"])):
        best = None
        for _ in range(3):
            _, _, meta = run_measured([sys.executable, "-m", "rmqctl", *cmd])
            best = meta if best is None or meta["wall"] < best["wall"] else best
        rows.append((label, 0, None, best["wall"], best["maxrss_kib"], "best of 3, process wall"))
    print(f"store {store}: {sum(os.path.getsize(f) for f in files) / 1e9:.2f} GB of commitlog files, {messages} "
          f"messages; load average {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs")
    print(f"{'what':46} {'MB/s':>8} {'msg/s':>10} {'seconds':>8} {'peak RSS MiB':>13}  note")
    for name, nb, nm, s, rss, note in rows:
        print(f"{name:46} {(nb / 1e6 / s if nb else 0):8.0f} {(nm / s if nm else 0):10.0f} {s:8.2f} "
              f"{(rss / 1024 if rss else 0):13.0f}  {note}")


if __name__ == "__main__":
    main()
