"""F24: `rmqctl recover` killed (like kill -9) after its N-th change and run again converges on exactly
the result of an uninterrupted run, and one `undo` still restores the original bytes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import faultlib as F
from faultlib import tree_hashes
from conftest import FIXTURES, run_cli


def prepared(tmp: Path, name: str, fault) -> Path:
    F.copy_store(FIXTURES / "stores" / name, tmp / name)
    root = tmp / name / "store"
    fault(root)
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    root = prepared(tmp, "crash-multifile-v5", F.torn_tail)
    conf = root.parent / "manifest.json"
    plan = json.loads(run_cli("recover", "--dry-run", "--json", "--config", conf, root).stdout)
    r = run_cli("recover", "--config", conf, root)
    assert r.returncode == 1, r.stderr
    return tree_hashes(root), len(plan["actions"])


def test_kill_at_every_step_then_rerun_converges(tmp_path, reference):
    expected, steps = reference
    assert steps >= 4
    for n in range(1, steps + 1):
        root = prepared(tmp_path / str(n), "crash-multifile-v5", F.torn_tail)
        conf = root.parent / "manifest.json"
        original = tree_hashes(root)
        r = run_cli("recover", "--config", conf, root, env={"RMQCTL_TEST_KILL_AFTER": str(n)})
        assert r.returncode == 137, (n, r.stderr)
        assert (root / "abort").exists() or n == steps        # abort goes last
        r = run_cli("recover", "--config", conf, root)
        assert r.returncode in (0, 1), (n, r.stderr)
        assert tree_hashes(root) == expected, f"killed after step {n}"
        # the resumed run appended to the same journal: one undo restores everything
        ops = sorted((root / "rmqctl-quarantine").iterdir())
        assert len(ops) == 1
        r = run_cli("undo", root)
        assert r.returncode in (0, 1), r.stderr
        assert tree_hashes(root) == original, f"undo after kill at step {n}"


def test_killed_twice(tmp_path, reference):
    expected, steps = reference
    root = prepared(tmp_path, "crash-multifile-v5", F.torn_tail)
    conf = root.parent / "manifest.json"
    for n in (2, 1):
        r = run_cli("recover", "--config", conf, root, env={"RMQCTL_TEST_KILL_AFTER": str(n)})
        assert r.returncode == 137
    assert run_cli("recover", "--config", conf, root).returncode in (0, 1)
    assert tree_hashes(root) == expected
