#!/usr/bin/env python3
"""Benchmark `rmqctl dump --json` of commitlog files beside its ceiling and its goal, in one run:

  ceiling   the record kernel alone (rmqctl.scanvec.walk_file with body CRCs, nothing rendered) over the same
            files: what any dump built on it could reach
  batch     `rmqctl dump --json` (windows rendered at once: rmqctl.dump_json_batch), body base64 and none
  record    the same with RMQCTL_DUMP_JSON=record (message_json per record; the path before the batch one)
  text      `rmqctl dump` (readable lines), with --text
for each record kernel in --kernel (RMQCTL_KERNEL; a tree without the switch ignores it). Output goes to
/dev/null; MB/s = commitlog bytes of records / wall s (MB/CPU-s: / CPU seconds, the figure to read on a
loaded machine); peak RSS is that run's own process; goal: 300 MB/s.

  python bench/bench_dump.py [--store /tmp/bench/store | --root /tmp/rmqctl-bench-dump --bytes 1073741824]
                             [--kernel numba,numpy] [--text]
Without --store a 1 GiB commitlog of 1 KiB messages is generated (bench/gen_commitlog.py: one body repeated,
so its CRC and length columns are constant); --store takes a broker-written store (bench-write: random bodies).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RMQCTL, commitlog_files, kernel_envs, load_line, run_measured, warm  # noqa: E402
from gen_commitlog import build  # noqa: E402

GOAL = 300e6

_KERNEL_ONLY = """
import os, sys, json
from rmqctl.scanvec import walk_file
n = b = 0
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    size = os.fstat(fd).st_size
    g = walk_file(fd, int(os.path.basename(f)), size, buf=bytearray(8 << 20))
    while True:
        try:
            bt = next(g)
        except StopIteration as e:
            b += e.value.pos
            break
        n += len(bt)
    os.close(fd)
print(json.dumps({"messages": n, "bytes": b}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="a store whose commitlog/ to dump (else one is generated)")
    ap.add_argument("--root", type=Path, default=Path("/tmp/rmqctl-bench-dump"))
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--kernel", default="", help="comma list of RMQCTL_KERNEL values")
    ap.add_argument("--text", action="store_true", help="also the readable dump (slow on random bodies)")
    a = ap.parse_args()
    if a.store:
        target = a.store / "commitlog"
    else:
        target = a.root / "commitlog"
        if not (a.root / "info.json").exists():
            info = build(a.root, a.bytes - 4096, 1024, file_size=a.bytes)
            (a.root / "info.json").write_text(json.dumps(info))
    files = commitlog_files(target.parent)
    load0 = load_line()
    warm(files)
    rows = []
    for klabel, env in kernel_envs(a.kernel):
        out, err, meta = run_measured([sys.executable, "-c", _KERNEL_ONLY, *files], env)
        if meta["rc"]:
            sys.exit(err[-2000:])
        k = json.loads(out)
        nbytes, nmsg = k["bytes"], k["messages"]
        rows.append((f"ceiling: record kernel alone {klabel}".rstrip(), meta, None))
        for label, extra, e2 in (("dump --json (base64 bodies)", ["--json"], {}),
                                 ("dump --json --body none", ["--json", "--body", "none"], {}),
                                 ("dump --json, per record (RMQCTL_DUMP_JSON=record)", ["--json"],
                                  {"RMQCTL_DUMP_JSON": "record"}),
                                 *([("dump (text)", [], {})] if a.text else [])):
            _, err, meta = run_measured([*RMQCTL, "dump", *extra, target], {**env, **e2}, discard_stdout=True)
            if meta["rc"] not in (0, 4):
                sys.exit(f"{label} failed ({meta['rc']}): {err[-2000:]}")
            rows.append((f"{label} {klabel}".rstrip(), meta, "json" in label))
    print(f"{target}: {nbytes / 1e9:.2f} GB of records, {nmsg} messages; {load0} before, {load_line()} after")
    print(f"{'run':58} {'MB/s':>8} {'msg/s':>10} {'seconds':>8} {'CPU s':>6} {'MB/CPU-s':>8} {'peak RSS MiB':>13}  vs")
    ceiling = None
    for label, m, is_json in rows:
        rate = nbytes / m["wall"]
        if label.startswith("ceiling"):
            ceiling, vs = rate, ""
        else:
            vs = f"{rate / ceiling:.2f}x the kernel" + (f", {rate / GOAL:.2f}x the 300 MB/s goal" if is_json else "")
        print(f"{label:58} {rate / 1e6:8.0f} {nmsg / m['wall']:10.0f} {m['wall']:8.2f} {m['cpu']:6.1f} "
              f"{nbytes / 1e6 / m['cpu']:8.0f} "
              f"{m['maxrss_kib'] / 1024:13.0f}  {vs}")


if __name__ == "__main__":
    main()
