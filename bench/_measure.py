"""Shared by the bench scripts: run a command and measure it (wall, CPU, peak RSS of that command alone), the
bare-CRC ceilings (one process, and N processes each CRC-ing a slice of the same bytes), and what the tree
offers (does a command take -j; which record kernels can be chosen with RMQCTL_KERNEL)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "tests" / "oracle" / "oracle"
RMQCTL = [sys.executable, "-m", "rmqctl"]

# a fresh wrapper per command: its RUSAGE_CHILDREN is that command alone (ru_maxrss: the largest of the
# process and its workers; CPU: all of them)
_WRAPPER = ("import resource,subprocess,sys,time,json;t=time.perf_counter();"
            "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
            "w=time.perf_counter()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN);"
            "sys.stderr.buffer.write(p.stderr);sys.stdout.buffer.write(p.stdout);"
            "print('\\n@@'+json.dumps({'rc':p.returncode,'wall':w,'maxrss_kib':r.ru_maxrss,"
            "'cpu':r.ru_utime+r.ru_stime}),file=sys.stderr)")
_SINK = ("import resource,subprocess,sys,time,json;t=time.perf_counter();"
         "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE);"
         "w=time.perf_counter()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN);"
         "sys.stderr.buffer.write(p.stderr);"
         "print('\\n@@'+json.dumps({'rc':p.returncode,'wall':w,'maxrss_kib':r.ru_maxrss,"
         "'cpu':r.ru_utime+r.ru_stime}),file=sys.stderr)")


_COMPILED: set = set()


def _bytecode(env: dict) -> None:
    """Byte-compile the rmqctl package this environment imports, once, as `pip install` does: a checkout run
    with PYTHONDONTWRITEBYTECODE set would otherwise compile its modules again in every measured run."""
    key = (env.get("PYTHONPATH", ""), os.getcwd())
    if key in _COMPILED:
        return
    _COMPILED.add(key)
    subprocess.run([sys.executable, "-c", "import compileall, os, rmqctl; "
                    "compileall.compile_dir(os.path.dirname(rmqctl.__file__), quiet=1)"], env=env,
                   capture_output=True)


def run_measured(cmd, env: dict | None = None, *, discard_stdout: bool = False):
    """(stdout, stderr, {"rc", "wall", "maxrss_kib", "cpu"}) of one command; discard_stdout sends its output to
    /dev/null (dump benchmarks: the output is not held in memory)."""
    env = {**os.environ, **(env or {})}
    _bytecode(env)
    p = subprocess.run([sys.executable, "-c", _SINK if discard_stdout else _WRAPPER, *map(str, cmd)],
                       capture_output=True, text=True, env=env)
    meta = json.loads(p.stderr.rsplit("@@", 1)[1])
    return p.stdout, p.stderr.rsplit("@@", 1)[0], meta


def load_line() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {os.cpu_count()} CPUs"


def rmqctl_has_option(args: list[str], option: str) -> bool:
    """Whether `rmqctl ARGS --help` lists OPTION (e.g. -j for rebuild/recover): a script measures whatever
    the tree offers."""
    p = subprocess.run([*RMQCTL, *args, "--help"], capture_output=True, text=True)
    return p.returncode == 0 and any(w.strip(",") == option for line in p.stdout.splitlines() for w in line.split())


def kernel_envs(spec: str) -> list[tuple[str, dict]]:
    """--kernel a,b -> [(label, env)]: RMQCTL_KERNEL per value ("" = the default; a tree without the switch
    ignores it, and the label says so)."""
    known = _kernel_switch_present()
    out = []
    for k in [x.strip() for x in spec.split(",")] if spec else [""]:
        if not k:
            out.append(("", {}))
        else:
            out.append((f"kernel={k}" + ("" if known else " (RMQCTL_KERNEL not in this tree: ignored)"),
                        {"RMQCTL_KERNEL": k}))
    return out


def _kernel_switch_present() -> bool:
    for p in (REPO / "rmqctl").rglob("*.py"):
        if "RMQCTL_KERNEL" in p.read_text(errors="replace"):
            return True
    return False


def commitlog_files(store: Path) -> list[Path]:
    d = store / "commitlog"
    return sorted(p for p in d.iterdir() if p.name.isdigit())


def _crc_ranges(ranges, crc: str) -> int:
    if crc == "isal":
        from isal.isal_zlib import crc32
    else:
        crc32 = zlib.crc32
    n = 0
    for path, start, end in ranges:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = start
            while pos < end:
                b = os.pread(fd, min(8 << 20, end - pos), pos)
                if not b:
                    break
                crc32(b)
                n += len(b)
                pos += len(b)
        finally:
            os.close(fd)
    return n


def data_sizes(files: list[Path]) -> list[tuple[str, int]]:
    """(path, bytes up to the last non-zero byte) per file: the bytes a record pass reads (a commitlog's
    pre-allocated zero tail is not part of it)."""
    from rmqctl.scan import last_nonzero

    out = []
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            out.append((str(p), last_nonzero(fd, 0, os.fstat(fd).st_size, 8 << 20)))
        finally:
            os.close(fd)
    return out


def _slices(files: list[Path], procs: int) -> list[list[tuple[str, int, int]]]:
    sizes = data_sizes(files)
    total = sum(s for _, s in sizes)
    per = -(-total // procs)
    out, cur, room = [], [], per
    for path, size in sizes:
        pos = 0
        while pos < size:
            take = min(room, size - pos)
            cur.append((path, pos, pos + take))
            pos += take
            room -= take
            if room == 0:
                out.append(cur)
                cur, room = [], per
    if cur:
        out.append(cur)
    return out


def crc_ceiling(files: list[Path], crc: str = "zlib", procs: int = 1) -> tuple[int, float]:
    """(bytes, seconds) of a bare CRC-32 pass over the files' data (up to each file's last non-zero byte; 8 MiB
    preads) by `procs` processes, each over one contiguous slice: what a checksum-bound pass could reach."""
    if crc == "isal":
        import isal  # noqa: F401 - fail here, not in a worker
    parts = _slices(files, procs)
    if procs == 1:
        t0 = time.perf_counter()
        return _crc_ranges(parts[0], crc), time.perf_counter() - t0
    import multiprocessing as mp

    with mp.get_context("fork").Pool(len(parts)) as pool:
        pool.starmap(_crc_ranges, [([], crc)] * len(parts))        # workers started (and isal loaded) first
        t0 = time.perf_counter()
        n = sum(pool.starmap(_crc_ranges, [(p, crc) for p in parts], chunksize=1))
        return n, time.perf_counter() - t0


def isal_available() -> bool:
    try:
        import isal.isal_zlib  # noqa: F401
    except ImportError:
        return False
    return True


def warm(files: list[Path]) -> int:
    return _crc_ranges([(str(p), 0, p.stat().st_size) for p in files], "zlib")
