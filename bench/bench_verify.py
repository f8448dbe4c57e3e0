#!/usr/bin/env python3
"""Benchmark `rmqctl verify` beside its ceilings, all in one run over the same commitlog bytes (page cache warm):

  ceilings  a bare CRC-32 pass over the commitlog data (8 MiB preads up to each file's last non-zero byte): zlib,
            and ISA-L when python-isal is installed; by 1 process, and by N processes (N = the CPUs) each
            CRC-ing one slice
  verify    `python -m rmqctl verify --json -j J` for each J in --jobs (default 1 and the CPUs), for each record
            kernel in --kernel (RMQCTL_KERNEL; a tree without the switch ignores it)
  broker    `tests/oracle/oracle v5 bench-recover --abnormal`: RocketMQ 5.3.3's DefaultMessageStore.load() with
            abort present and checkCRCOnRecover=true, checkpoint zeroed (every record CRC-checked and
            re-dispatched) and as checkpointed; its own timer around load() (JVM start-up excluded)

Each row prints MB/s, peak RSS of that run (its own process tree) and "vs": -j1 against the 1-process zlib pass
(goal >= 0.5x), -jN against N x (-j1) (scaling; goal >= 0.8) and against the N-process ceiling.

  python bench/bench_verify.py --store /tmp/bench/store [--generate --count 2000000 --size 1024]
                               [--jobs 1,2,4] [--kernel numba,numpy] [--no-broker]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (ORACLE, RMQCTL, commitlog_files, crc_ceiling, isal_available, kernel_envs,  # noqa: E402
                      load_line, run_measured, warm)


def generate(store: Path, count: int, size: int):
    r = subprocess.run([ORACLE, "v5", "bench-write", "--store", store, "--count", str(count), "--size", str(size)],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr[-2000:])
    print("bench-write:", r.stdout.strip().replace("\n", " "))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("/tmp/bench_verify/store"))
    ap.add_argument("--generate", action="store_true", help="write the store with the oracle if missing")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--jobs", default=f"1,{os.cpu_count()}")
    ap.add_argument("--kernel", default="", help="comma list of RMQCTL_KERNEL values (default: the tree's default)")
    ap.add_argument("--no-broker", action="store_true")
    a = ap.parse_args()
    store = a.store
    if not (store / "commitlog").is_dir():
        if not a.generate:
            sys.exit(f"no store at {store}; use --generate")
        generate(store, a.count, a.size)
    files = commitlog_files(store)
    total = sum(p.stat().st_size for p in files)
    load0 = load_line()
    warm(files)
    cpus = os.cpu_count() or 1
    rows, ceil = [], {}
    for crc in ["zlib"] + (["isal"] if isal_available() else []):
        for procs in sorted({1, cpus}):
            nb, s = crc_ceiling(files, crc, procs)
            ceil[(crc, procs)] = nb / s
            rows.append((f"ceiling: bare {crc} CRC, {procs} process{'es' if procs > 1 else ''}", nb, None, s, None,
                         "in-process, over the files' data (zero tails left out)"))
    jobs = [int(x) for x in a.jobs.split(",")]
    for klabel, env in kernel_envs(a.kernel):
        one = None
        for j in jobs:
            out, err, meta = run_measured([*RMQCTL, "verify", "--json", "-j", str(j), store], env)
            if meta["rc"] not in (0, 4):
                sys.exit(f"verify failed ({meta['rc']}): {err[-2000:]}")
            doc = json.loads(out)
            st = doc["stats"]
            rate = st["bytes"] / meta["wall"]
            vs = []
            if j == 1:
                one = rate
                vs.append(f"{rate / ceil[('zlib', 1)]:.2f}x 1-process zlib (goal 0.5)")
            else:
                if one:
                    vs.append(f"{rate / one / j:.2f} of {j}x -j1 (goal 0.8)")
                best = max(v for (c, p), v in ceil.items() if p == max(p2 for _, p2 in ceil))
                vs.append(f"{rate / best:.2f}x the {cpus}-process ceiling")
            rows.append((f"verify -j {j} {klabel}".rstrip(), st["bytes"], st["messages"], meta["wall"],
                         meta["maxrss_kib"], "; ".join(vs) + f"; CPU {meta['cpu']:.1f} s, "
                         f"{len(doc['findings'])} finding(s)"))
    if not a.no_broker:
        ck = store / "checkpoint"
        saved = ck.read_bytes()
        for label, zero in (("broker abnormal recovery, all files", True),
                            ("broker abnormal recovery, as checkpointed", False)):
            if zero:
                ck.write_bytes(bytes(len(saved)))
            try:
                out, err, meta = run_measured([ORACLE, "v5", "bench-recover", "--store", store, "--abnormal"])
            finally:
                ck.write_bytes(saved)
                (store / "abort").unlink(missing_ok=True)
            if meta["rc"]:
                sys.exit(f"bench-recover failed: {err[-2000:]}")
            b = json.loads(out)
            rows.append((f"{label} (5.3.3, CRC on)", b["bytes"], b["messages"], b["seconds"], meta["maxrss_kib"],
                         f"timer around load() only; JVM wall {meta['wall']:.1f} s, CPU {meta['cpu']:.1f} s"))
    print(f"store {store}: {total / 1e9:.2f} GB of commitlog files; {load0} before, {load_line()} after")
    print(f"{'what':52} {'MB/s':>8} {'msg/s':>10} {'seconds':>8} {'peak RSS MiB':>13}  vs / notes")
    for name, nb, nm, s, rss, note in rows:
        print(f"{name:52} {nb / 1e6 / s:8.0f} {(nm / s if nm else 0):10.0f} {s:8.2f} "
              f"{(rss / 1024 if rss else 0):13.0f}  {note}")


if __name__ == "__main__":
    main()
