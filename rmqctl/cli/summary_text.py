"""Readable rendering of a store summary (tables through rmqctl.tables: rich on a terminal, plain text otherwise)."""
from __future__ import annotations

from rmqctl.render import fmt_time
from rmqctl.terminal import escape, out


def render_summary(s: dict) -> None:
    from rmqctl.tables import print_table

    c = _Escaped(out())
    c.print(f"store {s['root']}")
    for u in s.get("unsupported", []):
        c.print(f"  UNSUPPORTED: {u}")
    rk = s.get("rocksdb")
    if s.get("engine") == "rocksdb" and rk is not None:
        cq = rk.get("consume_queues") or {}
        c.print(f"engine: rocksdb (storeType=defaultRocksDB): consume queues in RocksDB "
                f"{cq.get('rocksdb_version') or '(version unknown)'} at consumequeue/, {cq.get('queues', 0)} queues, "
                f"dispatched up to commitlog offset {cq.get('dispatched_up_to')}"
                + (f", {cq['malformed_entries']} malformed entries" if cq.get("malformed_entries") else ""))
        for name, m in (rk.get("metadata") or {}).items():
            c.print(f"  metadata config/{name}/: {m['entries']} entries (RocksDB {m['rocksdb_version']})"
                    + "".join(f"; PROBLEM: {p}" for p in m["problems"]))
    cl = s["commitlog"]
    c.print(f"commitlog: {cl['files']} files of {cl['file_size']} bytes ({cl['bytes']} on disk), "
            f"offsets {cl['min_offset']} .. {cl['max_offset']} (last file ends with: {cl['last_file_ends_with']})")
    if len(cl["sizes_on_disk"]) > 1:
        c.print(f"  files of different sizes: {cl['sizes_on_disk']} (the broker refuses to start)")
    for a, b in cl["gaps"]:
        c.print(f"  GAP: no file covers {a} .. {b}")
    for st in cl["strays"]:
        c.print(f"  stray entry in commitlog/: {st}")
    ck = s.get("checkpoint")
    if ck:
        c.print(f"checkpoint: physicMsgTimestamp {fmt_time(ck['physic_msg_timestamp'])}, logicsMsgTimestamp "
                f"{fmt_time(ck['logics_msg_timestamp'])}, indexMsgTimestamp {fmt_time(ck['index_msg_timestamp'])}, "
                f"masterFlushedOffset {ck['master_flushed_offset']}, confirmPhyOffset {ck['confirm_phy_offset']}")
    else:
        c.print("checkpoint: missing")
    c.print(f"abort: {'present' if s['abort'] else 'absent'} -> next start: {s['next_start']}")
    c.print(f"lock: {s['lock']}" + (" (a running broker holds it)" if s["lock"] == "held" else ""))
    ix = s["index"]
    c.print(f"index: {len(ix['files'])} files ({ix['hash_slot_num']} slots, {ix['index_num']} items each)"
            + (f", {ix['files'][0]} .. {ix['files'][-1]}" if ix["files"] else ""))
    qs = s.get("consume_queues", [])
    if qs:
        print_table(("topic", "queue", "files", "min offset", "max offset"),
                    [(q["topic"], q["queue_id"], q["files"], q["min_offset"], q["max_offset"]) for q in qs],
                    title=f"{len(s['topics'])} topics, {len(qs)} consume queues", right=(1, 2, 3, 4))
    for k in ("batchconsumequeue", "consumequeue_ext"):
        if s.get(k):
            c.print(f"{k}: {', '.join(s[k])}")
    if s.get("config"):
        print_table(("file", "main", ".bak", "broker would"),
                    [[f[k] for k in ("file", "main", "bak", "broker_would")] for f in s["config"]], title="config")
    comp = s.get("compaction")
    if comp:
        cols = ("topic", "queue", "log files", "CQ files", "units", "min offset", "max offset", "position",
                "broker load")
        rows = [[q["topic"], q["queue_id"], len(q["log_files"]), len(q["cq_files"]), q["units"], q["min_offset"],
                 q["max_offset"], q["position"], q["broker_load"] + (f": {q['why']}" if q.get("why") else "")]
                for q in comp["queues"]]
        print_table(cols, rows, right=cols[1:-1],
                    title=f"compaction queues (log files of {comp['log_file_size']} bytes, CQ files of "
                          f"{comp['cq_file_size']} bytes; COMPACTION topics in topics.json: "
                          f"{', '.join(comp['topics']) if comp['topics'] is not None else 'unknown'})")
    for k, v in s.get("other", {}).items():
        c.print(f"{k}: {v['files']} files, {v['bytes']} bytes")
    for nf in s.get("not_followed", []):
        c.print(f"not read: {nf}")


class _Escaped:
    """The console with every printed string escaped (names in the summary are data)."""

    def __init__(self, console):
        self.console = console

    def print(self, obj):
        self.console.print(escape(obj) if isinstance(obj, str) else obj)
