"""Remote stores read by byte range: executor memory and time, on a real HDFS (tests/minihdfs).

A store of two 1 GiB commitlog files (bench/gen_commitlog.py; kept out of git, under --work) is uploaded
to a MiniDFSCluster on 127.0.0.1; `rmqctl stats` then reads it through hdfs:// (WebHDFS byte ranges,
staged per split) with local[1] and local[2], and the same store from the local disk (pread) for
comparison. Peak executor memory is the largest VmRSS seen in any Python worker process (pyspark.daemon
and its forks) under the run, sampled every 20 ms, plus their VmHWM when last seen.

    python bench/bench_spark_remote.py --work /tmp/rmqctl-bench-remote [--gib 2] [--masters local[1],local[2]]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                st = open(f"/proc/{n}/stat", "rb").read()
                kids.setdefault(int(st[st.rindex(b")") + 2:].split()[1]), []).append(int(n))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_python_worker(pid: int) -> bool:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False
    return b"pyspark.daemon" in cmd or b"pyspark/worker" in cmd or b"pyspark.worker" in cmd


def measure(cmd: list[str], env: dict) -> dict:
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = {"rss": 0, "hwm": 0, "workers": set()}
    done = threading.Event()

    def sample():
        while not done.is_set():
            for pid in _descendants(p.pid):
                if _is_python_worker(pid):
                    peak["workers"].add(pid)
                    peak["rss"] = max(peak["rss"], _status_kb(pid, "VmRSS"))
                    peak["hwm"] = max(peak["hwm"], _status_kb(pid, "VmHWM"))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate()
    done.set()
    t.join()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err.decode()[-3000:]}")
    res = json.loads(out)
    return {"seconds": round(time.time() - t0, 1), "messages": res["totals"]["messages"],
            "worker_rss_mib": round(peak["rss"] / 1024, 1), "worker_hwm_mib": round(peak["hwm"] / 1024, 1),
            "python_workers": len(peak["workers"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/rmqctl-bench-remote"))
    ap.add_argument("--gib", type=int, default=2)
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--split-size", type=int, default=None)
    a = ap.parse_args()
    store = a.work / "store"
    if not (store / "commitlog").is_dir():
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_commitlog.py"), str(store),
                        "--bytes", str(a.gib << 30)], check=True)
    files = sorted((store / "commitlog").iterdir())
    from minihdfs.server import MiniHdfs

    with MiniHdfs(a.work / "hdfs", timeout=180) as h:
        t0 = time.time()
        sent = sum(h.put_file(f"/bench/store/commitlog/{f.name}", f) for f in files)
        print(f"uploaded {sent / (1 << 30):.2f} GiB in {time.time() - t0:.0f} s ({len(files)} files)", flush=True)
        env = dict(os.environ, RMQCTL_WEBHDFS_ADDRESS=h.http, NO_COLOR="1")
        extra = ["--split-size", str(a.split_size)] if a.split_size else []
        rows = []
        for master in a.masters.split(","):
            for label, uri in (("hdfs (ranged)", f"{h.rpc}/bench/store"), ("local (pread)", str(store))):
                cmd = [sys.executable, "-m", "rmqctl", "stats", f"bench={uri}", "--master", master, "--json", *extra]
                r = measure(cmd, env)
                rows.append({"master": master, "store": label, **r})
                print(json.dumps(rows[-1]), flush=True)
    print("\nmaster      store           seconds  messages   worker peak RSS MiB (VmRSS / VmHWM)")
    for r in rows:
        print(f"{r['master']:<11} {r['store']:<15} {r['seconds']:>7} {r['messages']:>9}   "
              f"{r['worker_rss_mib']:>7} / {r['worker_hwm_mib']}")


if __name__ == "__main__":
    main()
