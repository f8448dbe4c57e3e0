#!/usr/bin/env python3
"""`rebuild cq`, `rebuild index` and `recover` (full scan) with -j 1 and -j N on the same store, side by side.

    python bench/bench_parallel.py --store /tmp/rmqctl-bench-par/store --generate --bytes 1073741824 -j 1 -j 2

--generate writes the store with bench/gen_commitlog.py (1 KiB bodies, 1 GiB files; --file-size for more,
smaller files). Each run is `rmqctl ... --dry-run --json` (everything is built and compared in staging,
nothing is swapped in, so every run starts from the same store); recover runs with `abort` present and the
checkpoint zeroed, so it validates and re-dispatches from the first file. Prints `uptime` (the load) first.

Columns: wall seconds; CPU seconds of the process tree (user + system, parent and workers); MB/s of
commitlog records; peak RSS of the largest process (its VmHWM: the parent or one worker) and peak RSS of
the whole process tree (parent + workers, summed, sampled from /proc every 20 ms).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _tree_rss_kib(pid: int) -> tuple[int, int]:
    """(RSS of pid and all its descendants, the largest VmHWM among them), KiB, from /proc."""
    kids: dict = {}
    rss: dict = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(parts[1]), []).append(int(d))
            rss[int(d)] = int(parts[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    total, hwm, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]))
        except OSError:
            pass
        todo.extend(kids.get(p, []))
    return total, hwm


_WRAP = ("import resource,subprocess,sys,json;p=subprocess.run(sys.argv[1:]);"
         "r=resource.getrusage(resource.RUSAGE_CHILDREN);"
         "open(sys.argv[0]+'.cpu','w').write(json.dumps(r.ru_utime+r.ru_stime));sys.exit(p.returncode)")


def run_measured(cmd: list, env: dict) -> dict:
    """Wall time, exit status, stdout, peak RSS of the largest process (VmHWM) and of the whole tree, CPU
    seconds of the whole tree (user + system: the parent and its workers)."""
    import tempfile

    tag = tempfile.mktemp(prefix="rmqctl-bench-")
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", _WRAP.replace("sys.argv[0]", repr(tag)), *cmd],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = hwm = 0
    import threading

    out = {}

    def reader():
        out["stdout"], out["stderr"] = p.communicate()

    th = threading.Thread(target=reader)
    th.start()
    while th.is_alive():
        tree, h = _tree_rss_kib(p.pid)
        peak, hwm = max(peak, tree), max(hwm, h)
        th.join(0.02)
    wall = time.perf_counter() - t
    cpu = json.loads(Path(tag + ".cpu").read_text())
    os.unlink(tag + ".cpu")
    return {"rc": p.returncode, "wall": wall, "cpu": cpu, "max_child_kib": hwm, "tree_kib": peak, **out}


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", type=Path, default=Path("/tmp/rmqctl-bench-par/store"))
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--file-size", type=int, default=1 << 30)
    ap.add_argument("-j", "--jobs", type=int, action="append", help="repeatable [default: 1 and 2]")
    ap.add_argument("--only", action="append", choices=["cq", "index", "recover"])
    a = ap.parse_args()
    store: Path = a.store
    if a.generate:
        sys.path.insert(0, str(REPO / "bench"))
        import gen_commitlog

        for d in ("consumequeue", "index", "config"):
            (store / d).mkdir(parents=True, exist_ok=True)
        print("generated:", gen_commitlog.build(store, a.bytes, a.body, a.file_size))
    jobs = a.jobs or [1, 2]
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
          f"| cpus {os.cpu_count()}")
    warm(store)
    env = dict(os.environ)
    rmq = [sys.executable, "-m", "rmqctl"]
    what = a.only or ["cq", "index", "recover"]
    rows = []
    for w in what:
        for j in jobs:
            if w == "recover":
                (store / "abort").touch()
                (store / "checkpoint").write_bytes(bytes(4096))
                cmd = [*rmq, "recover", "-j", str(j), "--dry-run", "--json", str(store)]
            else:
                cmd = [*rmq, "rebuild", w, "-j", str(j), "--dry-run", "--json", str(store)]
            m = run_measured(cmd, env)
            if m["rc"] not in (0, 1, 4):
                sys.exit(f"{' '.join(cmd)} failed ({m['rc']}): {m['stderr'].decode()[-2000:]}")
            plan = json.loads(m["stdout"])
            data = plan["commitlog"]["valid_end"] - plan["commitlog"]["scan_start"]
            rows.append((f"{'recover' if w == 'recover' else 'rebuild ' + w} -j{j}", m["wall"], m["cpu"], data,
                         m["max_child_kib"], m["tree_kib"], json.dumps(plan["summary"])))
    (store / "abort").unlink(missing_ok=True)
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"{'run':22s} {'seconds':>8s} {'CPU s':>6s} {'MB/s':>7s} {'RSS max MiB':>11s} "
          f"{'RSS tree MiB':>12s}  summary")
    for label, secs, cpu, data, mx, tree, summ in rows:
        print(f"{label:22s} {secs:8.2f} {cpu:6.2f} {data / 1e6 / secs:7.0f} {mx / 1024:11.0f} "
              f"{tree / 1024:12.0f}  {summ}")


if __name__ == "__main__":
    main()
