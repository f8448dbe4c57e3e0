"""The state a repair starts a queue from, plain or batch: a topic whose queues are batch consume queues
(queue.type=BatchCQ, rmqctl.repair.batchcq) gets BatchConsumeQueue's rules, any other rebuild_cq's."""
from __future__ import annotations

from rmqctl.repair import batchcq as BQ
from rmqctl.repair import rebuild_cq as RC


def truncate_state(store, topic: str, queue_id: int, cut: int | None):
    """Where the broker's recovery and truncateDirtyLogicFiles(cut) leave this queue (cut=None: no truncation)."""
    if BQ.is_batch(store, topic):
        return BQ.truncate_state(store, topic, queue_id, cut)
    return RC.truncate_state(store, topic, queue_id, cut)


def truncate_states(store, keys, cut: int | None) -> dict:
    """{key: truncate_state(store, *key, cut)} for many queues, in the order of `keys`: the plain ones decided
    together (rmqctl.repair.truncate_many)."""
    from rmqctl.repair.truncate_many import truncate_many

    keys = list(keys)
    plain = truncate_many(store, [k for k in keys if not BQ.is_batch(store, k[0])], cut)
    return {k: plain[k] if k in plain else BQ.truncate_state(store, k[0], k[1], cut) for k in keys}


def empty_state(store, topic: str, queue_id: int):
    """A queue rebuilt from nothing (rebuild cq): every existing file is replaced or removed."""
    if BQ.is_batch(store, topic):
        return BQ.empty_state(store, topic, queue_id)
    return RC.empty_state(store, topic, queue_id)
