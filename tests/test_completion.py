"""Shell completion: commands from click, topics and groups from the store given on the command line
(config/*.json and consumequeue/ names only)."""
from __future__ import annotations

import json

from conftest import FIXTURES, run_cli, writable_store

S = FIXTURES / "stores" / "basic-multifile-v5" / "store"


def complete(*words, shell="bash"):
    """What the shell would offer for the last word (click's <shell>_complete protocol)."""
    env = {"_RMQCTL_COMPLETE": f"{shell}_complete", "COMP_WORDS": " ".join(["rmqctl", *map(str, words)]),
           "COMP_CWORD": str(len(words))}
    r = run_cli(env=env)
    assert r.returncode == 0, r.stderr
    return [line.split(",", 1)[1] for line in r.stdout.decode().splitlines() if line.startswith("plain,")]


def test_topics_complete_in_every_command_that_takes_one():
    topics = sorted(p.name for p in (S / "consumequeue").iterdir())
    assert len(topics) >= 2
    assert complete("query", S, "--topic", "") == topics
    assert complete("query", S, "-t", topics[0][:-1]) == [t for t in topics if t.startswith(topics[0][:-1])]
    assert complete("dump", S / "commitlog", "--topic", "") == topics       # a path inside the store
    assert complete("rebuild", "cq", S, "--topic", "") == topics
    assert complete("export", f"a={S}", "--topic", "") == topics            # NAME=PATH
    assert complete("config", "offsets", "show", S, "-t", "") == topics
    assert complete("qu") == ["quarantine", "query"]
    assert complete("query", "--topic", "") == []                           # no store yet: nothing


def test_groups_complete_from_config_files(tmp_path):
    store = writable_store(tmp_path / "store")
    for argv in (["config", "offsets", "set", store, "-g", "GroupFromOffsets", "-t", "TopicA", "-q", "0",
                  "--offset", "1"], ["config", "groups", "create", store, "GroupFromSubscriptions"]):
        r = run_cli(*argv)
        assert r.returncode == 0, r.stderr
    assert complete("config", "offsets", "show", store, "-g", "") == ["GroupFromOffsets", "GroupFromSubscriptions"]
    assert complete("config", "offsets", "reset", store, "--group", "GroupFromS") == ["GroupFromSubscriptions"]


def test_reads_only_config_and_queue_names(tmp_path):
    """A store of nothing but topics.json and consumequeue/ directories completes; a broken topics.json
    completes from consumequeue/ alone, without an error."""
    root = tmp_path / "store"
    (root / "consumequeue" / "OnlyQueued" / "0").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {"OnlyConfigured": {}}}))
    assert complete("query", root, "--topic", "") == ["OnlyConfigured", "OnlyQueued"]
    (root / "config" / "topics.json").write_text("{broken")
    assert complete("query", root, "--topic", "") == ["OnlyQueued"]
    for shell, cword in (("zsh", "4"), ("fish", "O")):      # fish passes the incomplete word itself
        r = run_cli(env={"_RMQCTL_COMPLETE": f"{shell}_complete", "COMP_WORDS": f"rmqctl query {root} --topic O",
                         "COMP_CWORD": cword})
        assert r.returncode == 0 and b"OnlyQueued" in r.stdout, shell


def test_source_scripts_for_each_shell():
    for shell in ("bash", "zsh", "fish"):
        r = run_cli(env={"_RMQCTL_COMPLETE": f"{shell}_source"})
        assert r.returncode == 0 and b"_RMQCTL_COMPLETE" in r.stdout, shell


def test_documented_in_readme_and_man():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    man = (root / "man" / "rmqctl.1").read_text()
    for shell in ("bash", "zsh", "fish"):
        assert f"_RMQCTL_COMPLETE={shell}_source rmqctl" in readme and f"_RMQCTL_COMPLETE={shell}_source rmqctl" in man
    assert ".SH SHELL COMPLETION" in man
