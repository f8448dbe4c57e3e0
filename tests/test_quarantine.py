"""`rmqctl quarantine list|prune`: sizes and hard links of the journals; prune under the store lock, never an
unfinished journal nor one whose undo was interrupted, and converging after kill -9 at every step."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import faultlib as F
from conftest import FIXTURES, run_cli

KILL = "RMQCTL_TEST_KILL_AFTER"
Q = "rmqctl-quarantine"


def cli(*args, env=None):
    r = run_cli(*args, env=env)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def store_with_ops(tmp: Path, n: int = 3) -> Path:
    root = F.copy_store(FIXTURES / "stores" / "basic-multifile-v4" / "store", tmp / "store")
    for i in range(n):
        code, _, err = cli("config", "set", root, "delayOffset", f"offsetTable.{i + 1}", str(i + 5))
        assert code == 0, err
    return root


def journals(root: Path) -> list[str]:
    return sorted(p.name for p in (root / Q).iterdir()) if (root / Q).is_dir() else []


def listing(root: Path) -> list[dict]:
    code, out, err = cli("quarantine", "list", root, "--json")
    assert code == 0, err
    return [json.loads(x) for x in out.splitlines()]


def test_list_states_actions_sizes_and_links(tmp_path):
    root = store_with_ops(tmp_path, 2)
    rows = listing(root)
    assert [r["state"] for r in rows] == ["committed", "committed"]
    assert all(r["schema"] == "rmqctl.quarantine-list/1" for r in rows)
    assert rows[1]["actions"] == {"replace_file": 2}     # main and .bak replaced (the .bak rotation)
    saved = sorted((root / Q / rows[1]["name"] / "files").iterdir())
    assert rows[1]["bytes"] == sum(p.stat().st_size for p in (root / Q / rows[1]["name"]).rglob("*") if p.is_file())
    assert rows[1]["linked_files"] == 0 and rows[1]["frees_bytes"] == rows[1]["disk_bytes"] > 0
    # a saved file that still has another link (as a hard-linked segment file would): counted, not freed
    os.link(saved[0], tmp_path / "other-link")
    row = listing(root)[1]
    assert row["linked_files"] == 1 and row["max_links"] == 2
    assert row["linked_bytes"] == saved[0].stat().st_size
    assert row["frees_bytes"] == row["disk_bytes"] - saved[0].stat().st_blocks * 512
    code, out, _ = cli("quarantine", "list", root)
    assert code == 0 and "1 hard-linked (max 2 links)" in out and "committed" in out


def test_prune_keep_and_older_than(tmp_path):
    root = store_with_ops(tmp_path, 3)
    before = journals(root)
    code, out, err = cli("quarantine", "prune", root)
    assert code == 2 and "--older-than" in err
    code, out, _ = cli("quarantine", "prune", root, "--keep", "1", "--dry-run")
    assert code == 0 and out.count("would remove: ") == 2 and journals(root) == before
    code, out, _ = cli("quarantine", "prune", root, "--older-than", "7d")
    assert code == 0 and journals(root) == before          # all are seconds old
    code, out, _ = cli("quarantine", "prune", root, "--older-than", "banana")
    assert code == 2
    code, _, err = cli("quarantine", "prune", tmp_path, "--keep", "0")    # not a store: no lock made there
    assert code == 2 and "not a store" in err and not (tmp_path / "lock").exists()
    code, out, err = cli("quarantine", "prune", root, "--keep", "1", "--json")
    assert code == 1, err
    res = json.loads(out)
    assert res["schema"] == "rmqctl.quarantine-prune/1" and res["removed"] == before[:2]
    assert journals(root) == before[2:]
    code, _, _ = cli("undo", root)                        # the kept one still undoes
    assert code == 0


def test_prune_refused_while_the_lock_is_held(tmp_path):
    root = store_with_ops(tmp_path, 1)
    before = journals(root)
    with F.hold_lock(root):
        code, _, err = cli("quarantine", "prune", root, "--keep", "0")
    assert code == 8 and "lock" in err and journals(root) == before


def test_unfinished_and_interrupted_undo_are_kept(tmp_path):
    root = store_with_ops(tmp_path, 2)
    done = journals(root)
    # a config edit killed after its first journaled step: an open journal
    code, _, _ = cli("config", "set", root, "delayOffset", "offsetTable.9", "1", env={KILL: "1"})
    assert code == 137
    open_one = sorted(set(journals(root)) - set(done))
    assert [r["state"] for r in listing(root) if r["name"] in open_one] == ["open"]
    # an undo of the newest committed op killed after restoring its first entry
    code, _, _ = cli("undo", root, "--op", done[1], "--force", env={KILL: "1"})
    assert code == 137
    states = {r["name"]: r["state"] for r in listing(root)}
    assert states[done[1]] == "undo-in-progress", states
    code, out, err = cli("quarantine", "prune", root, "--keep", "0", "--json")
    assert code == 1, err
    res = json.loads(out)
    assert res["removed"] == [done[0]]
    assert {k["name"]: k["state"] for k in res["kept"]} == {done[1]: "undo-in-progress", open_one[0]: "open"}
    assert journals(root) == sorted([done[1], *open_one])


def test_prune_converges_after_kill_at_every_step(tmp_path):
    base = store_with_ops(tmp_path / "base", 3)
    ref = F.copy_store(base, tmp_path / "ref")
    code, _, err = cli("quarantine", "prune", ref, "--keep", "1")
    assert code == 1, err
    want = (F.tree_hashes(ref), journals(ref))
    steps = 2 * 2                                         # rename + remove per journal
    for n in range(1, steps + 1):
        root = F.copy_store(base, tmp_path / f"k{n}")
        code, _, _ = cli("quarantine", "prune", root, "--keep", "1", env={KILL: str(n)})
        assert code == 137, n
        # whatever the kill left, every journal still listed is whole (undo can use it)
        for r in listing(root):
            d = root / Q / r["name"]
            assert (d / "journal.jsonl").exists() and all(
                (d / "files").joinpath(Path(p).name).exists() for p in os.listdir(d / "files"))
        code, _, err = cli("quarantine", "prune", root, "--keep", "1")
        assert code in (0, 1), err
        assert (F.tree_hashes(root), journals(root)) == want, n
        shutil.rmtree(root)
    # the uninterrupted run used exactly that many steps
    root = F.copy_store(base, tmp_path / "last")
    code, _, _ = cli("quarantine", "prune", root, "--keep", "1", env={KILL: str(steps + 1)})
    assert code == 1 and journals(root) == want[1]


def test_json_fields_are_documented_in_help(tmp_path):
    root = store_with_ops(tmp_path, 2)
    for cmd, rows in ((["list"], listing(root)),
                      (["prune"], [json.loads(cli("quarantine", "prune", root, "--keep", "1", "--dry-run",
                                                  "--json")[1])])):
        _, helptext, _ = cli("quarantine", *cmd, "--help")
        words = {w.strip(".") for w in helptext.replace(",", " ").replace("(", " ").replace(")", " ").split()}
        for r in rows:
            assert r["schema"] == f"rmqctl.quarantine-{cmd[0]}/1"
            assert set(r) <= words, set(r) - words
