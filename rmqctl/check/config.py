"""config/*.json checks: what the broker's loader will do with each file (main vs .bak, docs/recovery.md
"Config files and .bak"), and
whether the loaded content agrees with the store (consumer/delay offsets within each queue's
[min, max], topics and groups that exist). Loading semantics come from rmqctl.config.files."""
from __future__ import annotations

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.config import files as cf

SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_", "CID_ONS", "rmq_sys")


def check_config_file(target, findings: list):
    """One config kind: returns what the broker would load (dict) or None."""
    try:
        loaded = cf.load_config(target)
    except Exception as e:  # noqa: BLE001 - report, never crash
        findings.append(Finding(ERROR, "config.unreadable", str(target.path), None, None, None, str(e)))
        return None
    main, bak = loaded.main, loaded.bak
    mpath = str(main.path)
    off = main.error.offset if main.error is not None and main.error.offset is not None else 0
    if loaded.verdict == cf.FAIL:
        findings.append(Finding(ERROR, "config.load", mpath, off, "a file the broker can load", loaded.verdict,
                                loaded.problem()))
        return None
    src = loaded.source
    if loaded.verdict == cf.EMPTY and loaded.used is not None and src.meaning is not None and src.meaning.empties:
        # parses, but the table is missing (unknown/misspelt key) or null: the broker starts empty
        m = src.meaning
        code = "config.null_table" if m.null_tables else "config.missing_table"
        findings.append(Finding(ERROR, code, str(src.path), None, " and ".join(target.kind.tables),
                                "null" if m.null_tables else "missing", loaded.problem()))
        return None
    if loaded.verdict == cf.EMPTY and target.kind.tables and main.status != "missing":
        findings.append(Finding(ERROR, "config.load", mpath, off, "a file the broker can load",
                                f"broker would {loaded.verdict}", loaded.problem()))
        return None
    if loaded.used == ".bak":
        findings.append(Finding(ERROR, "config.main_unusable", mpath, off, "a file the broker can decode",
                                main.describe(), f"the broker will load {bak.path.name} instead (the previous "
                                "version; changes since its last persist are lost)"))
    if src.meaning is not None:
        for k in src.meaning.unknown_keys:
            findings.append(Finding(WARNING, "config.unknown_key", str(src.path), None,
                                    " / ".join(target.kind.tables), k,
                                    f"top-level key {k!r} is not a field of the broker's {target.kind.name} "
                                    "(ignored on load, dropped on its next persist)"))
        for w in src.meaning.warnings:
            findings.append(Finding(WARNING, "config.value", str(src.path), None, None, None,
                                    f"{w}: the broker loads it as it is"))
    if main.usable and bak.status not in ("missing", "ok") and bak.size:
        findings.append(Finding(WARNING, "config.bak_unusable", str(bak.path), 0, "valid JSON", bak.describe(),
                                "the backup copy is damaged: a later torn write of the main file would be fatal"))
    elif main.usable and bak.usable and bak.meaning is not None and bak.meaning.empties:
        findings.append(Finding(WARNING, "config.bak_unusable", str(bak.path), None,
                                " and ".join(target.kind.tables), bak.describe(),
                                f"the backup copy would leave the broker with EMPTY {target.kind.noun} after a later "
                                "torn write of the main file"))
    if main.usable and bak.usable and not target.kind.binary:
        mv, bv = _counter(main.doc), _counter(bak.doc)
        if mv is not None and bv is not None and bv > mv:
            findings.append(Finding(WARNING, "config.bak_newer", mpath, None, f"dataVersion.counter >= {bv}", mv,
                                    ".bak has a newer dataVersion than the main file"))
    return loaded.doc


def _counter(doc):
    dv = doc.get("dataVersion") if isinstance(doc, dict) else None
    if isinstance(dv, dict):
        try:
            return int(dv.get("counter"))
        except (TypeError, ValueError):
            return None
    return None


def check_configs(store, findings: list, queue_range) -> None:
    """Every known config file in store/config. queue_range(topic, qid) -> (min, max) or None."""
    cdir = store.config_dir
    if not cdir.is_dir():
        return
    docs = {}
    for kind in cf.config_files(cdir):
        target = cf.Target(store.root, cdir, cdir / kind.filename, kind)
        docs[kind.name] = check_config_file(target, findings)
    topics = _table(docs.get("topics"), "topicConfigTable")
    groups = _table(docs.get("subscriptionGroup"), "subscriptionGroupTable")
    for name in ("consumerOffset", "lmqConsumerOffset"):
        if docs.get(name):
            _check_offsets(cdir / cf.KINDS[name].filename, docs[name], topics, groups, queue_range, findings)
    if docs.get("delayOffset"):
        _check_delay(cdir / "delayOffset.json", docs["delayOffset"], queue_range, findings)


def _table(doc, key):
    if not isinstance(doc, dict):
        return None
    t = doc.get(key)
    return t if isinstance(t, dict) else None


def _check_offsets(path, doc, topics, groups, queue_range, findings):
    from rmqctl.config.offsets import rows

    try:
        rs = rows(doc)
    except Exception as e:  # noqa: BLE001
        findings.append(Finding(ERROR, "config.offsets", str(path), None, None, None, str(e)))
        return
    missing_topics, missing_groups = set(), set()
    for r in rs:
        rng = queue_range(r.topic, r.queue)
        if rng is not None:
            lo, hi = rng
            if r.offset > hi:
                findings.append(Finding(ERROR, "config.offset_range", str(path), None, f"<= {hi} (queue max)",
                                        r.offset, f"{r.topic}@{r.group} queue {r.queue}: committed offset beyond the "
                                        f"queue's max offset: the broker resets it"))
            elif r.offset < lo:
                findings.append(Finding(INFO, "config.offset_range", str(path), None, f">= {lo} (queue min)",
                                        r.offset, f"{r.topic}@{r.group} queue {r.queue}: below the queue's min "
                                        f"(messages expired); the broker moves it to the min"))
        if topics is not None and r.topic not in topics and not r.topic.startswith(("%RETRY%", "%DLQ%", "%LMQ%")) \
                and r.topic not in missing_topics:
            missing_topics.add(r.topic)
            findings.append(Finding(WARNING, "config.topic_missing", str(path), None, "a topic in topics.json",
                                    r.topic, f"offsets of {r.topic}@{r.group} for a topic topics.json does not "
                                    f"have (deleted topic?)"))
        if groups is not None and r.group not in groups and r.group not in missing_groups \
                and not r.group.startswith(SYSTEM_GROUP_PREFIXES):
            missing_groups.add(r.group)
            findings.append(Finding(INFO, "config.group_missing", str(path), None,
                                    "a group in subscriptionGroup.json", r.group,
                                    "group not in subscriptionGroup.json (auto-created on use by default)"))


def _check_delay(path, doc, queue_range, findings):
    table = doc.get("offsetTable")
    if not isinstance(table, dict):
        return
    for level, off in table.items():
        try:
            lv, o = int(level), int(off)
        except (TypeError, ValueError):
            findings.append(Finding(ERROR, "config.delay_offset", str(path), None, "level: offset",
                                    f"{level!r}: {off!r}", "non-numeric entry"))
            continue
        rng = queue_range("SCHEDULE_TOPIC_XXXX", lv - 1)
        if rng is not None and o > rng[1]:
            findings.append(Finding(ERROR, "config.delay_offset", str(path), None, f"<= {rng[1]}", o,
                                    f"delay level {lv}: offset beyond SCHEDULE_TOPIC_XXXX queue {lv - 1}'s max"))
