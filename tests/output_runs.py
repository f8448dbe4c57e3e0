"""Every `--json` command of rmqctl, run through the installed console script on copies of fixture stores:
the runs tests/test_output_rule.py checks against rmqctl.schemas. `runs(tmp)` returns a list of
(argv, exit code, parsed objects, stderr)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "fixtures" / "stores"
REAL = ROOT / "fixtures" / "real-world"
RMQCTL = Path(sys.executable).parent / "rmqctl"
TIMER = (REAL / "_peer_written" / "mxsm__rocketmq-rust" / "rocketmq-store-local" / "tests" / "fixtures" / "timer"
         / "rust-v1")
REAL_STORE = REAL / "lidaxia2020__rocketmq-all-4.8.0-source-release" / "storemes"


def copy_store(dest: Path, name: str) -> Path:
    shutil.copytree(STORES / name / "store", dest)
    for p in [dest, *dest.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dest


def run(*args, env=None) -> tuple[list, int, list, str]:
    argv = [str(RMQCTL), *map(str, args)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, **(env or {}), "COLUMNS": "80"})
    objs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    return [str(a) for a in args], p.returncode, objs, p.stderr


def _bcq_file(path: Path, n: int = 3) -> Path:
    from rmqctl.dumping import BCQ_UNIT

    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(BCQ_UNIT.pack(100 * i, 90, 7, 1700000000000 + i, 10 * i, 10, 0, 0) for i in range(n))
    path.write_bytes(data + bytes(BCQ_UNIT.size * 2))
    return path


def _timerlog_file(path: Path, n: int = 3) -> Path:
    """Units as TimerLog.append writes them (52 bytes each), then zeros."""
    import struct

    from rmqctl.formats import timer as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    units = b"".join(struct.pack(">iqiqiqiiq", 52, 52 * (k - 1) if k else 0, tf.MAGIC_DEFAULT,
                                 1_700_000_000_000 + k, 1000, 4096 * k, 300, 12345, 0) for k in range(n))
    path.write_bytes(units + bytes(1024))
    return path


def _short_rocksdb_unit(dest: Path) -> Path:
    """A copy of rocksdb-v5's consume-queue RocksDB with one value cut short (dump: a rocksdb_malformed entry)."""
    from rmqctl.formats import rocksdb_cq as F
    from rocksdb_helpers import rewrite_rocksdb

    shutil.copytree(ROOT / "fixtures" / "rocksdb-stores" / "rocksdb-v5" / "store", dest)
    key = F.cq_key("TopicA", 2, 1)
    assert len(rewrite_rocksdb(dest / "consumequeue", lambda db: (db.put(key, db.get(key)[:20]), db.get(key))[1])) == 20
    return dest / "consumequeue"


def runs(tmp: Path) -> list:
    out = []
    add = out.append
    a = copy_store(tmp / "a", "basic-multifile-v4")
    v5 = STORES / "basic-multifile-v5" / "store"
    # config files through the edit commands (the fixture stores hold only delayOffset.json)
    add(run("config", "topics", "create", a, "TopicA", "-r", "4", "-w", "4", "--json"))
    add(run("config", "topics", "create", a, "TopicB", "--json"))
    add(run("config", "topics", "update", a, "TopicB", "-p", "6", "--json"))
    add(run("config", "groups", "create", a, "GroupA", "--json"))
    add(run("config", "groups", "update", a, "GroupA", "--consume-orderly", "--json"))
    add(run("config", "offsets", "set", a, "--group", "GroupA", "--topic", "TopicA", "--queue", "0",
            "--offset", "3", "--json"))
    add(run("config", "offsets", "reset", a, "--group", "GroupA", "--topic", "TopicA", "--to-earliest", "--json"))
    add(run("config", "offsets", "clone", a, "--from", "GroupA", "--to", "GroupB", "--json"))
    add(run("config", "set", a, "topics", "topicConfigTable.TopicA.perm", "6", "--json"))
    add(run("config", "set", a, "topics", "topicConfigTable.TopicB.perm", "4", "-n", "--json"))
    add(run("config", "delete", a, "consumerOffset", "offsetTable.TopicA@GroupB", "--json"))
    add(run("config", "groups", "create", a, "GroupC", "--json"))
    add(run("config", "groups", "delete", a, "GroupC", "--json"))
    add(run("config", "topics", "create", a, "TopicC", "--json"))
    add(run("config", "topics", "delete", a, "TopicC", "--json"))
    add(run("config", "delay", "set", a, "--level", "3", "--offset", "0", "--json"))
    add(run("config", "status", a, "--json"))
    add(run("config", "show", a, "topics", "--json"))
    add(run("config", "get", a, "consumerOffset", "offsetTable.TopicA@GroupA.0", "--json"))
    add(run("config", "get", a, "topics", "topicConfigTable.TopicA", "--json"))
    add(run("config", "offsets", "show", a, "--json"))
    add(run("config", "topics", "list", a, "--json"))
    add(run("config", "groups", "list", a, "--json"))
    add(run("config", "delay", "show", a, "--json"))
    add(run("export", "--schema", "--json"))     # the messages schema: no Spark
    # storeType=defaultRocksDB (the rocksdb extra)
    rk = ROOT / "fixtures" / "rocksdb-stores" / "rocksdb-v5" / "store"
    add(run("dump", rk, "--json"))
    add(run("dump", rk / "consumequeue", "--json"))
    add(run("dump", rk / "config" / "subscriptionGroups", "--json"))
    add(run("config", "show", rk, "consumerOffset", "--json"))
    add(run("verify", rk.parent.parent / "crash-rocksdb-v5" / "store", "--json"))
    add(run("dump", _short_rocksdb_unit(tmp / "rk"), "--json"))
    add(run("config", "diff", a, "topics", "--json"))
    add(run("config", "restore", a, "topics", "--from-bak", "-n", "--json"))
    add(run("config", "restore", a, "topics", "--from-bak", "--json"))
    add(run("undo", a, "--list", "--json"))
    add(run("undo", a, "-n", "--json"))
    add(run("undo", a, "--json"))
    # dump: every file kind (several paths per process), a whole store, a damaged file
    bcq = _bcq_file(tmp / "bcq" / "batchconsumequeue" / "T" / "0" / ("0" * 20))
    cl = min((a / "commitlog").iterdir())
    cqext = next(p for p in sorted((STORES / "cqext-v5" / "store" / "consumequeue_ext").rglob("*")) if p.is_file())
    add(run("dump", "--json", "--count", "2", cl, a / "consumequeue" / "TopicA" / "0", a / "checkpoint", a / "lock",
            cqext, a / "config" / "topics.json", a / "config" / "delayOffset.json",
            min((a / "index").iterdir()), TIMER / "timercheck", TIMER / "timerwheel",
            min((TIMER / "timerlog").iterdir()), REAL_STORE / "abort" if (REAL_STORE / "abort").exists()
            else REAL / "Shaoxubao__rocketmq-study" / "store" / "abort"))
    add(run("dump", "--json", "--slots", "--count", "1", min((a / "index").iterdir())))
    add(run("dump", "--json", "--kind", "batchconsumequeue", bcq))
    add(run("dump", "--json", "--kind", "compaction_cq", bcq))
    add(run("dump", "--json", "--kind", "timerlog", _timerlog_file(tmp / "tl" / "timerlog" / ("0" * 20))))
    add(run("dump", "--json", "--kind", "compaction_log", "--count", "1", "--body", "none", cl))
    add(run("dump", "--json", a))
    add(run("dump", "--json", v5))
    dls = STORES / "dledger-v5" / "store"
    add(run("dump", "--json", dls))
    add(run("dump", "--json", "--count", "2", dls / "dledger-n0" / "data" / ("0" * 20),
            dls / "dledger-n0" / "index" / ("0" * 20), dls / "dledger-n0" / "checkpoint",
            dls / "dledger-n0" / "currterm"))
    add(run("verify", "--json", "-v", STORES / "crash-dledger-v5" / "store"))
    bad = tmp / "bad" / "commitlog"
    bad.mkdir(parents=True)
    data = bytearray(cl.read_bytes())
    data[600:610] = b"\x01" * 10
    (bad / cl.name).write_bytes(bytes(data))
    add(run("dump", "--json", bad / cl.name))
    # verify, query, diff, stats
    add(run("verify", "--json", a))
    add(run("verify", "--json", bad / cl.name))
    add(run("verify", "--json", STORES / "crash-multifile-v5" / "store"))
    add(run("query", a, "--phys-offset", "0", "--json"))
    first = out[-1][2][0]
    add(run("query", a, "--msg-id", first["msg_id"], "--json", "--body", "hex"))
    add(run("query", a, "-t", "TopicA", "-k", "a-0", "--json"))
    add(run("query", a, "-t", first["topic"], "--uniq-key", first["properties"]["UNIQ_KEY"], "--json"))
    add(run("query", a, "-t", "TopicA", "--queue", "1", "--offset", "2", "--count", "2", "--json", "--body", "none"))
    add(run("query", a, "-t", "TopicA", "--queue", "1", "--time", "0", "--json"))
    add(run("query", a, "-t", "TopicA", "--begin", "0", "--end", "now", "--max", "3", "--json"))
    add(run("query", a, "-t", "TopicA", "-k", "a-1", "--scan", "--json"))
    add(run("diff", "--json", a, STORES / "basic-multifile-v4" / "store"))
    add(run("diff", "--json", STORES / "crash-multifile-v4" / "store", a))
    add(run("stats", "--engine", "local", "--json", a))
    add(run("stats", "--engine", "local", "--json", "--topic", "TopicA", STORES / "crash-multifile-v5" / "store"))
    # recover / rebuild / reclaim: dry runs and real runs on copies, then undo
    c = copy_store(tmp / "c", "crash-multifile-v5")
    add(run("recover", c, "--dry-run", "--json"))
    add(run("recover", c, "--json"))
    add(run("undo", c, "--json"))
    add(run("rebuild", "cq", c, "--dry-run", "--json"))
    add(run("rebuild", "index", c, "--json"))
    add(run("rebuild", "cq", c, "--topic", "CrashA", "--json"))
    add(run("reclaim", c, "--json"))
    add(run("reclaim", c, "--file-reserved-time", "0", "--json"))
    add(run("reclaim", a, "--ignore-reserved-time", "--move-to", tmp / "moved", "--json"))
    add(run("undo", a, "--list", "--json"))
    # quarantine journals of the runs above
    add(run("quarantine", "list", c, "--json"))
    add(run("quarantine", "prune", c, "--keep", "1", "--dry-run", "--json"))
    add(run("quarantine", "prune", c, "--keep", "1", "--json"))
    # salvage of what GroupA has not consumed, then replayed without a cluster
    add(run("export", a, "--unconsumed", "--engine", "local", "--format", "jsonl", "--out", tmp / "salvage", "--json"))
    add(run("replay", tmp / "salvage", "--to", "127.0.0.1:8081", "--dry-run", "--json"))
    # config delay show with pending messages; dump of compaction, batch CQ, timer and compressed-body stores
    add(run("config", "delay", "show", STORES / "delay-levels-v5" / "store", "--json"))
    comp = STORES / "compaction-pending-v5" / "store" / "compaction"
    add(run("dump", "--json", comp / "compactionCq" / "KV" / "0" / ("0" * 20),
            comp / "compactionLog" / "KV" / "0" / ("0" * 20), comp / "position-checkpoint"))
    add(run("dump", "--json", "--count", "2", STORES / "compaction-v5" / "store"))
    bq = STORES / "bcq-v5" / "store"
    add(run("dump", "--json", "--count", "2", bq, min((bq / "batchconsumequeue" / "BcqTopic" / "0").iterdir())))
    tm = STORES / "crash-timer-v5" / "store"
    add(run("dump", "--json", "--count", "2", tm, tm / "config" / "timercheck", min((tm / "timerlog").iterdir())))
    for name in ("compressed-types-v4", "compressed-types-v5"):
        add(run("dump", "--json", *sorted((STORES / name / "store" / "commitlog").iterdir())))
    add(run("query", STORES / "compressed-types-v5" / "store", "--phys-offset", "0", "--json"))
    add(run("verify", "--json", STORES / "compaction-pending-v5" / "store"))
    add(run("verify", "--json", STORES / "crash-bcq-v5" / "store"))
    add(run("verify", "--json", tm))
    return out
