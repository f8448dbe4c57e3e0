"""The finding codes of `rmqctl verify`: one stable entry per code, rendered as FINDING CODES in
`man rmqctl-verify` (like fsck's list of problems).

A code names what was found, never how it was found; it does not change between releases. Each
entry says what the finding means, what the broker does with the store as it is, and what to run.
tests/test_finding_codes.py checks that every code the checks can emit is here and that no entry
here is dead.
"""
from __future__ import annotations

from typing import NamedTuple


class Code(NamedTuple):
    meaning: str
    broker: str
    run: str


_VERIFY = "rmqctl verify STORE again after the repair"
_RECOVER = "rmqctl recover --dry-run STORE, then rmqctl recover STORE (undo: rmqctl undo STORE)"
_RECOVER_Q = ("rmqctl recover --on-corruption quarantine STORE keeps the records after the bad range; "
              "plain rmqctl recover STORE truncates like the broker")
_REBUILD_CQ = "rmqctl rebuild cq STORE (--topic T --queue N for one queue)"
_REBUILD_IX = "rmqctl rebuild index STORE"
_NOTHING = "nothing; it is a note"
_BAK = "rmqctl config status STORE; rmqctl config restore STORE NAME --from-bak if the backup is the good copy"

CODES: dict[str, Code] = {
    # -- store, lock, abort, recovery ------------------------------------------------------------
    "store.unsupported": Code(
        "the store is of a kind rmqctl does not read (DLedger commitlog, RocksDB consume queues or "
        "metadata, several commitlog paths)",
        "runs it with the matching storeType/DLedger settings",
        "nothing with rmqctl; use the broker's own tools for that store type"),
    "store.not_followed": Code(
        "a file or folder of the store is a symbolic link leading outside the store, or not a regular "
        "file; it was not read",
        "follows the link like any other file",
        "check where the link points; give the real path (or --broker-config with storePathCommitLog)"),
    "lock.held": Code(
        "a live process (normally the running broker) holds the store's lock file",
        "is running on this store: what verify read may change under it",
        "stop the broker before any repair; verify stays read-only"),
    "lock.unreadable": Code(
        "the lock file could not be opened to test it",
        "creates or opens it at start; a permission problem stops the broker",
        "check the owner and mode of STORE/lock"),
    "abort.present": Code(
        "the abort file exists: the broker did not shut down cleanly (crash, kill -9, power loss)",
        "runs its abnormal recovery at the next start: scans the commitlog from the checkpoint's file, "
        "truncates a torn tail, re-dispatches consume queues and index",
        _RECOVER + " does the same offline with a backup; or just start the broker"),
    "recovery.predicted": Code(
        "which commitlog file the broker's normal recovery will start from",
        "checks the last files from there at start",
        _NOTHING),
    # -- checkpoint ------------------------------------------------------------------------------
    "checkpoint.missing": Code(
        "there is no checkpoint file",
        "starts from a zero checkpoint; an abnormal recovery then scans from the first commitlog file",
        "nothing is lost; rmqctl recover STORE writes a checkpoint matching the store"),
    "checkpoint.unreadable": Code(
        "the checkpoint file could not be read (I/O error, permission)",
        "fails to start if it cannot map the file",
        "check the disk and the file's mode; rmqctl recover STORE rewrites it"),
    "checkpoint.size": Code(
        "the checkpoint is shorter than 4096 bytes (torn or zero-length)",
        "maps 4096 bytes and reads what is missing as zero",
        _RECOVER),
    "checkpoint.timestamp": Code(
        "a checkpoint timestamp is negative, far in the future, or later than the last stored message",
        "chooses the abnormal recovery's start file from it; a garbage value makes that start "
        "unpredictable (too late: dirty data kept)",
        _RECOVER),
    "checkpoint.offset": Code(
        "a checkpoint offset lies outside the commitlog",
        "uses it as the confirm offset or recovery bound",
        _RECOVER),
    "checkpoint.padding": Code(
        "bytes after the checkpoint's fields are not zero",
        "ignores them",
        "nothing urgent; rmqctl recover STORE rewrites the checkpoint"),
    # -- commitlog files --------------------------------------------------------------------------
    "commitlog.missing": Code(
        "consume queues or index files exist but there is no commitlog directory",
        "has no messages to serve; consume queues pointing into it are dropped by recovery",
        "if storePathCommitLog points elsewhere, give --broker-config; otherwise restore the commitlog "
        "from a replica"),
    "commitlog.stray": Code(
        "a file in commitlog/ whose name is not a 20-digit offset (editor backup, copy, temporary file)",
        "fails to start: it parses every name in commitlog/ as an offset",
        "move the file out of commitlog/"),
    "commitlog.file_gap": Code(
        "commitlog files are missing between two others: a byte range of the log is gone",
        "stops its recovery at the gap; consume queues into the gap point at nothing",
        "restore the missing file(s) from a replica or backup; " + _RECOVER + " truncates at the gap"),
    "commitlog.file_overlap": Code(
        "two commitlog files cover the same offsets",
        "loads both and reads records from the wrong one",
        "keep the file that verify does not flag; move the other out of commitlog/"),
    "commitlog.file_name": Code(
        "a commitlog file name is not a multiple of the commitlog file size",
        "maps it at the wrong offset (or the file size setting is not the one the store was written "
        "with)",
        "give the broker's mappedFileSizeCommitLog with --broker-config; otherwise restore the file"),
    "commitlog.file_size": Code(
        "a commitlog file is not of the configured file size",
        "refuses to load a file of another size (load() fails); 5.x deletes a zero-length last file instead",
        "give the right mappedFileSizeCommitLog with --broker-config; a truncated last file: " + _RECOVER),
    "commitlog.preallocated": Code(
        "empty pre-allocated commitlog files follow the last written one",
        "deletes them during recovery",
        _NOTHING),
    "commitlog.unreadable": Code(
        "an I/O error while reading a commitlog file",
        "fails or stops reading at the same place",
        "check the disk (dmesg, SMART); copy the store to a healthy disk and verify the copy"),
    # -- commitlog records ------------------------------------------------------------------------
    "commitlog.magic": Code(
        "a record's MAGICCODE is neither a message nor a BLANK magic",
        "stops its recovery at this record and truncates everything after it",
        _RECOVER_Q),
    "commitlog.total_size": Code(
        "a record's TOTALSIZE is impossible (negative, too small, past the end of the file)",
        "stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.length": Code(
        "a record's fields do not add up to its TOTALSIZE (body, topic or properties length is wrong)",
        "stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.body_crc": Code(
        "the body's CRC does not match BODYCRC: the body bytes are damaged",
        "with checkCRCOnRecover (the default) stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.prop_crc": Code(
        "the properties' CRC (__CRC32#, enabledAppendPropCRC) does not match",
        "stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.physical_offset": Code(
        "a record's PHYSICALOFFSET is not where it lies",
        "5.3.3 and later stop recovery here; earlier brokers accept the record",
        _RECOVER_Q),
    "commitlog.delay": Code(
        "a delay-level message's DELAY property is not a valid level",
        "stops its recovery at this record",
        _RECOVER_Q),
    "commitlog.short_record": Code(
        "a record is cut short by the end of its file",
        "stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.record": Code(
        "a record that cannot be decoded for another reason",
        "stops its recovery here and truncates everything after it",
        _RECOVER_Q),
    "commitlog.zeroed_range": Code(
        "a run of zero or garbage bytes in the middle of the commitlog, with valid records after it",
        "stops its recovery here and truncates the commitlog, losing every later message",
        _RECOVER_Q),
    "commitlog.torn_tail": Code(
        "a half-written message at the end of the log (crash during a write)",
        "truncates the commitlog at this record during recovery; the message was never acknowledged",
        _RECOVER),
    "commitlog.write_in_progress": Code(
        "an incomplete record at the tail while a broker holds the lock: a write in progress",
        "completes it",
        _NOTHING),
    "commitlog.no_blank": Code(
        "records run to the very end of a file that is not the last: a full file always ends with a "
        "BLANK record",
        "stops its recovery in this file",
        _RECOVER),
    "commitlog.blank_size": Code(
        "a BLANK record's TOTALSIZE is not the distance to the end of its file",
        "rolls to the next file anyway",
        "nothing urgent; note it for the next repair"),
    "commitlog.stale_record": Code(
        "a valid-looking record after the logical end of the log with a wrong PHYSICALOFFSET (bytes "
        "left by an earlier truncation)",
        "5.3.3 ignores it; brokers before 5.3.3 could recover it as a message",
        _RECOVER + " zeroes the stale bytes"),
    "commitlog.stale_after_end": Code(
        "records or consume-queue units after the end the broker already recovered to",
        "never serves them and overwrites them",
        "nothing needed; rmqctl recover --on-corruption quarantine STORE can save the bytes first"),
    "commitlog.garbage_after_end": Code(
        "non-zero bytes after the last record of the last file",
        "overwrites them with the next messages",
        "nothing urgent; " + _RECOVER + " clears them"),
    "commitlog.topic": Code(
        "a record's topic bytes are not valid UTF-8",
        "decodes them with replacement characters: the message lands in an unexpected topic",
        "rmqctl dump --json on the commitlog at the offset to see the record"),
    "commitlog.topic_name": Code(
        "a record's topic cannot name a consume-queue directory (a NUL byte, '/', '.' or '..'): its topic bytes "
        "were damaged (no CRC covers them; the broker accepts letters, digits and %|_- only)",
        "cannot dispatch the record where consumers read: with a NUL byte its consume-queue write fails, is "
        "retried 30 times, then the queue is flagged unwritable; with a '/' it writes nested directories its "
        "own start-up never loads",
        "rmqctl dump --json on the commitlog at the offset to see the record; " + _RECOVER + " dispatches every "
        "other record and names this one"),
    "commitlog.properties": Code(
        "a record's properties are malformed (missing separators, bad escapes); the body CRC does not "
        "cover them",
        "decodes what it can; consumers may see wrong keys, tags or delay levels",
        "rmqctl dump --json on the commitlog at the offset to see the record"),
    "commitlog.queue_offset_gap": Code(
        "QUEUEOFFSET jumps within one queue in the commitlog",
        "logs 'logic queue order maybe wrong' when dispatching; consumers see a gap of offsets",
        _REBUILD_CQ),
    # -- consume queues --------------------------------------------------------------------------
    "cq.ahead": Code(
        "consume-queue units point past the end of the commitlog",
        "truncates such units in recovery (consumers would read messages that do not exist)",
        _RECOVER),
    "cq.behind": Code(
        "the consume queue ends before the last messages of its queue in the commitlog",
        "re-dispatches the missing units only during an abnormal recovery (abort present); after a "
        "clean shutdown consumers never see those messages",
        _REBUILD_CQ + ", or " + _RECOVER),
    "cq.missing_unit": Code(
        "messages in the commitlog have no unit in their consume queue",
        "does not add them back; consumers never see those messages",
        _REBUILD_CQ),
    "cq.unit_mismatch": Code(
        "units disagree with the commitlog record at their queue offset (offset, size or tags code)",
        "serves the unit as it is: consumers get the wrong message or a filter mismatch",
        _REBUILD_CQ),
    "cq.orphan_unit": Code(
        "units point into the commitlog where no record of this queue has this queue offset",
        "serves them; pulls find a different message or none",
        _REBUILD_CQ),
    "cq.points_into_gap": Code(
        "units reference a missing commitlog file",
        "cannot serve them; consumers stall or skip",
        "restore the commitlog file; otherwise " + _REBUILD_CQ),
    "cq.hole": Code(
        "a valid-looking unit after an invalid one",
        "ends the queue at the hole during recovery; later units are lost",
        _REBUILD_CQ),
    "cq.pre_blank": Code(
        "a pre-blank unit (offset 0, size 2147483647) where only messages belong",
        "treats it as the end of the queue",
        _REBUILD_CQ),
    "cq.file_gap": Code(
        "consume-queue files of one queue are missing between two others",
        "stops loading the queue at the gap",
        _REBUILD_CQ),
    "cq.ext_unit": Code(
        "units point at no valid consume-queue ext unit",
        "serves them without their filter data",
        _REBUILD_CQ),
    "cq.ext_mismatch": Code(
        "ext units do not belong to the message of their consume-queue unit",
        "filters with the wrong tags or bitmap",
        _REBUILD_CQ),
    "cq.note": Code(
        "a note about a consume queue (empty queue, queue of a deleted topic)",
        "nothing",
        _NOTHING),
    "bcq.ahead": Code(
        "a batch consume-queue unit points past the commitlog end",
        "serves a message that does not exist",
        _REBUILD_CQ),
    "bcq.base_offset": Code(
        "a batch consume-queue unit's msgBaseOffset does not continue the previous unit's range",
        "serves overlapping or missing offsets",
        _REBUILD_CQ),
    "bcq.file_size": Code(
        "mapperFileSizeBatchConsumeQueue is not a whole number of 46-byte batch consume-queue units",
        "cannot append the unit that would cross a file's end",
        "give the broker's real setting with --broker-config; otherwise fix the broker config"),
    "bcq.unit_mismatch": Code(
        "batch consume-queue units do not point at their record (size, queue id, base offset or commitlog "
        "offset differ)",
        "serves another record, or none, for those queue offsets",
        _REBUILD_CQ),
    "bcq.queue_type": Code(
        "a batchconsumequeue directory belongs to a topic that is absent from config/topics.json or whose "
        "queue.type is not BatchCQ",
        "refuses to start (5.x: each queue directory's kind must match its topic's queue.type)",
        "give the topic the attribute queue.type=BatchCQ in config/topics.json (rmqctl config set STORE topics), "
        "or move the directory aside with the broker stopped"),
    "cq.queue_type": Code(
        "a consumequeue directory belongs to a topic whose queue.type in config/topics.json is BatchCQ",
        "refuses to start (5.x: each queue directory's kind must match its topic's queue.type)",
        "correct the topic's queue.type attribute in config/topics.json (rmqctl config set STORE topics), or "
        "move the directory aside with the broker stopped"),
    # -- index -----------------------------------------------------------------------------------
    "index.missing": Code(
        "the commitlog holds keyed messages but there are no index files",
        "finds none of them by key and does not rebuild the index by itself",
        _REBUILD_IX),
    "index.geometry": Code(
        "the index files were written with another maxHashSlotNum/maxIndexNum than the broker config",
        "creates new files with its configured geometry; old files keep theirs",
        "check --broker-config; nothing to repair if the files are consistent"),
    "index.file_size": Code(
        "an index file's size differs from 40 + 4 x slots + 20 x items",
        "zero-extends a short file (it maps the full size)",
        "give the right --broker-config; otherwise " + _REBUILD_IX),
    "index.index_count": Code(
        "the header's indexCount is out of range",
        "misreads the file: queries may miss keys or read garbage",
        _REBUILD_IX),
    "index.header_time": Code(
        "the header's endTimestamp is before its beginTimestamp",
        "skips the file for time-bounded key queries",
        _REBUILD_IX),
    "index.header_begin_phy": Code(
        "the header's beginPhyOffset differs from the first item",
        "uses the header for recovery and expiry decisions",
        _REBUILD_IX),
    "index.header_end_phy": Code(
        "the header's endPhyOffset differs from the last item",
        "uses the header for recovery and expiry decisions",
        _REBUILD_IX),
    "index.ahead": Code(
        "index entries point past the end of the commitlog",
        "returns offsets of messages that do not exist; recovery drops such files",
        _RECOVER),
    "index.after_checkpoint": Code(
        "a full index file newer than the checkpoint's indexMsgTimestamp",
        "deletes it at the next start after an abnormal shutdown (and re-indexes what it can)",
        _RECOVER),
    "index.slot_range": Code(
        "hash slots hold item numbers outside the file",
        "follows them into garbage: key queries miss or return wrong messages",
        _REBUILD_IX),
    "index.slot_hash": Code(
        "slots point at items whose key hash belongs to another slot",
        "key queries miss those keys",
        _REBUILD_IX),
    "index.hash_slot_count": Code(
        "the header's hashSlotCount differs from what this broker version counts",
        "ignores the field when querying",
        "nothing urgent; give --broker-version if the version guess is wrong"),
    "index.legacy_slot_count": Code(
        "hashSlotCount counted the way older brokers do (once per slot)",
        "ignores the field when querying",
        _NOTHING),
    "index.chain_cycle": Code(
        "an item's prevIndex points at the same or a newer item: the chain loops",
        "bounds the walk but key queries miss keys",
        _REBUILD_IX),
    "index.chain_bucket": Code(
        "an item's prevIndex links into another hash bucket",
        "key queries return wrong candidates or miss keys",
        _REBUILD_IX),
    "index.time_diff": Code(
        "an item's timeDiff lies outside the file's time span",
        "time-bounded key queries miss it",
        _REBUILD_IX),
    "index.phy_order": Code(
        "items are not in commitlog order",
        "key queries may return them in the wrong order or miss them",
        _REBUILD_IX),
    "index.item_message": Code(
        "sampled index items do not match their message (key hash, offset)",
        "key queries return the wrong messages",
        _REBUILD_IX),
    "index.note": Code(
        "a note about the index files",
        "nothing",
        _NOTHING),
    # -- config ----------------------------------------------------------------------------------
    "config.unreadable": Code(
        "a config file could not be read (I/O error, permission)",
        "falls back to the .bak copy or starts with empty tables",
        "check the file's mode and the disk"),
    "config.load": Code(
        "neither the config file nor its .bak can be loaded by the broker",
        "fails to start (load() returns false) or starts with empty tables",
        _BAK + "; otherwise repair the JSON (rmqctl config show STORE NAME)"),
    "config.main_unusable": Code(
        "the main config file cannot be decoded",
        "loads the .bak copy instead: changes since its last persist are lost",
        _BAK),
    "config.missing_table": Code(
        "the file parses but its table key is missing or misspelt",
        "loads it and runs with EMPTY tables (topics, offsets or groups gone)",
        _BAK),
    "config.null_table": Code(
        "the file parses but its table is null",
        "loads it and runs with EMPTY tables",
        _BAK),
    "config.unknown_key": Code(
        "a top-level key that is not a field of the broker's config class",
        "ignores it on load and drops it at its next persist",
        "rmqctl config delete STORE NAME KEY if it is a typo of a real field"),
    "config.value": Code(
        "a value the broker loads as it is, but probably not what was meant",
        "uses the value",
        "rmqctl config get/set STORE NAME PATH"),
    "config.bak_unusable": Code(
        "the .bak copy is damaged or would load as empty",
        "has no fallback: a later torn write of the main file would be fatal",
        "the broker rewrites .bak at its next persist; rmqctl config set on the file rotates it too"),
    "config.bak_newer": Code(
        "the .bak copy has a newer dataVersion than the main file",
        "loads the main file (older data)",
        _BAK),
    "config.offsets": Code(
        "consumerOffset.json could not be interpreted",
        "starts with what it can load",
        "rmqctl config show STORE consumerOffset"),
    "config.offset_range": Code(
        "a committed consumer offset lies outside its queue's [min, max]",
        "corrects it when the group next pulls (to max beyond the end, to min before the start)",
        "rmqctl config offsets set STORE --group G --topic T --queue N --offset X, or offsets reset"),
    "config.topic_missing": Code(
        "consumer offsets for a topic topics.json does not have (a deleted topic?)",
        "keeps them until the group is cleaned",
        "nothing, or rmqctl config delete STORE consumerOffset offsetTable.TOPIC@GROUP"),
    "config.group_missing": Code(
        "consumer offsets of a group subscriptionGroup.json does not have",
        "auto-creates the group on use (autoCreateSubscriptionGroup, the default)",
        _NOTHING),
    "config.delay_offset": Code(
        "a delayOffset.json entry is not numeric or lies outside its SCHEDULE_TOPIC_XXXX queue",
        "delivers delayed messages from that offset: it may re-deliver or skip delayed messages",
        "rmqctl config delay show STORE; rmqctl config delay set STORE LEVEL OFFSET"),
    # -- timer, compaction -----------------------------------------------------------------------
    "timer.timerlog_size": Code(
        "a zero-length timerlog file",
        "deletes it when it is the last file (MappedFileQueue.doLoad); any other one of the wrong size "
        "makes load() fail",
        "move the empty file out of timerlog/ (with the broker stopped)"),
    "timer.timerwheel_size": Code(
        "the timerwheel is not of the configured size",
        "fails to start on a timerwheel of another size",
        "give the broker's timerWheelEnable/timerPrecisionMs settings; otherwise restore the file"),
    "timer.timercheck": Code(
        "config/timercheck is shorter than its fields",
        "reads missing fields as zero and re-scans timer messages",
        _RECOVER),
    "timer.flush_pos": Code(
        "timercheck's lastTimerLogFlushPos lies beyond the timerlog",
        "recovers the timerlog from a wrong position",
        _RECOVER),
    "timer.queue_offset": Code(
        "timercheck's lastTimerQueueOffset lies beyond the timer topic's consume queue",
        "skips timer messages up to that offset",
        _RECOVER),
    "timer.load": Code(
        "a timerlog file or the timerwheel is not of the size the timer store expects",
        "fails to load its timer store and does not start",
        "give the broker's timer settings with --broker-config; otherwise restore the file from a backup"),
    "timer.bad_unit": Code(
        "a timerlog unit has a size other than 52 or a magic outside 0xF",
        "ends the timerlog there at its timer recovery and deletes later files (units after it are lost); "
        "a bad unit before the recovery's scan start is read as a unit",
        _RECOVER),
    "timer.torn_unit": Code(
        "a timerlog unit written only in part by a crash (write time and message size are zero)",
        "keeps the unit (its size and magic pass) and links it to a wheel slot; its message is lost",
        _RECOVER),
    "timer.unit_message": Code(
        "a timerlog unit's message is not in the commitlog, or is not a timer-topic message",
        "cannot deliver it",
        "nothing restores the message; " + _RECOVER),
    "timer.unit_topic_hash": Code(
        "a timerlog unit's topic hash is not the hash of its message's real topic",
        "uses the hash only when it recounts its per-topic timer metrics from the timerlog: the unit is counted "
        "under another topic, or not at all; delivery reads the message itself",
        "nothing for delivery (the metrics are statistics); " + _RECOVER + " if other timer findings need it"),
    "timer.unit_deliver_time": Code(
        "a timerlog unit's deliver time is not its message's TIMER_OUT_MS",
        "delivers the message at the unit's time, not the one the producer asked for",
        _RECOVER),
    "timer.slot_index": Code(
        "a timerwheel slot holds a time that belongs to another slot",
        "reads the slot at the wrong time, or never",
        _RECOVER),
    "timer.slot_position": Code(
        "a timerwheel slot's first or last position lies past the timerlog or between its units",
        "reads garbage there when the slot falls due",
        _RECOVER),
    "timer.slot_chain": Code(
        "walking prev_pos from a wheel slot's last unit does not reach its first unit",
        "delivers only the units it walks; the rest of the slot is lost",
        _RECOVER),
    "timer.unit_unlinked": Code(
        "pending timerlog units are in no wheel slot's chain and lie before the timer recovery's scan start",
        "never delivers their messages",
        _RECOVER),
    "timer.wheel_behind": Code(
        "wheel slots lag the timerlog (units written after the wheel was last flushed)",
        "re-links them at its timer recovery on the next start",
        "nothing; or rmqctl recover STORE writes them now"),
    "timer.flush_pos_behind": Code(
        "timercheck's lastTimerLogFlushPos lies before the timerlog's end",
        "scans the timerlog from an earlier position at its timer recovery",
        _NOTHING),
    "timer.queue_behind": Code(
        "timercheck's lastTimerQueueOffset lies before the end of the timer topic's consume queue",
        "enqueues those timer messages again at the next start; those already in the timerlog get a second unit",
        "nothing prevents it (rmqctl recover revises timercheck as the broker does); consumers of those "
        "topics see those messages twice"),
    "compaction.load": Code(
        "a compaction queue lacks its log or CQ directory, or holds a file of the wrong size or name",
        "does not load the queue (consumers get nothing of it from the compaction store); a file name that is "
        "not a number, such as a *.delete file left by an interrupted compaction, stops the broker from starting",
        "move the odd file aside with the broker stopped; rmqctl rebuild cq STORE regenerates CQ files from "
        "their logs"),
    "compaction.stray": Code(
        "a 0-byte last entry in a compaction log or CQ directory",
        "deletes it at load",
        _NOTHING),
    "compaction.unpaired": Code(
        "a compaction log file starts after the end of its queue's last CQ unit",
        "deletes the file at load: its records are lost from the compaction store",
        "rmqctl recover STORE regenerates the missing CQ file from the log (rmqctl rebuild cq STORE rewrites "
        "every compaction CQ file)"),
    "compaction.log_record": Code(
        "a compaction log holds a damaged record",
        "serves the bytes as they are to a consumer reading the queue",
        "rmqctl rebuild cq STORE; " + _VERIFY),
    "compaction.cq_unit": Code(
        "a compaction CQ unit points outside its log file, at no record start, or disagrees with its record",
        "serves garbage or the wrong record at that queue offset",
        "rmqctl rebuild cq STORE"),
    "compaction.cq_order": Code(
        "compaction CQ units' queue offsets or log positions do not ascend",
        "finds the wrong unit when it looks an offset up",
        "rmqctl rebuild cq STORE"),
    "compaction.duplicate_key": Code(
        "a compacted range of a compaction log holds one key twice",
        "serves both records to a consumer of the compacted topic",
        "nothing to repair offline; consumers of the topic may see both records of the key"),
    "compaction.orphan_record": Code(
        "a compaction log record has no CQ unit",
        "never serves it; one after the CQ's last unit is overwritten by the next record",
        "rmqctl rebuild cq STORE regenerates the CQ from the log"),
    "compaction.commitlog_mismatch": Code(
        "a compaction log record is not the commitlog's message at its commitlog offset",
        "serves the compaction log's copy, not the stored message",
        "rmqctl rebuild cq STORE"),
    "compaction.position": Code(
        "a compaction position lies beyond its compaction queue's max offset, or names a queue with no "
        "compaction files",
        "never compacts the files up to that position again (or ignores the entry)",
        "move compaction/position-checkpoint aside with the broker stopped"),
    "compaction.behind": Code(
        "keyed messages of a COMPACTION topic in the commitlog are not in its compaction log",
        "re-dispatches them only in an abnormal recovery; after a normal start consumers never see them",
        "rmqctl recover STORE (with an abort file), else rmqctl recover --from-start STORE"),
    "compaction.checkpoint": Code(
        "compaction/position-checkpoint is not valid JSON",
        "restarts compaction from the beginning",
        "move the file aside; the broker recreates it"),
    "compaction.offset": Code(
        "a compaction position lies beyond its queue's max offset",
        "compacts nothing of that queue until it grows past the position",
        "move compaction/position-checkpoint aside with the broker stopped"),
    # -- RocksDB consume queues and metadata (storeType=defaultRocksDB) ---------------------------------
    "rocksdb_cq.unreadable": Code(
        "the consume-queue RocksDB does not open read-only (missing or damaged files)",
        "fails to load its consume queues and does not start",
        "check the files under STORE/consumequeue; restore them from a backup or let a replica rebuild it"),
    "rocksdb_cq.malformed": Code(
        "a key or value of the consume-queue RocksDB does not follow the broker's layout",
        "may fail reading that queue, or serve a wrong unit",
        "rmqctl dump STORE/consumequeue --json to see the entry; the broker re-dispatches only past its checkpoint"),
    "rocksdb_cq.no_checkpoint": Code(
        "units exist but the dispatch checkpoint entry (CHECKPOINT_TOPIC) is missing",
        "re-dispatches the whole commitlog into RocksDB on start",
        "nothing offline: start the broker (rmqctl recover --dry-run STORE shows what it redoes)"),
    "rocksdb_cq.checkpoint_ahead": Code(
        "the dispatch checkpoint is beyond the end of the commitlog",
        "believes messages are dispatched that do not exist; nothing is re-dispatched for them",
        "rmqctl verify STORE --only commitlog to see where the commitlog ends; restore the lost commitlog files"),
    "rocksdb_cq.no_max": Code(
        "a queue has units but no max-offset entry",
        "serves the queue as empty",
        "nothing offline (rmqctl does not write RocksDB); the broker's own dispatch writes the entry anew"),
    "rocksdb_cq.max_offset": Code(
        "a queue's max-offset entry disagrees with its units (missing last unit, another commitlog "
        "offset, or units beyond it)",
        "serves the queue up to the max entry; units beyond it are not served",
        "rmqctl dump STORE/consumequeue --json for that queue; compare with a replica"),
    "rocksdb_cq.gap": Code(
        "a unit is missing between a queue's first unit and its max",
        "serves the queue from after the hole only (its min-offset search skips past it): the units "
        "before the hole are not served either",
        "rmqctl export STORE --unconsumed salvages the messages from the commitlog"),
    "rocksdb_cq.missing": Code(
        "a message below the dispatch checkpoint has no unit in its queue",
        "does not re-dispatch it (it is below the checkpoint): a pull there finds nothing",
        "rmqctl query STORE --topic T --queue Q --offset N --scan reads it from the commitlog; "
        "rmqctl export STORE --unconsumed salvages it"),
    "rocksdb_cq.mismatch": Code(
        "a unit's commitlog offset, size, tagsCode or store time differs from its message",
        "serves what the unit says: a wrong message, a failed read or a wrong tag filter",
        "compare with rmqctl query STORE --offset; rmqctl export STORE --unconsumed salvages from the commitlog"),
    "rocksdb_cq.orphan": Code(
        "units point at no message of their queue (beyond the commitlog end: the broker truncates them)",
        "truncates units beyond the commitlog end on start; others are served and fail to read",
        "start the broker for those beyond the end; otherwise compare with a replica"),
    "rocksdb_cq.behind": Code(
        "messages after the dispatch checkpoint are not in the RocksDB consume queues yet",
        "re-dispatches them from its checkpoint on start",
        _NOTHING),
    "rocksdb_meta.unreadable": Code(
        "a metadata RocksDB (topics, subscription groups, consumer offsets) does not open read-only",
        "fails to load that table",
        "restore the table's RocksDB folder from a backup"),
    "rocksdb_meta.malformed": Code(
        "a metadata RocksDB value is not the JSON the broker writes",
        "skips or fails on that entry",
        "rmqctl config show STORE NAME to see the table"),
    "rocksdb_meta.offset_beyond": Code(
        "a committed consumer offset is beyond its queue's max offset",
        "corrects the offset to the queue's max when the group pulls (messages in between are skipped)",
        "rmqctl config offsets show STORE --group G; nothing offline for RocksDB metadata"),
    # -- DLedger commitlogs (enableDLegerCommitLog=true) ----------------------------------------------
    "dledger.entry": Code(
        "the DLedger entry log ends at an entry that fails DLedger's own checks (position, size, magic, "
        "index +1, terms never decreasing); the finding says what DLedger's recovery will keep and cut",
        "truncates the log there at its next start (the bytes after stay on disk until overwritten); "
        "the messages after are lost",
        "rmqctl recover --dry-run STORE says the same; take the messages from a replica if the cut loses any"),
    "dledger.tail": Code(
        "non-zero bytes after the last valid entry of the log",
        "ignores them and overwrites them with the next appends",
        _NOTHING),
    "dledger.index_unit": Code(
        "an index unit disagrees with the entry it indexes",
        "rewrites the index from the first disagreeing unit at its next start",
        "nothing: the broker repairs it; rmqctl dump the index file to see the units"),
    "dledger.message": Code(
        "a message wrapped in a DLedger entry fails its own checks (body CRC, lengths, physical offset)",
        "serves the damaged message (DLedger 0.3.1.2 writes no entry CRC that would catch it)",
        "rmqctl query STORE --phys-offset N to see it; take the message from a replica"),
    "dledger.cq_unit": Code(
        "a consume-queue unit points at no wrapped message, or disagrees with it",
        "serves what the unit says: a failed read or a wrong message",
        "rmqctl rebuild cq STORE (from the wrapped messages, byte-identical to the broker's)"),
    "dledger.cq_behind": Code(
        "messages of the entry log are not in their consume queue yet",
        "dispatches them at its next start",
        _NOTHING),
    "dledger.checkpoint": Code(
        "the DLedger checkpoint (committed index) is past the log, behind it, or stale",
        "recomputes what it can at start; a committed index past the log means entries were lost",
        "rmqctl dump STORE/dledger-<id>/checkpoint; compare with the other replicas before starting"),
    "dledger.currterm": Code(
        "the current term (currterm) is behind the last entry's term",
        "starts an election with a term lower than its own log's; the group may refuse it as leader",
        "rmqctl dump STORE/dledger-<id>/currterm; check the other replicas' terms"),
    "dledger.file_size": Code(
        "DLedger data or index files are not all of one size",
        "exits at start (a file of the wrong size makes DLedger call System.exit)",
        "find the odd file with rmqctl dump STORE; restore it from a replica"),
    "dledger.file_gap": Code(
        "DLedger data files do not follow each other (a file is missing)",
        "loads them as they are; entries after the gap are not reachable by their index",
        "restore the missing file from a replica"),
}


def describe(code: str) -> Code | None:
    return CODES.get(code)


def man_section() -> str:
    """The FINDING CODES section (roff, unescaped text lines; the caller escapes)."""
    out = [("Every finding names a code (the check field of --json). Codes are stable: scripts and alerts "
           "may match them. For each: what it means; what the broker does with the store as it is; "
           "what to run."), ""]
    for code in sorted(CODES):
        c = CODES[code]
        out += [code, f"    {c.meaning}.", f"    Broker: {c.broker}.", f"    Run: {c.run}.", ""]
    return "\n".join(out).rstrip()
