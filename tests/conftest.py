"""Shared test fixtures (owned by the foundation; other test modules keep their fixtures local)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
REAL_WORLD = SHARED / "real-world"
FIXTURES = ROOT / "fixtures"

os.environ.setdefault("NO_COLOR", "1")
os.environ.setdefault("COLUMNS", "120")


def real_world_files() -> list[Path]:
    """Every file under shared/real-world (written by real brokers), except the manifest/README."""
    if not REAL_WORLD.is_dir():
        return []
    return sorted(p for p in REAL_WORLD.rglob("*")
                  if p.is_file() and p.name not in ("manifest.json", "README.md"))


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
