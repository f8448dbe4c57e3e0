#!/usr/bin/env python3
"""Benchmark `rmqctl rebuild cq|index` and `rmqctl recover` against the broker's own abnormal recovery,
on the same >= 2 GB store written by the broker (`tests/oracle/oracle v5 bench-write`).

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
Peak RSS per child process via resource.getrusage(RUSAGE_CHILDREN) (wait4).
MB/s = bytes of records (first file start to the end of valid data) / wall s,
msg/s = messages (consume-queue units counted by `rebuild cq`) / wall s. Prints `uptime` first: run it
when the machine is quiet.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "tests" / "oracle" / "oracle"


def run_measured(cmd):
    wrapper = ("import resource,subprocess,sys,time,json;t=time.perf_counter();"
               "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
               "w=time.perf_counter()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN);"
               "sys.stderr.buffer.write(p.stderr);sys.stdout.buffer.write(p.stdout);"
               "print('\\n@@'+json.dumps({'rc':p.returncode,'wall':w,'maxrss_kib':r.ru_maxrss}),file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", wrapper, *map(str, cmd)], capture_output=True, text=True)
    meta = json.loads(p.stderr.rsplit("@@", 1)[1])
    return p.stdout, p.stderr.rsplit("@@", 1)[0], meta


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
    warm(store)
    rmq = [sys.executable, "-m", "rmqctl"]
    rows = []
    msgs = [0]
    data = [log_bytes]

    def rmqctl(label, *args, abort=False, zero_ckpt=False):
        if zero_ckpt:
            (store / "checkpoint").write_bytes(bytes(4096))
        if abort:
            (store / "abort").touch()
        out, err, meta = run_measured([*rmq, *args, "--json", store])
        if meta["rc"] not in (0, 1):
            sys.exit(f"{label} failed ({meta['rc']}): {err}")
        plan = json.loads(out)
        if "units" in plan["summary"]:
            msgs[0] = plan["summary"]["units"]
            data[0] = plan["commitlog"]["valid_end"] - plan["commitlog"]["scan_start"]
        rows.append((label, meta["wall"], meta["maxrss_kib"], f"exit {meta['rc']}, {len(plan['actions'])} changes, "
                     f"scan from {plan['commitlog'].get('scan_start')}, {json.dumps(plan['summary'])}"))

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
    rmqctl("rmqctl rebuild cq", "rebuild", "cq")
    rmqctl("rmqctl rebuild index", "rebuild", "index")
    rmqctl("rmqctl recover (abort)", "recover", abort=True)
    broker("broker abnormal recovery")
    rmqctl("rmqctl recover (abort, ckpt 0)", "recover", abort=True, zero_ckpt=True)
    broker("broker abnormal, ckpt 0", zero_ckpt=True)
    # leave the store clean (and its checkpoint real) for the next run; the bench store is disposable:
    # drop the quarantine folders this run made (replaced index files would pile up in /tmp)
    settle()
    import shutil
    for d in (set(qdir.iterdir()) if qdir.is_dir() else set()) - before_ops:
        shutil.rmtree(d, ignore_errors=True)

    print(f"store: {store}  commitlog files {log_bytes / 1e9:.2f} GB, records {data[0] / 1e9:.2f} GB "
          f"(MB/s below: record bytes / s)")
    print(f"{'run':34s} {'seconds':>8s} {'MB/s':>8s} {'msg/s':>10s} {'peak RSS MiB':>12s}  notes")
    for label, secs, rss, note in rows:
        print(f"{label:34s} {secs:8.2f} {data[0] / 1e6 / secs:8.0f} {msgs[0] / secs:10.0f} {rss / 1024:12.0f}  {note}")


if __name__ == "__main__":
    main()
