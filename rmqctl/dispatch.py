"""The broker's dispatch rules (CommitLogDispatcherBuildConsumeQueue / BuildIndex, docs/recovery.md "How the
broker dispatches"):
which record goes to which consume queue with which tagsCode, and which keys are indexed."""
from __future__ import annotations

from rmqctl.formats import commitlog as cl
from rmqctl.formats import properties as P
from rmqctl.formats.index import java_string_hash

# a sentinel no tagsCode can be (those are int32): the batch checks' "parse this record's TAGS the slow way"
UNDECODABLE = -(1 << 62)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX, DLQ_PREFIX, LMQ_PREFIX, SYS_PREFIX = "%RETRY%", "%DLQ%", "%LMQ%", "rmq_sys_"
# the bytes that open a multi-dispatch offsets property: a cheap search before parsing properties
MULTI_OFFSET_PROPERTY = (P.INNER_MULTI_QUEUE_OFFSET + P.NAME_VALUE_SEPARATOR).encode("ascii")


def goes_to_consume_queue(sys_flag: int) -> bool:
    """NOT_TYPE and COMMIT_TYPE only; PREPARED and ROLLBACK are never in a consume queue."""
    t = sys_flag & cl.TRANSACTION_MASK
    return t == cl.TRANSACTION_NOT_TYPE or t == cl.TRANSACTION_COMMIT_TYPE


def names_a_directory(topic: str) -> bool:
    """Whether a topic can name its consume-queue directory (consumequeue/<topic>/): one path component with no
    NUL byte. Only damage to a record's topic bytes (no CRC covers them) gives another name; the broker's
    dispatch of such a record then fails (no file can be created) or writes where its own load never looks."""
    return topic not in ("", ".", "..") and "/" not in topic and "\0" not in topic


def goes_to_index(sys_flag: int) -> bool:
    """NOT, PREPARED and COMMIT are indexed; ROLLBACK is not."""
    return (sys_flag & cl.TRANSACTION_MASK) != cl.TRANSACTION_ROLLBACK_TYPE


def tags_code(topic: str, props: dict, store_timestamp: int, delay_levels) -> int:
    """The consume-queue tagsCode: sign-extended TAGS hash; on SCHEDULE_TOPIC_XXXX with DELAY the
    absolute delivery time (store time + delay of the level, clamped to the table; + 1000 ms when the
    level is not in the table)."""
    if topic == SCHEDULE_TOPIC:
        d = props.get(P.DELAY)
        if d is not None:
            level = int(d)
            max_level = len(delay_levels)
            if level > max_level:
                level = max_level
            if level > 0:
                return store_timestamp + delay_levels[level - 1] if level <= max_level else store_timestamp + 1000
    tags = props.get(P.TAGS)
    if not tags:
        return 0
    return java_string_hash(tags)


def index_keys(props: dict) -> list[str]:
    """Keys IndexService.buildIndex puts, in order: UNIQ_KEY, then KEYS split on single spaces
    (empty pieces skipped). The index key is topic + '#' + key."""
    out = []
    uk = props.get(P.UNIQ_KEY)
    if uk:
        out.append(uk)
    keys = props.get(P.KEYS)
    if keys:
        out.extend(k for k in keys.split(P.KEY_SEPARATOR) if k)
    return out


def multi_dispatch_on(cfg) -> bool:
    """Whether records' multi-dispatch properties are followed: the broker writes
    INNER_MULTI_QUEUE_OFFSET only with enableMultiDispatch on, so a record carrying it was written
    with it on; a broker config saying enableMultiDispatch=false overrides."""
    return cfg.enable_multi_dispatch or "enable_multi_dispatch" not in cfg.explicit


def lmq_on(cfg) -> bool:
    """enableLmq (%LMQ% targets use queue 0): on unless a broker config says otherwise (5.x writes LMQ
    offsets only with enableLmq on; a 4.9 store with multi-dispatch to %LMQ% names without enableLmq
    needs --broker-config)."""
    return cfg.enable_lmq or "enable_lmq" not in cfg.explicit


def _java_split(s: str) -> list[str]:
    """String.split(","): trailing empty strings removed."""
    parts = s.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def lmq_targets(topic: str, queue_id: int, props: dict, enable_lmq: bool) -> list[tuple[str, int, int]]:
    """Multi-dispatch (enableMultiDispatch, ConsumeQueue.multiDispatchLmqQueue): extra (queue name,
    queue id, queue offset) targets, in the order the broker writes them."""
    if topic.startswith(RETRY_PREFIX) or topic.startswith(SYS_PREFIX) or topic == SCHEDULE_TOPIC:
        return []
    names, offsets = props.get(P.INNER_MULTI_DISPATCH), props.get(P.INNER_MULTI_QUEUE_OFFSET)
    if not names or not offsets or not names.strip() or not offsets.strip():
        return []
    ns, os_ = _java_split(names), _java_split(offsets)
    if len(ns) != len(os_):
        return []
    out = []
    for n, o in zip(ns, os_):
        if "/" in n:
            continue
        try:
            qo = int(o)
        except ValueError:
            break       # Long.parseLong fails: the broker's dispatch of this record stops there
        qid = 0 if (enable_lmq and n.startswith(LMQ_PREFIX)) else queue_id
        out.append((n, qid, qo))
    return out
