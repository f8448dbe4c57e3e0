"""Shell completion of topic and group names from the store given on the command line.

Click completes commands and options itself (`_RMQCTL_COMPLETE=bash_source rmqctl`, see the README);
these callbacks add the values: topics from config/topics.json and the consumequeue/ directory names,
groups from config/subscriptionGroup.json and consumerOffset.json. They read only those small files
and one directory listing (no commitlog, no index), never fail (a bad file completes nothing), and
import nothing heavy.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

_MARKERS = ("consumequeue", "config", "commitlog")

HOWTO = """\
Completion of commands, options, and of topic and group names read from the store given earlier on
the line (config/topics.json, subscriptionGroup.json, consumerOffset.json and the consumequeue/
directory names; no message file is read). Enable it once per shell:
  bash  (~/.bashrc):   eval "$(_RMQCTL_COMPLETE=bash_source rmqctl)"
  zsh   (~/.zshrc):    eval "$(_RMQCTL_COMPLETE=zsh_source rmqctl)"
  fish:                _RMQCTL_COMPLETE=fish_source rmqctl > ~/.config/fish/completions/rmqctl.fish
Then: rmqctl query /data/rocketmq/store --topic <TAB>, rmqctl config offsets show STORE -g <TAB>."""


def _store_of(ctx) -> Path | None:
    """The store named by the arguments parsed so far (STORE, STORE_DIR, PATH..., NAME=PATH...)."""
    values = []
    c = ctx
    while c is not None:
        for v in (c.params or {}).values():
            values.extend(v if isinstance(v, (list, tuple)) else [v])
        values.extend(c.args or [])     # an option still waiting for its value leaves the rest unparsed
        c = c.parent
    for v in values:
        if not isinstance(v, (str, os.PathLike)):
            continue
        text = str(v)
        if "=" in text and not Path(text).exists():
            text = text.split("=", 1)[1]
        p = Path(text)
        for cand in (p, *list(p.parents)[:4]):
            if cand.is_dir() and any((cand / m).exists() for m in _MARKERS):
                return cand
    return None


def _table(path: Path, key: str) -> dict:
    for f in (path, path.with_name(path.name + ".bak")):
        try:
            if f.stat().st_size > 64 * 1024 * 1024:
                continue
            data = f.read_bytes()
        except OSError:
            continue
        try:
            doc = json.loads(data)
        except ValueError:      # broker JSON (fastjson writes unquoted int keys): the broker's parser
            from rmqctl import fastjson
            from rmqctl.errors import RmqError

            try:
                doc = fastjson.loads(data, path=f)
            except (RmqError, ValueError, RecursionError):
                continue
        t = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(t, dict):
            return t
    return {}


def topics_of(store: Path) -> set[str]:
    names = set(_table(store / "config" / "topics.json", "topicConfigTable"))
    try:
        names |= {e.name for e in os.scandir(store / "consumequeue") if e.is_dir()}
    except OSError:
        pass
    return names


def groups_of(store: Path) -> set[str]:
    names = set(_table(store / "config" / "subscriptionGroup.json", "subscriptionGroupTable"))
    names |= {k.split("@", 1)[1] for k in _table(store / "config" / "consumerOffset.json", "offsetTable")
              if "@" in k}
    return names


def _items(names, incomplete: str):
    from click.shell_completion import CompletionItem

    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]


def complete_topic(ctx, param, incomplete: str):
    store = _store_of(ctx)
    return _items(topics_of(store), incomplete) if store is not None else []


def complete_group(ctx, param, incomplete: str):
    store = _store_of(ctx)
    return _items(groups_of(store), incomplete) if store is not None else []
