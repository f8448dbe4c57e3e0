#!/usr/bin/env python3
"""Benchmark `rmqctl rebuild cq|index` and `rmqctl recover` beside the broker's own full abnormal recovery
(its ceiling: rmqctl's goal is >= 1.0x it, one process), on the same >= 2 GB store written by the broker
(`tests/oracle/oracle v5 bench-write`). Every rmqctl row is run for each record kernel in --kernel (RMQCTL_KERNEL)
and each J in --jobs (`-j J`, only where the command takes -j in this tree: otherwise once, marked so).

Runs, in this order, on the same store (page cache warmed by a first read):
  rebuild cq        full scan of every commitlog record, every consume queue built in staging and compared
  rebuild index     full scan, every index file built in staging and compared
  recover           abort file created; rmqctl's offline abnormal recovery (checkpoint as the broker left it)
  broker            `oracle v5 bench-recover --abnormal`: RocketMQ 5.3.3 DefaultMessageStore.load() with abort
                    present, checkCRCOnRecover=true; its own timer around load() (JVM start-up excluded)
  recover, ckpt 0   checkpoint zeroed first: both tools must scan from the first file
  broker,  ckpt 0   same for the broker

Usage:
  python bench/bench_recover.py --store /tmp/rmqctl-bench-recover/store [--generate --count 2000000 --size 1024]
                                [--jobs 1,4] [--kernel numba,numpy]
Peak RSS per child process via resource.getrusage(RUSAGE_CHILDREN) (wait4).
MB/s = bytes of records (first file start to the end of valid data) / wall s,
msg/s = messages (consume-queue units counted by `rebuild cq`) / wall s. Prints `uptime` first: run it
when the machine is quiet. "vs broker" = the broker's full abnormal recovery seconds (ckpt 0) / the row's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import ORACLE, RMQCTL, kernel_envs, load_line, rmqctl_has_option, run_measured  # noqa: E402


def warm(store: Path) -> int:
    n = 0
    for p in sorted((store / "commitlog").iterdir()):
        with open(p, "rb") as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                n += len(b)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="/tmp/rmqctl-bench-recover/store")
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--jobs", default=f"1,{os.cpu_count()}", help="-j values, where the command takes -j")
    ap.add_argument("--kernel", default="", help="comma list of RMQCTL_KERNEL values")
    a = ap.parse_args()
    store = Path(a.store)
    if a.generate:
        r = subprocess.run([ORACLE, "v5", "bench-write", "--store", store, "--count", str(a.count),
                            "--size", str(a.size)], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        print("bench-write:", r.stdout.strip().replace("\n", " "))
    log_bytes = sum(p.stat().st_size for p in (store / "commitlog").iterdir())
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    load0 = load_line()
    warm(store)
    rmq = RMQCTL
    rows = []
    msgs = [0]
    data = [log_bytes]

    def rmqctl(label, *args, abort=False, zero_ckpt=False, env=None):
        if zero_ckpt:
            (store / "checkpoint").write_bytes(bytes(4096))
        if abort:
            (store / "abort").touch()
        out, err, meta = run_measured([*rmq, *args, "--json", store], env)
        if meta["rc"] not in (0, 1):
            sys.exit(f"{label} failed ({meta['rc']}): {err}")
        plan = json.loads(out)
        if "units" in plan["summary"]:
            msgs[0] = plan["summary"]["units"]
            data[0] = plan["commitlog"]["valid_end"] - plan["commitlog"]["scan_start"]
        rows.append((label, meta["wall"], meta["maxrss_kib"], f"exit {meta['rc']}, {len(plan['actions'])} changes, "
                     f"scan from {plan['commitlog'].get('scan_start')}, CPU {meta['cpu']:.1f} s, "
                     f"{json.dumps(plan['summary'])}"))

    def broker(label, zero_ckpt=False):
        if zero_ckpt:
            (store / "checkpoint").write_bytes(bytes(4096))
        out, err, meta = run_measured([ORACLE, "v5", "bench-recover", "--store", store, "--abnormal"])
        r = json.loads(out)
        rows.append((label, r["seconds"], meta["maxrss_kib"],
                     f"load() only (JVM wall {meta['wall']:.1f} s), max_offset {r['max_offset']}, "
                     f"{r['messages']} messages in CQs"))
        (store / "abort").unlink(missing_ok=True)

    def settle():
        # a checkpoint with real timestamps (a previous run may have left the zeroed one): the first
        # recover row then starts where the broker's checkpoint says, like the broker's first row
        (store / "abort").touch()
        subprocess.run([*rmq, "recover", store], capture_output=True)

    qdir = store / "rmqctl-quarantine"
    before_ops = set(qdir.iterdir()) if qdir.is_dir() else set()
    ck = (store / "checkpoint").read_bytes()[:16]
    if ck == bytes(16):
        settle()
    broker("broker abnormal, ckpt 0", zero_ckpt=True)          # the ceiling, first: every row is judged by it
    settle()
    jobs = [int(x) for x in a.jobs.split(",")]
    has_j = {c: rmqctl_has_option(list(c), "-j") for c in (("rebuild", "cq"), ("rebuild", "index"), ("recover",))}
    for klabel, env in kernel_envs(a.kernel):
        for cmd, kw in ((("rebuild", "cq"), {}), (("rebuild", "index"), {}),
                        (("recover",), dict(abort=True, zero_ckpt=True)), (("recover",), dict(abort=True))):
            what = "rmqctl " + " ".join(cmd) + (" (abort, ckpt 0)" if kw.get("zero_ckpt") else
                                                " (abort)" if kw else "")
            for j in (jobs if has_j[cmd] else [None]):
                label = f"{what}{f' -j {j}' if j else ''} {klabel}".rstrip()
                rmqctl(label, *cmd, *(["-j", str(j)] if j else []), env=env, **kw)
            if kw.get("zero_ckpt"):
                settle()
    broker("broker abnormal recovery")
    # leave the store clean (and its checkpoint real) for the next run; the bench store is disposable:
    # drop the quarantine folders this run made (replaced index files would pile up in /tmp)
    settle()
    import shutil
    for d in (set(qdir.iterdir()) if qdir.is_dir() else set()) - before_ops:
        shutil.rmtree(d, ignore_errors=True)

    print(f"store: {store}  commitlog files {log_bytes / 1e9:.2f} GB, records {data[0] / 1e9:.2f} GB "
          f"(MB/s below: record bytes / s); {load0} before, {load_line()} after; -j taken by: "
          f"{', '.join(' '.join(c) for c, v in has_j.items() if v) or 'none'}")
    ceiling = next(secs for label, secs, _, _ in rows if label == "broker abnormal, ckpt 0")
    print(f"{'run':44s} {'seconds':>8s} {'MB/s':>8s} {'msg/s':>10s} {'peak RSS MiB':>12s} {'vs broker':>9s}  notes")
    for label, secs, rss, note in rows:
        print(f"{label:44s} {secs:8.2f} {data[0] / 1e6 / secs:8.0f} {msgs[0] / secs:10.0f} {rss / 1024:12.0f} "
              f"{ceiling / secs:8.2f}x  {note}")


if __name__ == "__main__":
    main()
