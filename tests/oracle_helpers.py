"""Run the RocketMQ oracle (tests/oracle) from tests.

The oracle drives Apache RocketMQ's own store/broker code (5.3.3 = "v5", 4.9.7 = "v4") to write stores and to
print the broker's view of a store as JSON. See tests/oracle/README.md.

    oracle("v5", "read", "--store", path)   -> parsed JSON (raises OracleError with stderr on failure)
    fixture_dirs()                          -> [fixtures/stores/<scenario>-<v4|v5>, ...]
    load_manifest(dir)                      -> manifest.json of a fixture dir

Java 17 + Maven are required; nothing here skips when they are missing (the oracle tests must fail instead).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORACLE_DIR = REPO / "tests" / "oracle"
ORACLE = ORACLE_DIR / "oracle"
FIXTURES = REPO / "fixtures"
STORES = FIXTURES / "stores"
SCENARIOS = FIXTURES / "scenarios"
VERSIONS = ("v4", "v5")


class OracleError(RuntimeError):
    """The oracle exited non-zero (message carries the exit code and stderr)."""

    def __init__(self, args, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = "\n".join(stderr.strip().splitlines()[-40:])
        super().__init__(f"oracle {' '.join(map(str, args))} failed with exit {returncode}:\n{tail}")


def build() -> None:
    """Build both oracle jars if needed (idempotent, serialised by a lock in build.sh)."""
    r = subprocess.run([str(ORACLE_DIR / "build.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise OracleError(["build.sh"], r.returncode, r.stdout, r.stderr)


def oracle_raw(version: str, *args, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, not {version!r}")
    build()
    cmd = [str(ORACLE), version, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, encoding="utf-8")
    if check and r.returncode != 0:
        raise OracleError([version, *args], r.returncode, r.stdout, r.stderr)
    return r


def oracle(version: str, *args, timeout: float = 900, check: bool = True):
    """Run `tests/oracle/oracle <version> <args...>` and return its stdout parsed as JSON.

    With check=False a non-zero exit is tolerated (e.g. `read` exits 3 when load() fails but still prints JSON).
    """
    r = oracle_raw(version, *args, timeout=timeout, check=check)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise OracleError([version, *args], r.returncode, r.stdout, r.stderr + f"\n(stdout is not JSON: {e})") from e


def read_store(version: str, store, conf=None):
    """The broker's view of a store (the store is copied first; never modified)."""
    args = ["read", "--store", str(store)]
    if conf is not None:
        args += ["--conf", str(conf)]
    return oracle(version, *args, check=False)


def fixture_dirs(version: str | None = None) -> list[Path]:
    """All committed fixture dirs (fixtures/stores/<scenario>-<v4|v5>), optionally of one version."""
    dirs = sorted(p for p in STORES.iterdir() if (p / "manifest.json").is_file()) if STORES.is_dir() else []
    # DLedger commitlog stores (dledger-<id>/ instead of commitlog/) have their own tests (tests/test_dledger.py)
    dirs = [p for p in dirs if not any((p / "store").glob("dledger-*"))]
    if version is not None:
        dirs = [p for p in dirs if p.name.endswith("-" + version)]
    return dirs


def fixture_version(fixture_dir) -> str:
    return Path(fixture_dir).name.rsplit("-", 1)[1]


def load_manifest(fixture_dir) -> dict:
    with open(Path(fixture_dir) / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


def store_config_file(fixture_dir, dest_dir) -> Path:
    """Write the fixture's store_config as a JSON file usable as `read --conf` and return its path."""
    p = Path(dest_dir) / (Path(fixture_dir).name + "-conf.json")
    p.write_text(json.dumps(load_manifest(fixture_dir)["store_config"]), encoding="utf-8")
    return p
