"""Which topics `rebuild cq|index` dispatches: those the broker knows (docs/faults.md F21, apache/rocketmq#1852).

A topic deleted with `updateTopic`/`deleteTopic` is removed from config/topics.json and its consume
queues are deleted, but its messages stay in the commitlog; the broker's re-dispatch does not look at
topics.json, so an abnormal recovery brings the deleted queues back (apache/rocketmq#1852). `rebuild`
therefore skips commitlog topics absent from the topics.json the broker would load (main, else .bak:
rmqctl.config.files.load), unless --include-deleted-topics. System topics are always kept: they are
created by the broker itself, and some are never persisted (TopicValidator.isSystemTopic: its fixed
set plus the `rmq_sys_` prefix; the %RETRY%/%DLQ%/%LMQ% families; `<cluster>_REPLY_TOPIC`).
When topics.json is missing or the broker would not load it, nothing is skipped and the plan says why.
"""
from __future__ import annotations

# TopicValidator.SYSTEM_TOPIC_SET (5.3.3) and the topics TopicConfigManager registers as system ones
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
    "rmqctl_quarantine",      # rmqctl's own placeholder records (ROLLBACK: never dispatched anyway)
})
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%", "%LMQ%")
SYSTEM_SUFFIXES = ("_REPLY_TOPIC",)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES) or topic.endswith(SYSTEM_SUFFIXES)


class TopicFilter:
    """known: the topic names of topics.json. Counts the records each skipped topic would have had."""

    def __init__(self, known, source: str):
        self.known = frozenset(known)
        self.source = source
        self.counts: dict[str, int] = {}
        self._flags = None          # numpy bool per rmqctl.repair.vecdispatch.Topics id

    def skips(self, topic: str) -> bool:
        return topic not in self.known and not is_system_topic(topic)

    def count(self, topic: str, n: int = 1) -> None:
        self.counts[topic] = self.counts.get(topic, 0) + n

    def drop(self, rows, tids, topics):
        """rows (numpy positions into a batch) minus those of skipped topics, which are counted."""
        import numpy as np

        n = len(topics.names)
        if self._flags is None or len(self._flags) < n:
            old = 0 if self._flags is None else len(self._flags)
            add = np.asarray([self.skips(t) for t in topics.names[old:n]], bool)
            self._flags = add if self._flags is None else np.concatenate([self._flags, add])
        if not len(rows):
            return rows
        t = tids[rows]
        m = self._flags[t]
        if not m.any():
            return rows
        ids, cnt = np.unique(t[m], return_counts=True)
        for i, c in zip(ids.tolist(), cnt.tolist()):
            self.count(topics.names[i], c)
        return rows[~m]


def load_filter(store) -> tuple[TopicFilter | None, str]:
    """(filter, why) -- filter None when every topic must be kept (why says so)."""
    from rmqctl.config import files as CF
    from rmqctl.errors import RmqError

    cdir = store.root / "config"
    if cdir.is_symlink():
        return None, "config/ is a symlink (not followed): every topic is kept"
    try:
        loaded = CF.load(store.root, "topics")
    except (RmqError, OSError) as e:
        return None, f"config/topics.json cannot be read ({e}): every topic is kept"
    if not loaded.ok:
        if loaded.main.status == "missing" and loaded.bak.status == "missing":
            what = f"config/topics.json missing (no .bak): the broker would {loaded.verdict}"
        else:
            what = "config/" + loaded.summary()
        return None, f"{what}; every topic is kept (no list of live topics to compare with)"
    table = loaded.doc.get("topicConfigTable") if isinstance(loaded.doc, dict) else None
    if not isinstance(table, dict):
        return None, "config/topics.json has no topicConfigTable object: every topic is kept"
    src = "config/topics.json" + (".bak" if loaded.used == ".bak" else "")
    return TopicFilter(table.keys(), src), f"topics checked against {src} ({len(table)} topics)"
