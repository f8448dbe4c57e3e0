"""Guards before expensive work: is a topic (and queue) named anywhere in the store?

A typo in --topic or an out-of-range --queue would otherwise send `query` into a full commitlog scan
(hours on a TB store) and `rebuild cq` into "nothing to do". The cheap places that name topics are
config/topics.json (the broker would load main, else .bak), the consumequeue/ directories, and the
first records of the commitlog; a name found in none of them is a usage error with the closest names.
"""
from __future__ import annotations

import difflib

from rmqctl.errors import RmqError, UsageError

PROBE_RECORDS = 2000    # commitlog records read from the start of the first file (bounded, a few MB at most)


def known_queues(store, probe_records: int = PROBE_RECORDS) -> dict[str, set[int]]:
    """topic -> queue ids named by topics.json (range(max(read, write))), consumequeue/ and the first
    commitlog records."""
    out: dict[str, set[int]] = {}
    for t, q in store.queues():
        out.setdefault(t, set()).add(q)
    try:
        from rmqctl.config import files as CF

        loaded = CF.load(store.root, "topics")
        table = loaded.doc.get("topicConfigTable") if loaded.ok and isinstance(loaded.doc, dict) else None
    except (RmqError, OSError):
        table = None
    if isinstance(table, dict):
        for name, tc in table.items():
            n = 0
            if isinstance(tc, dict):
                for k in ("readQueueNums", "writeQueueNums"):
                    v = tc.get(k)
                    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16:
                        n = max(n, v)
            out.setdefault(str(name), set()).update(range(n))
    if probe_records:
        try:
            from rmqctl import dispatch as D
            from rmqctl.store.commitlog import CommitLog

            for i, r in enumerate(CommitLog(store).records(check_crc=False, check_prop_crc=False)):
                if i >= probe_records:
                    break
                out.setdefault(r.topic, set()).add(r.queue_id)
                # multi-dispatch (LMQ) targets are queues too, named only by the records that feed them
                for name, qid, _ in D.lmq_targets(r.topic, r.queue_id, r.properties, D.lmq_on(store.config)):
                    out.setdefault(name, set()).add(qid)
        except (RmqError, OSError):
            pass
    return out


def closest(name: str, names, n: int = 3) -> list[str]:
    names = list(names)
    same_case = [x for x in names if x.lower() == name.lower()]
    if same_case:
        return same_case[:n]
    got = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    if not got:
        low = {x.lower(): x for x in names}
        got = [low[x] for x in difflib.get_close_matches(name.lower(), list(low), n=n, cutoff=0.6)]
    return got


def require_named(store, topic: str, queue: int | None = None, *,
                  scan_hint: str = "--scan scans the whole commitlog anyway") -> None:
    """UsageError (exit 2) when `topic` (or `queue` of it) is named nowhere cheap to look at."""
    known = known_queues(store)
    where = "topics.json, consumequeue/ or the first commitlog records"
    if topic not in known:
        near = closest(topic, known)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        more = f" ({scan_hint})" if scan_hint else ""
        raise UsageError(f"topic {topic!r} is named nowhere in this store ({where}){hint}{more}")
    if queue is not None and known[topic] and queue not in known[topic]:
        qs = sorted(known[topic])
        shown = f"{qs[0]}-{qs[-1]}" if len(qs) > 3 and qs == list(range(qs[0], qs[-1] + 1)) else \
            ", ".join(map(str, qs[:16])) + (" ..." if len(qs) > 16 else "")
        more = f" ({scan_hint})" if scan_hint else ""
        raise UsageError(f"queue {queue} of topic {topic!r} is named nowhere in this store ({where}); "
                         f"its queues: {shown}{more}")
