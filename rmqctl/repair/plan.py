"""The recovery plan: what the broker would do on its next start, and what rmqctl will do instead,
as readable text or JSON. Built by rmqctl.repair.recover.analyze; printed by `recover --dry-run`.

Every action names the file, the byte range and why. JSON shape (stable, for scripts)::

    {"store": ..., "abort": true, "broker": {...prediction...},
     "commitlog": {"scan_start": N, "valid_end": P, "last_valid": L, "stop": {...}},
     "actions": [{"step": 1, "kind": "zero_range"|"delete_file"|"write_file"|"create_file"|
                  "write_record"|"write_bytes"|"remove_abort", "path": ..., "offset": .., "length": .., "why": ...}],
     "problems": ["..."], "notes": ["..."], "summary": {...},
     "topics": {"checked_against": "config/topics.json"|null, "why": ..., "skipped": {topic: count}},  # rebuild
     "timer": {"timercheck": {...fields...}, "timer_queue_max_offset": N, "timerlog_end": N,
               "clamped": {field: [old, new]}}}                                           # recover, 5.x
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Action:
    kind: str                 # zero_range | delete_file | write_file | create_file | write_record | write_bytes |
                              # truncate_file | remove_abort
    path: str
    why: str
    offset: int | None = None
    length: int | None = None
    group: str = "commitlog"  # commitlog | consumequeue | index | checkpoint | timer | abort
    # not serialised: how to carry it out
    payload: object = field(default=None, repr=False, compare=False)

    def to_json(self, step: int) -> dict:
        d = {"step": step, "kind": self.kind, "group": self.group, "path": self.path}
        if self.offset is not None:
            d["offset"] = self.offset
        if self.length is not None:
            d["length"] = self.length
        d["why"] = self.why
        return d


@dataclass
class Plan:
    store: str
    abort: bool
    broker: dict = field(default_factory=dict)
    commitlog: dict = field(default_factory=dict)
    actions: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    topics: dict = field(default_factory=dict)     # rebuild: topics.json filter (F21)
    timer: dict = field(default_factory=dict)      # recover: config/timercheck (F23)

    @property
    def nothing_to_do(self) -> bool:
        return not self.actions

    def add(self, a: Action) -> Action:
        self.actions.append(a)
        return a

    def to_json(self) -> dict:
        d = {"store": self.store, "abort": self.abort, "broker": self.broker, "commitlog": self.commitlog,
             "actions": [a.to_json(i + 1) for i, a in enumerate(self.actions)],
             "problems": self.problems, "notes": self.notes, "summary": self.summary}
        if self.topics:
            d["topics"] = self.topics
        if self.timer:
            d["timer"] = self.timer
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=False)

    def text_lines(self) -> list[str]:
        out = [f"store: {self.store}",
               f"abort file: {'present (the broker would run an ABNORMAL recovery)' if self.abort else 'absent'}"]
        b = self.broker
        if b:
            out.append("what the broker would do on its next start:")
            for k in ("recovery", "start_file", "start_reason", "valid_end", "stop", "deletes_commitlog_files",
                      "keeps_garbage_after", "deletes_index_files", "truncates_queues", "confirm_offset",
                      "lost_after_stop"):
                if k in b and b[k] not in (None, [], ""):
                    out.append(f"  {k}: {_fmt(b[k])}")
        c = self.commitlog
        if c:
            out.append("commitlog:")
            for k, v in c.items():
                out.append(f"  {k}: {_fmt(v)}")
        if self.topics:
            t = self.topics
            out.append(f"topics: {t.get('why')}")
            for name, n in (t.get("skipped") or {}).items():
                out.append(f"  skipped (absent from {t.get('checked_against')}): {name}: {n}")
        if self.timer:
            out.append("timer:")
            for k, v in self.timer.items():
                out.append(f"  {k}: {_fmt(v)}")
        if self.actions:
            out.append(f"rmqctl will ({len(self.actions)} steps; every byte removed or overwritten is saved "
                       "in rmqctl-quarantine/ first, `rmqctl undo` restores it):")
            for i, a in enumerate(self.actions, 1):
                rng = ""
                if a.offset is not None:
                    rng = f" [{a.offset}, {a.offset + (a.length or 0)})"
                out.append(f"  {i:3d}. {a.kind} {a.path}{rng}: {a.why}")
        else:
            out.append("nothing to do: commitlog, consume queues, index and checkpoint are consistent")
        for n in self.notes:
            out.append(f"note: {n}")
        for p in self.problems:
            out.append(f"problem: {p}")
        return out


def _fmt(v) -> str:
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def asdict_safe(obj) -> dict:
    return asdict(obj)


@dataclass
class Ctx:
    """Everything analyze() learned, needed by apply()."""

    plan: Plan
    staging: Path
    cut: int = 0
    last_valid: int | None = None
    last_store_ts: int | None = None
    fillers: list = field(default_factory=list)
    index_files_final: list = field(default_factory=list)   # (name, header) of the index after the repair


def rel_path(store, p) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)
