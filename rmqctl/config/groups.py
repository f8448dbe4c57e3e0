"""Subscription groups (subscriptionGroup.json, ``subscriptionGroupTable``): list, create, update,
delete. New entries carry SubscriptionGroupConfig's defaults (retryMaxTimes 16, retryQueueNums 1,
broadcast/consume/consumeFromMin enabled, ...) with the 4.x or 5.x field set matching the file.
"""
from __future__ import annotations

from rmqctl.config.files import delete_entry, looks_v5, next_version, top_table
from rmqctl.config.topics import validate_name
from rmqctl.errors import UsageError

# field -> python type, for `groups update --set FIELD=VALUE` and the dedicated options
FIELDS = {
    "retryMaxTimes": int, "retryQueueNums": int, "consumeBroadcastEnable": bool, "consumeEnable": bool,
    "consumeFromMinEnable": bool, "consumeMessageOrderly": bool, "notifyConsumerIdsChangedEnable": bool,
    "brokerId": int, "whichBrokerWhenConsumeSlowly": int, "consumeTimeoutMinute": int, "groupSysFlag": int,
}


def template(name: str, v5: bool) -> dict:
    if v5:
        return {"attributes": {}, "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                "consumeFromMinEnable": True, "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
                "groupName": name, "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
                "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
                "whichBrokerWhenConsumeSlowly": 1}
    return {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
            "groupName": name, "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
            "whichBrokerWhenConsumeSlowly": 1}


def table(doc: dict) -> dict:
    return top_table(doc, "subscriptionGroupTable")


def rows(doc: dict) -> list[dict]:
    out = []
    for name, g in table(doc).items():
        if isinstance(g, dict):
            out.append({"group": str(name), **{k: g.get(k) for k in
                        ("retryMaxTimes", "retryQueueNums", "consumeBroadcastEnable", "consumeEnable",
                         "consumeFromMinEnable", "consumeMessageOrderly", "brokerId")}})
    return out


def _insert_sorted(g: dict, key: str, val) -> None:
    items = list(g.items()) + [(key, val)]
    items.sort(key=lambda kv: kv[0])
    g.clear()
    g.update(items)


def create(doc: dict, name: str, settings: dict) -> dict:
    validate_name(name, "group")
    t = table(doc)
    if name in t:
        raise UsageError(f"group {name!r} already exists (use `config groups update`)")
    v5 = looks_v5(doc, "subscriptionGroupTable", "groupSysFlag")
    g = template(name, v5)
    for k, v in settings.items():
        if k in g:
            g[k] = v
        else:
            _insert_sorted(g, k, v)
    t[name] = g
    next_version(doc)
    return g


def update(doc: dict, name: str, settings: dict) -> dict:
    g = table(doc).get(name)
    if not isinstance(g, dict):
        raise UsageError(f"no group {name!r} in subscriptionGroup.json")
    changes = {}
    for k, v in settings.items():
        if g.get(k) != v or k not in g:
            changes[k] = (g.get(k), v)
            if k in g:
                g[k] = v
            else:
                _insert_sorted(g, k, v)
    if changes:
        next_version(doc)
    return changes


def delete(doc: dict, name: str) -> dict:
    return delete_entry(doc, "subscriptionGroupTable", name, f"group {name!r} in subscriptionGroup.json")
