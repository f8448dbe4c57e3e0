#!/usr/bin/env python3
"""Benchmark `rmqctl verify` against the broker's own abnormal recovery and a bare CRC pass.

All three read the same commitlog bytes, warm in the page cache (a warm-up pass runs first):
  crc32     a bare zlib.crc32 pass over every commitlog byte (8 MiB preads): the ceiling for Python
  verify    `python -m rmqctl verify` (full: commitlog + CQ cross-check + index + config), -j 1 and -j 2;
            with python-isal installed also with RMQCTL_CRC=zlib (body CRCs by zlib instead of ISA-L)
  broker    `tests/oracle/oracle v5 bench-recover --abnormal`: RocketMQ 5.3.3's DefaultMessageStore.load()
            with abort present and checkCRCOnRecover=true (recoverAbnormally: CRC check + re-dispatch);
            its own timer around load(), JVM start-up excluded

Usage:
  python bench/bench_verify.py --store /tmp/bench_verify/store [--generate --count 2000000 --size 1024]
Peak RSS is measured per child process with resource.getrusage(RUSAGE_CHILDREN) deltas (wait4 rusage).
The broker run leaves the store as the broker would (abort file re-created and removed afterwards).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "tests" / "oracle" / "oracle"


def run_measured(cmd, env=None):
    """Run cmd under a tiny wrapper that reports the child's wall time and ru_maxrss (KiB, the largest
    of the process and its multiprocessing workers), and its CPU seconds (user+sys, workers included)."""
    wrapper = ("import resource,subprocess,sys,time,json;t=time.perf_counter();"
               "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
               "w=time.perf_counter()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN);"
               "sys.stderr.buffer.write(p.stderr);sys.stdout.buffer.write(p.stdout);"
               "print('\\n@@'+json.dumps({'rc':p.returncode,'wall':w,'maxrss_kib':r.ru_maxrss,"
               "'cpu':r.ru_utime+r.ru_stime}),file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", wrapper, *map(str, cmd)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    meta = json.loads(p.stderr.rsplit("@@", 1)[1])
    return p.stdout, p.stderr.rsplit("@@", 1)[0], meta


def commitlog_files(store: Path):
    d = store / "commitlog"
    return sorted(p for p in d.iterdir() if p.name.isdigit())


def crc_pass(store: Path, crc32=zlib.crc32) -> tuple[int, float]:
    n, t0 = 0, time.perf_counter()
    for p in commitlog_files(store):
        fd = os.open(p, os.O_RDONLY)
        try:
            pos = 0
            while True:
                b = os.pread(fd, 8 << 20, pos)
                if not b:
                    break
                crc32(b)
                n += len(b)
                pos += len(b)
        finally:
            os.close(fd)
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("/tmp/bench_verify/store"))
    ap.add_argument("--generate", action="store_true", help="write the store with the oracle if missing")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--jobs", default="1,2")
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
        print("bench-write:", r.stdout.strip().replace("\n", " "))
    total = sum(p.stat().st_size for p in commitlog_files(store))
    load0 = os.getloadavg()
    crc_pass(store)                      # warm the page cache
    nbytes, secs = crc_pass(store)
    rows = [("zlib.crc32 pass", nbytes, None, secs, None)]
    try:
        from isal.isal_zlib import crc32 as isal_crc32
    except ImportError:
        isal_crc32 = None
    if isal_crc32:
        nb, s2 = crc_pass(store, isal_crc32)
        rows.append(("isal crc32 pass", nb, None, s2, None))
    messages = None
    # body CRCs: ISA-L's crc32 when python-isal is installed (rmqctl.scanvec), else zlib; both are run
    crcs = [("", {})] + ([(" (zlib CRC)", {"RMQCTL_CRC": "zlib"})] if isal_crc32 else [])
    for label, env in crcs:
        for j in [int(x) for x in a.jobs.split(",")]:
            out, err, meta = run_measured([sys.executable, "-m", "rmqctl", "verify", "--json", "-j", str(j), store],
                                          env)
            if meta["rc"] not in (0, 4):
                sys.exit(f"verify failed ({meta['rc']}): {err[-2000:]}")
            doc = json.loads(out)
            st = doc["stats"]
            messages = st["messages"]
            what = "isal CRC" if isal_crc32 and not env else "zlib CRC"
            rows.append((f"rmqctl verify -j {j}{label if label else (' (isal CRC)' if isal_crc32 else '')}",
                         st["bytes"], st["messages"], meta["wall"], meta["maxrss_kib"],
                         f"{len(doc['findings'])} finding(s), {what}, CPU {meta['cpu']:.1f} s"))
    if not a.no_broker:
        # (1) as the broker would really start: abnormal recovery from the file the checkpoint matches;
        # (2) a full scan: with a zeroed checkpoint no file matches, so recoverAbnormally starts at file 0
        #     and CRC-checks and re-dispatches every record -- the same bytes verify reads.
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
                         f"timer around load() only; JVM wall {meta['wall']:.1f} s, CPU {meta['cpu']:.1f} s "
                         f"(start-up included)"))
    print(f"store {store}: {total / 1e9:.2f} GB of commitlog files, {messages} messages; "
          f"load average {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs")
    print(f"{'what':58} {'MB/s':>8} {'msg/s':>11} {'seconds':>8} {'peak RSS MiB':>13}  note")
    for row in rows:
        name, nb, nm, s, rss = row[:5]
        note = row[5] if len(row) > 5 else ""
        print(f"{name:58} {nb / 1e6 / s:8.0f} {(nm / s if nm else 0):11.0f} {s:8.2f} "
              f"{(rss / 1024 if rss else 0):13.0f}  {note}")


if __name__ == "__main__":
    main()
