#!/usr/bin/env python3
"""Benchmark `rmqctl verify` beside its ceilings, all in one run over the same commitlog bytes (page cache warm):

  ceilings  a bare CRC-32 pass over the commitlog data (8 MiB preads up to each file's last non-zero byte): zlib,
            and ISA-L when python-isal is installed; by 1 process, and by N processes (each N of --jobs up to
            the CPUs, and the CPUs) each CRC-ing one slice
  verify    `python -m rmqctl verify --json -j J` for each J in --jobs (default 1 and the CPUs), for each record
            kernel in --kernel (RMQCTL_KERNEL; a tree without the switch ignores it)
  broker    `tests/oracle/oracle v5 bench-recover --abnormal`: RocketMQ 5.3.3's DefaultMessageStore.load() with
            abort present and checkCRCOnRecover=true, checkpoint zeroed (every record CRC-checked and
            re-dispatched) and as checkpointed; its own timer around load() (JVM start-up excluded)

Every row runs --repeat times (default 3), the rows alternating, and keeps its best wall time (and smallest CPU
seconds). Each row prints MB/s, peak RSS of that run (its own process tree) and "vs": -j1 against the 1-process
zlib pass (goal >= 0.5x) by wall and by CPU seconds (the steadier figure on a loaded machine), -jN against
N x (-j1) (scaling; goal >= 0.8) and against the N-process zlib pass. Needs only numpy (numba, isal optional);
--no-broker skips the Java rows.

--generate writes the store with the real broker (Java), or without Java with gen_commitlog.py and rmqctl's own
`rebuild cq` / `rebuild index`.

  python bench/bench_verify.py --store /tmp/bench/store [--generate --count 2000000 --size 1024]
                               [--topics 128 --queues 8: many queues, generated without the broker]
                               [--jobs 1,2,4,8,16] [--kernel auto,numba,numpy] [--no-broker] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (ORACLE, RMQCTL, _crc_ranges, _slices, commitlog_files, crc_ceiling,  # noqa: E402
                      isal_available, kernel_envs, load_line, run_measured, warm)


def generate(store: Path, count: int, size: int, topics: int | None = None, queues: int | None = None):
    """The real broker writes the store (the oracle, Java); without Java, or with --topics / --queues:
    bench/gen_commitlog.py writes the commitlog (one body repeated) and `rmqctl rebuild cq` / `rebuild index`
    write the consume queues and index."""
    if shutil.which("java") is None or not Path(ORACLE).exists() or topics or queues:
        from gen_commitlog import build

        shape = {k: v for k, v in (("topics", topics), ("queues", queues)) if v}
        print("gen_commitlog.py + rmqctl rebuild cq/index:", build(store, count * (size + 160), size, **shape))
        for what in ("cq", "index"):
            r = subprocess.run([*RMQCTL, "rebuild", what, store, "--include-deleted-topics"], capture_output=True,
                               text=True)
            if r.returncode not in (0, 1):      # 1: files written
                sys.exit(f"rebuild {what} failed ({r.returncode}): {r.stderr[-2000:]}")
        return
    r = subprocess.run([ORACLE, "v5", "bench-write", "--store", store, "--count", str(count), "--size", str(size)],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr[-2000:])
    print("bench-write:", r.stdout.strip().replace("\n", " "))


def _keep(best: dict, key, nb, sec, cpu, rss) -> None:
    """Keep the best (shortest) wall time of a row, and the smallest CPU seconds and peak RSS seen."""
    old = best.get(key)
    if old is None:
        best[key] = (nb, sec, cpu, rss)
    else:
        best[key] = (nb, min(sec, old[1]), None if cpu is None else min(cpu, old[2]),
                     None if rss is None else max(rss, old[3]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=Path("/tmp/bench_verify/store"))
    ap.add_argument("--generate", action="store_true", help="write the store with the oracle if missing")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--topics", type=int, help="--generate without the broker: this many topics (default 8)")
    ap.add_argument("--queues", type=int, help="--generate without the broker: queues per topic (default 4)")
    ap.add_argument("--jobs", default=f"1,{os.cpu_count()}")
    ap.add_argument("--kernel", default="", help="comma list of RMQCTL_KERNEL values (default: the tree's default)")
    ap.add_argument("--no-broker", action="store_true", help="skip the broker rows (no Java needed)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, alternating every row; the best of each is kept")
    a = ap.parse_args()
    store = a.store
    if not (store / "commitlog").is_dir():
        if not a.generate:
            sys.exit(f"no store at {store}; use --generate")
        generate(store, a.count, a.size, a.topics, a.queues)
    files = commitlog_files(store)
    total = sum(p.stat().st_size for p in files)
    load0 = load_line()
    warm(files)
    cpus = os.cpu_count() or 1
    jobs = [int(x) for x in a.jobs.split(",")]
    procs_set = sorted({1, cpus, *(j for j in jobs if j <= cpus)})
    crcs = ["zlib"] + (["isal"] if isal_available() else [])
    kenvs = kernel_envs(a.kernel)
    # best of --repeat rounds, each round alternating the ceilings and every verify row over the same bytes
    best: dict = {}
    docs: dict = {}
    one_slice = _slices(files, 1)[0]
    for _ in range(a.repeat):
        for crc in crcs:
            for procs in procs_set:
                if procs == 1:      # as crc_ceiling(files, crc, 1), with its CPU seconds (slices computed once)
                    c0, t0 = time.process_time(), time.perf_counter()
                    nb = _crc_ranges(one_slice, crc)
                    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
                else:
                    (nb, sec), cpu = crc_ceiling(files, crc, procs), None    # the workers' CPU is not ours
                _keep(best, ("ceil", crc, procs), nb, sec, cpu, None)
        for klabel, env in kenvs:
            for j in jobs:
                out, err, meta = run_measured([*RMQCTL, "verify", "--json", "-j", str(j), store], env)
                if meta["rc"] not in (0, 4):
                    sys.exit(f"verify failed ({meta['rc']}): {err[-2000:]}")
                doc = json.loads(out)
                docs[(klabel, j)] = doc
                _keep(best, ("verify", klabel, j), doc["stats"]["bytes"], meta["wall"], meta["cpu"],
                      meta["maxrss_kib"])
    rows = []
    for crc in crcs:
        for procs in procs_set:
            nb, sec, cpu, _ = best[("ceil", crc, procs)]
            rows.append((f"ceiling: bare {crc} CRC, {procs} process{'es' if procs > 1 else ''}", nb, None, sec, None,
                         "in-process, over the files' data (zero tails left out)"
                         + (f"; CPU {cpu:.2f} s" if cpu is not None else "")))
    z1 = best[("ceil", "zlib", 1)]
    for klabel, _env in kenvs:
        one = best.get(("verify", klabel, 1))
        for j in jobs:
            nb, sec, cpu, rss = best[("verify", klabel, j)]
            doc = docs[(klabel, j)]
            rate = nb / sec
            vs = []
            if j == 1:
                vs.append(f"{rate / (z1[0] / z1[1]):.2f}x 1-process zlib by wall (goal 0.5), "
                          f"{z1[2] / cpu:.2f}x by CPU")
            else:
                if one:
                    vs.append(f"{rate / (one[0] / one[1]) / j:.2f} of {j}x -j1 (goal 0.8)")
                ck = ("ceil", "zlib", j) if ("ceil", "zlib", j) in best else ("ceil", "zlib", cpus)
                vs.append(f"{rate / (best[ck][0] / best[ck][1]):.2f}x the {ck[2]}-process zlib pass")
            rows.append((f"verify -j {j} {klabel}".rstrip(), nb, doc["stats"]["messages"], sec, rss,
                         "; ".join(vs) + f"; CPU {cpu:.2f} s; {len(doc['findings'])} finding(s)"))
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
