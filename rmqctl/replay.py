"""Replay: exported rows (rmqctl export, --unconsumed included) sent back into a running cluster.

What is sent per row: topic (after --topic-map), TAGS, KEYS, the user properties (not the names the broker
reserves for itself: the proxy refuses a message carrying one) and the body. The client gives every message
a new message id. Rows of a retry (%RETRY%) or dead-letter (%DLQ%) topic go to their original topic
(RETRY_TOPIC / DLQ_ORIGIN_TOPIC property) unless the map names them; scheduled (SCHEDULE_TOPIC_XXXX), PREPARED
and ROLLBACK rows are not sent. A message listed for several groups (a salvage) is sent once: rows are told
apart by store and commitlog offset.

Resume file (append-only text, every line fsync'ed): ``sending <id>`` before a message is handed to the
client, ``sent <id> <message id>`` or ``failed <id> <why>`` after. A rerun skips what was sent. A run
killed between the two lines leaves that one message in doubt: the broker may or may not have stored it.
It is sent again by default (``in_doubt="resend"``: at least once) or left out (``"skip"``: at most once).
"""
from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.errors import FormatError, RmqError, UsageError

# MessageConst.STRING_HASH_SET (Apache RocketMQ 5.3.3): property names the proxy refuses as user properties
RESERVED = frozenset((
    "1ST_POP_TIME", "ARRIVE_TIME", "BORN_TIMESTAMP", "BUYER_ID", "CLUSTER", "CONSUME_START_TIME",
    "CORRECTION_FLAG", "CORRELATION_ID", "DELAY", "DLQ_ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC", "DUP_INFO",
    "EXTEND_UNIQ_INFO", "INNER_MULTI_QUEUE_OFFSET", "INSTANCE_ID", "KEYS", "MAX_OFFSET", "MAX_RECONSUME_TIMES",
    "MIN_OFFSET", "MQ2_FLAG", "MSG_REGION", "MSG_TYPE", "ORIGIN_MESSAGE_ID", "PGROUP", "POP_CK", "POP_CK_OFFSET",
    "PUSH_REPLY_TIME", "REAL_QID", "REAL_TOPIC", "RECONSUME_TIME", "REPLY_TO_CLIENT", "RETRY_TOPIC", "TAGS",
    "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_DEL_UNIQKEY",
    "TIMER_DEQUEUE_MS", "TIMER_ENQUEUE_MS", "TIMER_OUT_MS", "TIMER_ROLL_TIMES", "TRACE_ON", "TRANSFER_FLAG",
    "TRAN_MSG", "TRAN_PREPARED_QUEUE_OFFSET", "TTL", "UNIQ_KEY", "WAIT", "__BORNHOST", "__CRC32#",
))
# also store-internal, never meaningful on a new send
INTERNAL = frozenset(("INNER_MULTI_DISPATCH", "INNER_NUM", "INNER_BASE", "__transactionId__",
                      "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS"))
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
IN_DOUBT = ("resend", "skip")


@dataclass
class Item:
    key: str                    # store@physical_offset: one message, whatever group listed it
    topic: str
    tag: str | None
    keys: list
    properties: dict
    body: bytes | None
    where: str                  # file:line, for messages


@dataclass
class Counts:
    rows: int = 0
    sent: int = 0
    failed: int = 0
    already_sent: int = 0
    in_doubt_resent: int = 0
    in_doubt_skipped: int = 0
    duplicates: int = 0
    not_sent: dict = field(default_factory=dict)     # reason -> rows
    failures: list = field(default_factory=list)     # first few "where: why"

    def as_dict(self) -> dict:
        return {"rows": self.rows, "sent": self.sent, "failed": self.failed, "already_sent": self.already_sent,
                "in_doubt_resent": self.in_doubt_resent, "in_doubt_skipped": self.in_doubt_skipped,
                "duplicate_rows": self.duplicates, "not_sent": self.not_sent, "failures": self.failures}


# --- input ---------------------------------------------------------------------------------------------------
def input_files(path) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_"))
                       and f.suffix in (".json", ".jsonl", ".parquet"))
        if not files:
            raise UsageError("no .json, .jsonl or .parquet files here (give an export directory or file)", path=p)
        return files
    if not p.exists():
        raise UsageError("no such file or directory", path=p)
    return [p]


def read_rows(path):
    """(where, row dict) of every exported row, file by file."""
    from rmqctl.spark.schema import partition_values

    for f in input_files(path):
        # export's Hive-style folders (store=/topic=/date=) hold columns the files do not
        part = partition_values(path, f) if Path(path).is_dir() else {}
        if f.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError as e:
                raise RmqError(f"reading Parquet needs pyarrow (pip install 'rmqctl[spark]'): {e}") from None
            try:
                pf = pq.ParquetFile(f)
                n = 0
                for batch in pf.iter_batches(batch_size=1024):
                    for row in batch.to_pylist():
                        n += 1
                        yield f"{f}:row {n}", (part | row) if part else row
            except (OSError, ValueError) as e:
                raise FormatError(f"not a readable Parquet file: {e}", path=f) from None
            continue
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise FormatError(f"line {i}: not JSON ({e.msg})", path=f) from None
                if not isinstance(row, dict):
                    raise FormatError(f"line {i}: not a JSON object", path=f)
                yield f"{f}:{i}", (part | row) if part else row


def parse_topic_map(pairs) -> dict:
    m = {}
    for p in pairs:
        a, sep, b = p.partition("=")
        if not sep or not a or not b:
            raise UsageError(f"--topic-map wants OLD=NEW, got {p!r}")
        m[a] = b
    return m


def to_item(where: str, row: dict, topic_map: dict):
    """(Item, None) or (None, why it is not sent)."""
    for k in ("topic", "physical_offset"):
        if row.get(k) is None:
            raise FormatError(f"{where}: field {k} missing: not an rmqctl export row")
    tx = row.get("transaction_type") or "NOT"
    if tx not in ("NOT", "COMMIT"):
        return None, f"{tx} transaction message"
    props = row.get("properties") or {}
    if isinstance(props, list):           # Parquet map as (key, value) pairs
        props = dict(props)
    topic = row["topic"]
    if topic not in topic_map:
        if topic == SCHEDULE_TOPIC:
            return None, "scheduled (delay-level) message in SCHEDULE_TOPIC_XXXX"
        if topic.startswith("%RETRY%") and props.get("RETRY_TOPIC"):
            topic = props["RETRY_TOPIC"]
        elif topic.startswith("%DLQ%") and props.get("DLQ_ORIGIN_TOPIC"):
            topic = props["DLQ_ORIGIN_TOPIC"]
    topic = topic_map.get(topic, topic)
    body = row.get("body")
    if isinstance(body, str):
        try:
            body = base64.b64decode(body, validate=True)
        except ValueError:
            raise FormatError(f"{where}: field body: not base64") from None
    keys = row.get("keys")
    if keys is None:
        keys = [k for k in (props.get("KEYS") or "").split(" ") if k]
    user = {k: v for k, v in props.items() if k not in RESERVED and k not in INTERNAL and v is not None}
    return Item(f"{row.get('store') or ''}@{row['physical_offset']}", topic, row.get("tags") or props.get("TAGS"),
                list(keys), user, body, where), None


# --- resume file ---------------------------------------------------------------------------------------------
class ResumeLog:
    """`sending|sent|failed <id> ...` lines, each fsync'ed before the next step."""

    def __init__(self, path):
        self.path = Path(path)
        self.state: dict = {}
        if self.path.exists():
            with open(self.path, encoding="utf-8", errors="replace") as f:
                data = f.read()
            complete = data if data.endswith("\n") else data[:data.rfind("\n") + 1]   # a torn last line
            for n, line in enumerate(complete.splitlines(), 1):
                parts = line.split("\t")
                if len(parts) < 2 or parts[0] not in ("sending", "sent", "failed"):
                    raise FormatError(f"line {n}: not a resume line (sending|sent|failed <id>)", path=self.path)
                self.state[parts[1]] = parts[0]
            if complete != data:      # cut the torn line so the next append starts clean
                with open(self.path, "r+b") as f:
                    f.truncate(len(complete.encode("utf-8")))
        self.f = open(self.path, "a", encoding="utf-8")

    def in_doubt(self) -> int:
        return sum(1 for s in self.state.values() if s == "sending")

    def mark(self, status: str, key: str, extra: str = "") -> None:
        extra = extra.replace("\t", " ").replace("\n", " ")
        self.f.write(f"{status}\t{key}" + (f"\t{extra}" if extra else "") + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.state[key] = status

    def close(self) -> None:
        self.f.close()


# --- sending -------------------------------------------------------------------------------------------------
class GrpcSender:
    """The Apache RocketMQ 5.x Python client (rocketmq-python-client) over a proxy's gRPC endpoint."""

    def __init__(self, endpoint: str, timeout: int = 3):
        try:
            from rocketmq import ClientConfiguration, Credentials, Message, Producer
        except ImportError as e:
            raise RmqError(f"replay needs the RocketMQ client: pip install 'rmqctl[replay]' ({e})") from None
        import socket

        self._Message = Message
        host, _, port = endpoint.rpartition(":")
        try:   # the client connects lazily and would fail every message alike: say it once
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            raise RmqError(f"could not connect to {endpoint}: {e.strerror or e}") from None
        # whole seconds: the client fails every route query when given a float timeout
        self.producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=int(timeout)))
        try:
            self.producer.startup()
        except Exception as e:  # noqa: BLE001 - the client raises bare Exceptions
            raise RmqError(f"could not start a producer on {endpoint}: {e}") from None

    def __call__(self, it: Item) -> str:
        m = self._Message()
        m.topic = it.topic
        m.body = it.body
        if it.tag:
            m.tag = it.tag
        for k in it.keys:
            if k and k.strip():
                m.keys = k
        for k, v in it.properties.items():
            m.add_property(k, str(v))
        return str(self.producer.send(m).message_id)

    def close(self) -> None:
        try:
            self.producer.shutdown()
        except Exception:  # noqa: BLE001
            pass


def replay(rows, send, resume: ResumeLog | None, *, topic_map=None, rate: float | None = None,
           in_doubt: str = "resend", dry_run: bool = False, on_item=None) -> Counts:
    """Send every row once; `send(item) -> message id` raises on failure."""
    c = Counts()
    topic_map = topic_map or {}
    seen: set = set()
    state = resume.state if resume is not None else {}
    interval = 1.0 / rate if rate else 0.0
    next_at = time.monotonic()
    for where, row in rows:
        c.rows += 1
        it, why = to_item(where, row, topic_map)
        if it is None:
            c.not_sent[why] = c.not_sent.get(why, 0) + 1
            continue
        if it.key in seen:
            c.duplicates += 1
            continue
        seen.add(it.key)
        prior = state.get(it.key)
        if prior == "sent":
            c.already_sent += 1
            continue
        if prior == "sending":
            if in_doubt == "skip":
                c.in_doubt_skipped += 1
                continue
            c.in_doubt_resent += 1
        if not it.body:
            why = "no body (exported with --no-body, or an empty body the client refuses)"
            c.failed += 1
            if len(c.failures) < 10:
                c.failures.append(f"{where}: {why}")
            if resume is not None and not dry_run:
                resume.mark("failed", it.key, why)
            continue
        if dry_run:
            c.sent += 1
            if on_item:
                on_item(it)
            continue
        if interval:
            now = time.monotonic()
            if next_at > now:
                time.sleep(next_at - now)
            next_at = max(next_at, now) + interval
        if resume is not None:
            resume.mark("sending", it.key)
        try:
            mid = send(it)
        except Exception as e:  # noqa: BLE001 - the client raises bare Exceptions
            c.failed += 1
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            if len(c.failures) < 10:
                c.failures.append(f"{where}: {msg}")
            if resume is not None:
                resume.mark("failed", it.key, msg)
            continue
        c.sent += 1
        if resume is not None:
            resume.mark("sent", it.key, mid)
        if on_item:
            on_item(it)
    return c
