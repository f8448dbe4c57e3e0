"""Benchmark `rmqctl dump --json` on a 1 GiB commitlog of 1 KiB messages (generated on demand).

    python bench/bench_dump.py [--root /tmp/rmqctl-bench-dump]

Prints MB/s, messages/s and the peak RSS of the dump process (ru_maxrss of the child).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_commitlog import build  # noqa: E402


def run(cmd):
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(cmd, stdout=devnull, check=True)
    dt = time.perf_counter() - t0
    return dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path("/tmp/rmqctl-bench-dump"))
    ap.add_argument("--bytes", type=int, default=1 << 30)
    a = ap.parse_args()
    f = a.root / "commitlog" / f"{0:020d}"
    if not f.exists():
        info = build(a.root, a.bytes - 4096, 1024, file_size=a.bytes)
        (a.root / "info.json").write_text(json.dumps(info))
    info = json.loads((a.root / "info.json").read_text())
    size_mb = info["bytes"] / 1e6
    results = {}
    for label, extra in (("dump --json (body base64)", ["--json"]),
                         ("dump --json --body none", ["--json", "--body", "none"]),
                         ("dump (text)", [])):
        dt, rss = run([sys.executable, "-m", "rmqctl", "dump", str(f), *extra])
        results[label] = {"seconds": round(dt, 2), "MB/s": round(size_mb / dt, 1),
                          "messages/s": round(info["messages"] / dt), "peak_rss_MB_so_far": round(rss, 1)}
    print(json.dumps({"file_bytes": a.bytes, "messages": info["messages"], "results": results}, indent=2))


if __name__ == "__main__":
    main()
