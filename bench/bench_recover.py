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
                                [--jobs 1,4] [--kernel numba,numpy] [--repeat 3] [--no-broker]
  python bench/bench_recover.py --store /tmp/s/store --synthetic 2147483648 --no-broker --jobs 1,16
--no-broker (automatic when `java` or the oracle jars are missing): rmqctl rows only, no Java needed; each
-j J row is then judged against the same command's -j 1 row ("vs -j1"). --synthetic BYTES writes the store
with bench/gen_commitlog.py instead of the broker (one 1 KiB body repeated, TAGS/KEYS/UNIQ_KEY on every
record). --repeat N runs every row N times, alternated (broker, then each rmqctl row, again), and reports
each row's best wall time beside the CPU seconds of that run and its lowest CPU seconds.

What each figure includes: the broker's seconds are its own timer around DefaultMessageStore.load() (JVM
start-up and exit excluded; the JVM's wall and peak RSS are in the notes). rmqctl's seconds are the whole
process, wall clock: interpreter start-up, imports (numba's cached kernels), the walk with CRCs, dispatch,
writing and fsyncing what changed, the journal. Python byte-code caching is on for the runs (a pip
install has .pyc files), whatever PYTHONDONTWRITEBYTECODE says.
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


def _java_ok() -> bool:
    import shutil

    return shutil.which("java") is not None and (ORACLE.parent / "target").is_dir()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="/tmp/rmqctl-bench-recover/store")
    ap.add_argument("--generate", action="store_true", help="write the store with the broker (oracle bench-write)")
    ap.add_argument("--synthetic", type=int, default=0, metavar="BYTES",
                    help="write a BYTES commitlog with bench/gen_commitlog.py (no Java)")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--jobs", default=f"1,{os.cpu_count()}", help="-j values, where the command takes -j")
    ap.add_argument("--kernel", default="", help="comma list of RMQCTL_KERNEL values")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row, alternated; the best is reported")
    ap.add_argument("--no-broker", action="store_true", help="rmqctl rows only (no Java)")
    ap.add_argument("--baseline", default="", metavar="TREE",
                    help="also run every rmqctl row from another checkout (PYTHONPATH=TREE), labelled [TREE's name]")
    ap.add_argument("--only", default="cq,index,recover,recover-ckpt",
                    help="comma list of rows: cq, index, recover (checkpoint zeroed), recover-ckpt (as checkpointed)")
    a = ap.parse_args()
    store = Path(a.store)
    use_broker = not a.no_broker and _java_ok()
    if not a.no_broker and not use_broker:
        print("no java or no oracle jars: rmqctl rows only (--no-broker)")
    if a.generate:
        r = subprocess.run([ORACLE, "v5", "bench-write", "--store", store, "--count", str(a.count),
                            "--size", str(a.size)], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        print("bench-write:", r.stdout.strip().replace("\n", " "))
    elif a.synthetic:
        import gen_commitlog

        for d in ("consumequeue", "index", "config"):
            (store / d).mkdir(parents=True, exist_ok=True)
        print("generated:", gen_commitlog.build(store, a.synthetic, a.size))
    log_bytes = sum(p.stat().st_size for p in (store / "commitlog").iterdir())
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    load0 = load_line()
    warm(store)
    rmq = RMQCTL
    runs: dict = {}
    order: list = []
    msgs = [0]
    data = [log_bytes]
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)      # byte-code cached, as installed
    base_env: dict = {}

    def keep(label, secs, cpu, rss, note):
        if label not in runs:
            order.append(label)
        runs.setdefault(label, []).append((secs, cpu, rss, note))
        print(f"  {label}: {secs:.2f} s" + (f", CPU {cpu:.2f} s" if cpu is not None else "") + f", {rss // 1024} MiB",
              file=sys.stderr, flush=True)

    def rmqctl(label, *args, abort=False, zero_ckpt=False, env=None):
        if zero_ckpt:
            (store / "checkpoint").write_bytes(bytes(4096))
        if abort:
            (store / "abort").touch()
        out, err, meta = run_measured([*rmq, *args, "--json", store], {**base_env, **(env or {})})
        if meta["rc"] not in (0, 1):
            sys.exit(f"{label} failed ({meta['rc']}): {err}")
        plan = json.loads(out)
        if "units" in plan["summary"]:
            msgs[0] = plan["summary"]["units"]
            data[0] = plan["commitlog"]["valid_end"] - plan["commitlog"]["scan_start"]
        keep(label, meta["wall"], meta["cpu"], meta["maxrss_kib"],
             f"exit {meta['rc']}, {len(plan['actions'])} changes, scan from {plan['commitlog'].get('scan_start')}, "
             f"{json.dumps(plan['summary'])}")

    def broker(label, zero_ckpt=False):
        if zero_ckpt:
            (store / "checkpoint").write_bytes(bytes(4096))
        out, err, meta = run_measured([ORACLE, "v5", "bench-recover", "--store", store, "--abnormal"])
        r = json.loads(out)
        keep(label, r["seconds"], None, meta["maxrss_kib"],
             f"load() only (JVM wall {meta['wall']:.1f} s, JVM CPU {meta['cpu']:.1f} s), max_offset "
             f"{r['max_offset']}, {r['messages']} messages in CQs")
        (store / "abort").unlink(missing_ok=True)

    def settle():
        # a checkpoint with real timestamps (a previous run may have left the zeroed one): the first
        # recover row then starts where the broker's checkpoint says, like the broker's first row
        (store / "abort").touch()
        subprocess.run([*rmq, "recover", store], capture_output=True)

    qdir = store / "rmqctl-quarantine"
    before_ops = set(qdir.iterdir()) if qdir.is_dir() else set()
    ck = (store / "checkpoint").read_bytes()[:16] if (store / "checkpoint").exists() else bytes(16)
    if ck == bytes(16):
        settle()
    jobs = [int(x) for x in a.jobs.split(",")]
    only = set(a.only.split(","))
    has_j = {c: rmqctl_has_option(list(c), "-j") for c in (("rebuild", "cq"), ("rebuild", "index"), ("recover",))}
    rows = [(("rebuild", "cq"), {}, "cq"), (("rebuild", "index"), {}, "index"),
            (("recover",), dict(abort=True, zero_ckpt=True), "recover"),
            (("recover",), dict(abort=True), "recover-ckpt")]
    variants = kernel_envs(a.kernel)
    if a.baseline:
        tree = Path(a.baseline).resolve()
        # PYTHONSAFEPATH: `python -m` must not put the working directory (maybe this tree) before TREE
        variants += [(f"{k} [{tree.name}]".strip(), {**e, "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"})
                     for k, e in variants]
    for _ in range(a.repeat):
        if use_broker:
            broker("broker abnormal, ckpt 0", zero_ckpt=True)      # the ceiling, first: every row is judged by it
            settle()
        for klabel, env in variants:
            for cmd, kw, key in rows:
                if key not in only:
                    continue
                what = "rmqctl " + " ".join(cmd) + (" (abort, ckpt 0)" if kw.get("zero_ckpt") else
                                                    " (abort)" if kw else "")
                for j in (jobs if has_j[cmd] else [None]):
                    label = f"{what}{f' -j {j}' if j else ''} {klabel}".rstrip()
                    rmqctl(label, *cmd, *(["-j", str(j)] if j else []), env=env, **kw)
                if kw.get("zero_ckpt"):
                    settle()
        if use_broker and "recover-ckpt" in only:
            broker("broker abnormal recovery")
    # leave the store clean (and its checkpoint real) for the next run; the bench store is disposable:
    # drop the quarantine folders this run made (replaced index files would pile up in /tmp)
    settle()
    import shutil
    for d in (set(qdir.iterdir()) if qdir.is_dir() else set()) - before_ops:
        shutil.rmtree(d, ignore_errors=True)

    print(f"store: {store}  commitlog files {log_bytes / 1e9:.2f} GB, records {data[0] / 1e9:.2f} GB "
          f"(MB/s below: record bytes / s); {load0} before, {load_line()} after; -j taken by: "
          f"{', '.join(' '.join(c) for c, v in has_j.items() if v) or 'none'}; best of {a.repeat}")
    best = {label: min(v, key=lambda r: r[0]) for label, v in runs.items()}
    ceiling = best["broker abnormal, ckpt 0"][0] if "broker abnormal, ckpt 0" in best else None

    def j1(label):
        import re

        m = re.search(r" -j (\d+)", label)
        if not m or m.group(1) == "1":
            return None
        ref = best.get(label.replace(m.group(0), " -j 1"))
        return ref[0] if ref else None

    print(f"{'run':46s} {'seconds':>8s} {'CPU s':>6s} {'min CPU':>7s} {'MB/s':>7s} {'msg/s':>9s} {'RSS MiB':>7s} "
          f"{'vs broker':>9s} {'vs -j1':>6s}  notes")
    for label in order:
        secs, cpu, rss, note = best[label]
        cpus = [r[1] for r in runs[label] if r[1] is not None]
        ref = j1(label)
        print(f"{label:46s} {secs:8.2f} {cpu if cpu is not None else float('nan'):6.2f} "
              f"{min(cpus) if cpus else float('nan'):7.2f} {data[0] / 1e6 / secs:7.0f} {msgs[0] / secs:9.0f} "
              f"{rss / 1024:7.0f} {(f'{ceiling / secs:8.2f}x') if ceiling else '        -'} "
              f"{(f'{ref / secs:5.2f}x') if ref else '     -'}  {note}")


if __name__ == "__main__":
    main()
