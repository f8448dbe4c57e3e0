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

os.environ.setdefault("NO_COLOR", "1")
os.environ.setdefault("COLUMNS", "120")


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


@pytest.fixture
def cli():
    """Run the click app in-process; returns (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from rmqctl.cli import run

    def invoke(*args):
        runner = CliRunner()
        with runner.isolation() as streams:
            code = run(list(map(str, args)))
            sys.stdout.flush()
            sys.stderr.flush()
            return int(code), streams[0].getvalue().decode(), streams[1].getvalue().decode()

    return invoke


def run_cli(*args, input=None, timeout=120, env=None) -> subprocess.CompletedProcess:
    """Run `python -m rmqctl` as a real process (real exit codes, signals, pipes)."""
    e = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "rmqctl", *map(str, args)], capture_output=True,
                          input=input, timeout=timeout, env=e)
