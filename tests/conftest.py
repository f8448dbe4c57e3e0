"""Shared test fixtures (owned by the foundation; other test modules keep their fixtures local)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REAL_WORLD = FIXTURES / "real-world"

# Corpus-driven parametrisations would silently shrink without these: fail the run instead.
for _need in (REAL_WORLD / "manifest.json", FIXTURES / "stores"):
    if not _need.exists():
        raise pytest.UsageError(f"{_need} is missing: the test corpus is part of the repository")

# Mostly-zero store files (the timerwheel) are committed as their non-zero blocks: write them back first.
subprocess.run([sys.executable, str(FIXTURES / "sparsefile.py"), "unpack"], check=True)

os.environ.setdefault("NO_COLOR", "1")
os.environ.setdefault("COLUMNS", "120")


# `-m "not oracle and not spark_cluster"` (the minimum-versions run) and `-m "not spark"` are only honest
# if every test that starts the oracle, Spark or a Spark cluster carries the marker: a test that does so
# unmarked fails here. Seen from the subprocesses a test starts: tests/oracle/*, a standalone master or
# worker, spark-submit (an in-process SparkSession), and an rmqctl child running stats/export/--engine
# spark (other than --help, export --schema and --engine local).
_RUNNING: dict = {"item": None}


def _needs(argv: list[str]) -> str | None:
    text = " ".join(argv)
    if "tests/oracle/" in text:
        return "oracle"
    if "org.apache.rocketmq.proxy." in text or "org.apache.rocketmq.namesrv." in text:   # tests/live
        return "live"
    if "HdfsMain" in text:                      # tests/minihdfs
        return "hdfs"
    if "org.apache.spark.deploy." in text:      # a standalone master or worker
        return "spark_cluster"
    local = any(a == "--engine" and b == "local" for a, b in zip(argv, argv[1:]))   # stats in-process
    if "spark-submit" in text or ("rmqctl" in text and ({"stats", "export", "spark"} & set(argv))
                                  and not ({"-h", "--help", "--schema"} & set(argv)) and not local):
        return "spark"
    return None


def _audit(event, args):
    item = _RUNNING["item"]
    if event != "subprocess.Popen" or item is None:
        return
    argv = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
    need = _needs([os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv])
    if need and item.get_closest_marker(need) is None:
        raise RuntimeError(f"{item.nodeid} starts the {need} but is not marked @pytest.mark.{need}")


sys.addaudithook(_audit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING["item"] = item
    try:
        yield
    finally:
        _RUNNING["item"] = None


@pytest.fixture(autouse=True)
def _fresh_kernel_choice(monkeypatch):
    """Each test starts with the record-kernel choice of a fresh process: RMQCTL_KERNEL=auto counts the bytes a
    process walked, and a long dump switches it for the rest of the process (kernels.load_now); commands run
    in-process by earlier tests must not decide for later ones. The loaded kernels stay cached."""
    from rmqctl import kernels

    monkeypatch.setattr(kernels, "_walked", [0])
    monkeypatch.setattr(kernels, "_eager", [False])


def writable_store(dest: Path, name: str = "basic-multifile-v5") -> Path:
    """A copy of fixture store `name` at `dest`, owner-writable throughout (the committed files may not be)."""
    import shutil

    shutil.copytree(FIXTURES / "stores" / name / "store", dest)
    for p in [dest, *dest.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dest


def real_world_files() -> list[Path]:
    """Every file under fixtures/real-world (written by real brokers), except the manifest/README."""
    out = sorted(p for p in REAL_WORLD.rglob("*")
                 if p.is_file() and p.name not in ("manifest.json", "README.md"))
    if len(out) < 250:
        raise RuntimeError(f"{REAL_WORLD}: only {len(out)} files; the real-world corpus is incomplete")
    return out


def real_world_glob(pattern: str) -> list[Path]:
    """REAL_WORLD.rglob(pattern), sorted; raises rather than parametrise over nothing."""
    out = sorted(REAL_WORLD.rglob(pattern))
    if not out:
        raise RuntimeError(f"{REAL_WORLD}: nothing matches {pattern!r}")
    return out


def invoke_cli(*args):
    """Run the click app in-process; returns (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from rmqctl import terminal
    from rmqctl.cli import run

    try:  # click 8.1 mixes stderr into stdout unless told not to; 8.2+ always separates them
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    with runner.isolation() as streams:
        # rich consoles are made once per process on the stdout/stderr of their first use: one per run here
        terminal.out.cache_clear()
        terminal.err.cache_clear()
        code = run(list(map(str, args)))
        sys.stdout.flush()
        sys.stderr.flush()
        return int(code), streams[0].getvalue().decode(), streams[1].getvalue().decode()


@pytest.fixture
def cli():
    """Run the click app in-process (invoke_cli); returns (exit_code, stdout, stderr)."""
    return invoke_cli


def run_cli(*args, input=None, timeout=120, env=None) -> subprocess.CompletedProcess:
    """Run `python -m rmqctl` as a real process (real exit codes, signals, pipes)."""
    e = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    # each process would pay numba's kernel load (~0.7 CPU s): console-script runs use the numpy kernel unless
    # the test (or the caller's environment) picks one; in-process runs keep the default (tests/kernel_params.py)
    e.setdefault("RMQCTL_KERNEL", "numpy")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "rmqctl", *map(str, args)], capture_output=True,
                          input=input, timeout=timeout, env=e)
