"""Every writing command, killed for real (os._exit(137), like kill -9, through RMQCTL_TEST_KILL_AFTER)
after each of its journaled steps and run again, converges on exactly the bytes of an uninterrupted
run; verify then says what it says after the uninterrupted run; one `undo` gives back the original
bytes. The steps are counted from the uninterrupted run's journal, so every step is covered."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import faultlib as F
from faultlib import tree_hashes
from conftest import FIXTURES, run_cli

KILL = "RMQCTL_TEST_KILL_AFTER"


def prepared(tmp: Path, name: str, fault) -> Path:
    F.copy_store(FIXTURES / "stores" / name, tmp / name)
    root = tmp / name / "store"
    if isinstance(fault, str):
        for argv in SETUPS[fault]:
            r = run_cli(*_argv(argv, root))
            assert r.returncode == 0, r.stderr
        shutil.rmtree(root / "rmqctl-quarantine")     # the edit under test is the only op
    elif fault is not None:
        inj = fault(root)
        assert inj is None or Path(inj.path).exists()
    return root


def _behind_a_queue(root):
    return F.cq_behind(root)


def _index_cycle(root):
    return F.index_chain_cycle(root)


# (id, fixture, fault, argv after the store is substituted for "{S}" / config for "{C}")
MODES = [
    ("recover", "crash-multifile-v5", F.torn_tail, ["recover", "--config", "{C}", "{S}"]),
    ("recover-quarantine", "crash-multifile-v5", F.flip_body_bit,
     ["recover", "--on-corruption", "quarantine", "--config", "{C}", "{S}"]),
    ("recover-from-start", "crash-behind-v5", F.torn_tail, ["recover", "--from-start", "--config", "{C}", "{S}"]),
    ("rebuild-cq", "basic-multifile-v4", _behind_a_queue, ["rebuild", "cq", "--config", "{C}", "{S}"]),
    ("rebuild-cq-filtered", "basic-multifile-v4", _behind_a_queue,
     ["rebuild", "cq", "--topic", "{T}", "--queue", "{Q}", "--config", "{C}", "{S}"]),
    ("rebuild-index", "basic-multifile-v4", _index_cycle, ["rebuild", "index", "--config", "{C}", "{S}"]),
    ("config-set", "basic-multifile-v4", None, ["config", "set", "{S}", "delayOffset", "offsetTable.1", "5"]),
    ("offsets-set", "basic-multifile-v4", None,
     ["config", "offsets", "set", "{S}", "-g", "G1", "-t", "T1", "-q", "0", "--offset", "7"]),
    ("topics-create", "basic-multifile-v5", None, ["config", "topics", "create", "{S}", "NewTopic"]),
    ("topics-delete", "basic-multifile-v4", "topics", ["config", "topics", "delete", "{S}", "NewTopic"]),
    ("config-restore", "basic-multifile-v4", "set-twice", ["config", "restore", "{S}", "delayOffset", "--from-bak"]),
]

# config states the edits start from, made by uninterrupted runs
SETUPS = {
    "topics": [["config", "topics", "create", "{S}", "NewTopic"], ["config", "topics", "create", "{S}", "Other"]],
    "set-twice": [["config", "set", "{S}", "delayOffset", "offsetTable.1", "5"],
                  ["config", "set", "{S}", "delayOffset", "offsetTable.2", "6"]],
}


def tree(root: Path) -> tuple[dict, list]:
    """File hashes and the directories (an empty directory left behind is a change too)."""
    dirs = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_dir() and "rmqctl-quarantine" not in p.relative_to(root).parts)
    return tree_hashes(root), dirs


def _argv(argv, root, topic=None, qid=None):
    sub = {"{S}": str(root), "{C}": str(root.parent / "manifest.json"), "{T}": topic, "{Q}": str(qid)}
    return [sub.get(a, a) for a in argv]


def _verify(root) -> tuple[int, str]:
    r = run_cli("verify", "--broker-config", root.parent / "manifest.json", root)
    return r.returncode, r.stdout.decode().replace(str(root), "STORE")


def _journal_steps(root) -> int:
    ops = sorted((root / "rmqctl-quarantine").iterdir())
    assert len(ops) == 1
    lines = [json.loads(x) for x in (ops[0] / "journal.jsonl").read_text().splitlines()]
    assert lines[-1]["kind"] == "committed"
    return sum(1 for e in lines if "seq" in e)


@pytest.mark.parametrize("mode,fixture,fault,argv", MODES, ids=[m[0] for m in MODES])
def test_kill_at_every_step_then_rerun_converges(tmp_path, mode, fixture, fault, argv):
    ref = prepared(tmp_path / "ref", fixture, fault)
    # the filtered rebuild names the queue cq_behind damages (the busiest)
    topic, qid = F._busiest_queue(ref) if "{T}" in argv else (None, None)
    original = tree(ref)
    r = run_cli(*_argv(argv, ref, topic, qid))
    assert r.returncode in (0, 1), r.stderr
    expected = tree(ref)
    assert expected != original, "the command changed nothing: the mode tests no kill point"
    verified = _verify(ref)
    steps = _journal_steps(ref)
    assert steps >= 1
    for n in range(1, steps + 1):
        root = prepared(tmp_path / str(n), fixture, fault)
        assert tree(root) == original
        r = run_cli(*_argv(argv, root, topic, qid), env={KILL: str(n)})
        assert r.returncode == 137, (n, r.stderr)
        r = run_cli(*_argv(argv, root, topic, qid))
        assert r.returncode in (0, 1), (n, r.stderr)
        assert tree(root) == expected, f"{mode}: killed after step {n} of {steps}"
        assert _verify(root) == verified, f"{mode}: verify after kill at step {n}"
        # the killed op was rolled back and dropped: one op, one undo restores everything
        assert _journal_steps(root) == steps
        r = run_cli("undo", root)
        assert r.returncode == 0, r.stderr
        assert tree(root) == original, f"{mode}: undo after kill at step {n}"


def test_kill_undo_at_every_step_then_rerun(tmp_path):
    ref = prepared(tmp_path / "ref", "crash-multifile-v5", F.torn_tail)
    conf = ref.parent / "manifest.json"
    original = tree_hashes(ref)
    assert run_cli("recover", "--config", conf, ref).returncode == 1
    r = run_cli("undo", "--json", ref)
    assert r.returncode == 0, r.stderr
    steps = sum(1 for s in json.loads(r.stdout)["steps"] if s["action"] == "restore")
    assert tree_hashes(ref) == original and steps >= 4
    for n in range(1, steps + 1):
        root = prepared(tmp_path / str(n), "crash-multifile-v5", F.torn_tail)
        assert run_cli("recover", "--config", conf, root).returncode == 1
        r = run_cli("undo", root, env={KILL: str(n)})
        assert r.returncode == 137, (n, r.stderr)
        assert tree_hashes(root) != original or n == steps
        r = run_cli("undo", root)
        assert r.returncode == 0, (n, r.stderr)
        assert tree_hashes(root) == original, f"undo killed after step {n}"


def test_killed_twice(tmp_path):
    ref = prepared(tmp_path / "ref", "crash-multifile-v5", F.torn_tail)
    conf = ref.parent / "manifest.json"
    assert run_cli("recover", "--config", conf, ref).returncode == 1
    root = prepared(tmp_path / "x", "crash-multifile-v5", F.torn_tail)
    original = tree_hashes(root)
    for n in (2, 1):
        r = run_cli("recover", "--config", conf, root, env={KILL: str(n)})
        assert r.returncode == 137
    assert run_cli("recover", "--config", conf, root).returncode == 1
    assert tree_hashes(root) == tree_hashes(ref)
    assert run_cli("undo", root).returncode == 0
    assert tree_hashes(root) == original


def test_quarantine_rerun_after_first_step_dispatches_every_slot(tmp_path):
    """The reported case: killed right after the placeholder record was written, the re-run must not
    take the placeholder for data (it used to leave 43 units pointing at the next message and drop
    the queue's last one)."""
    ref = prepared(tmp_path / "ref", "crash-multifile-v5", F.flip_body_bit)
    conf = ref.parent / "manifest.json"
    args = ["recover", "--on-corruption", "quarantine", "--config", conf]
    assert run_cli(*args, ref).returncode == 1
    root = prepared(tmp_path / "k", "crash-multifile-v5", F.flip_body_bit)
    assert run_cli(*args, root, env={KILL: "1"}).returncode == 137
    ops = sorted((root / "rmqctl-quarantine").iterdir())
    first = [json.loads(x) for x in (ops[0] / "journal.jsonl").read_text().splitlines()][1]
    assert first["kind"] == "write_range" and first["path"].startswith("commitlog/")   # the placeholder
    r = run_cli(*args, root)
    assert r.returncode == 1, r.stderr
    assert b"rolled_back_first" in r.stdout
    assert tree_hashes(root) == tree_hashes(ref)


@pytest.mark.parametrize("n", [1, 3])
def test_undo_instead_of_rerun_after_a_kill(tmp_path, n):
    """The operator may also take the killed repair back instead of finishing it."""
    root = prepared(tmp_path, "crash-multifile-v5", F.flip_body_bit)
    original = tree(root)
    args = ["recover", "--on-corruption", "quarantine", "--config", root.parent / "manifest.json", root]
    assert run_cli(*args, env={KILL: str(n)}).returncode == 137
    assert tree(root) != original
    r = run_cli("undo", root)
    assert r.returncode == 0, r.stderr
    assert tree(root) == original
    # and a later repair starts clean from there (the undone op is not rolled back twice)
    assert run_cli(*args).returncode == 1
