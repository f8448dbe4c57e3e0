"""Every JSON object rmqctl prints, declared in one place.

The output rule: a command that streams records prints JSON Lines (one object per line); a command
that reports prints one JSON object. Every object starts with `"schema": "rmqctl.<command>/<n>"`,
where <command> is the man page's name without `rmqctl-` (`config-offsets-show`) and <n> grows when
a field changes meaning or goes away (adding a field keeps <n>).

SCHEMAS maps a schema id to a plain dict:

    "command":  the command that prints it ("config offsets show")
    "shape":    "stream" (JSON Lines) or "report" (one object)
    "doc":      one line on what one object is
    "fields":   field name -> field dict, or
    "variants": for streams of several kinds of object: the value of "kind" -> fields

and a field dict is {"type": ..., "doc": ...} plus, when they apply, "optional": True (the field is
left out when it does not apply) and "fields" (the fields of a nested object, or of each object in
an array). Types: string, integer, number, boolean, null, object, array, joined with "|" when a
value may take several (integer|null). rmqctl.manpage renders these as each page's FIELDS section;
tests/test_output_rule.py checks every --json output against them.

To register a new output: add `SCHEMAS["rmqctl.<command>/1"] = {...}` below (or from the command's
own module through `register()`), then print through rmqctl.render.emit_json("<command>", obj).
"""
from __future__ import annotations

TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")


def req(type_: str, doc: str, fields: dict | None = None) -> dict:
    """A field every object of the schema has."""
    d = {"type": type_, "doc": doc}
    if fields is not None:
        d["fields"] = fields
    return d


def opt(type_: str, doc: str, fields: dict | None = None) -> dict:
    """A field present only when it applies."""
    return {**req(type_, doc, fields), "optional": True}


SCHEMA_FIELD = req("string", 'this object\'s schema id, "rmqctl.<command>/<n>"')

# --- shared pieces ---------------------------------------------------------------------------------------

MESSAGE = {
    "schema": SCHEMA_FIELD,
    "kind": req("string", '"message"'),
    "physical_offset": req("integer", "where the record starts in the commitlog (absolute offset)"),
    "size": req("integer", "TOTALSIZE: the record's length in bytes"),
    "magic": req("string", "record layout: V1 or V2 (V2: 2-byte topic length, 5.x)"),
    "topic": req("string", "topic"),
    "queue_id": req("integer", "queue id"),
    "queue_offset": req("integer", "the message's offset in its consume queue"),
    "sys_flag": req("integer", "SYSFLAG bits (compression, transaction type, IPv6 hosts...)"),
    "transaction_type": req("string", "NOT, PREPARED, COMMIT or ROLLBACK (from sys_flag)"),
    "flag": req("integer", "the producer's message flag"),
    "body_crc": req("integer", "BODYCRC as stored"),
    "body_crc_ok": req("boolean|null", "whether the body matches BODYCRC (null: not checked, --no-crc)"),
    "born_timestamp": req("integer", "when the producer created the message (epoch ms)"),
    "born_host": req("string", 'producer address, "a.b.c.d:port" or "[v6]:port"'),
    "store_timestamp": req("integer", "when the broker stored it (epoch ms)"),
    "store_host": req("string", 'broker address, "a.b.c.d:port" or "[v6]:port"'),
    "reconsume_times": req("integer", "redeliveries so far (retry messages)"),
    "prepared_transaction_offset": req("integer", "commitlog offset of the half message (transactions), else 0"),
    "msg_id": req("string", "offsetMsgId: store host, port and offset as upper-case hex"),
    "body_length": req("integer", "body length in bytes (as stored)"),
    "properties": req("object", "message properties, name -> value (KEYS, UNIQ_KEY, TAGS ...)"),
    "physical_offset_field": opt("integer", "PHYSICALOFFSET as stored, when it differs from physical_offset"),
    "property_crc_ok": opt("boolean", "whether the __CRC32# property matches (only when present)"),
    "body_encoding": opt("string", "text, hex or base64: how body is written (absent with --body none)"),
    "body": opt("string", "the body in body_encoding (absent with --body none)"),
    "body_compression": opt("string", "compressed bodies (SYSFLAG 0x1) only: zlib, lz4, zstd or unknown(N) (the "
                                      "compression type bits of SYSFLAG)"),
    "body_decompressed": opt("boolean", "compressed bodies only: whether body is the decompressed body (false: "
                                        "shown as stored, body_note says why)"),
    "body_decompressed_length": opt("integer", "compressed bodies decompressed: the decompressed length in bytes"),
    "body_note": opt("string", "compressed bodies that could not be decompressed: why (unknown type, corrupt "
                               "stream); the body is shown as stored"),
}

PROBLEM = {
    "offset": req("integer", "first bad offset"),
    "check": req("string", "what failed (bad_magic, bad_size, bad_body_crc, invalid_unit ...)"),
    "detail": req("string", "explanation"),
    "field": req("string", "the record field at fault (empty when none)"),
}

TRAILER = {
    "schema": SCHEMA_FIELD,
    "kind": req("string", '"trailer": the last object of every file'),
    "file": req("string", "the file"),
    "valid_bytes": req("integer", "length of the valid prefix (records/units) in bytes"),
    "trailing": req("string", "what follows it: none, zeros, blank (a BLANK record), end_filler (a closing end "
                              "unit, or an ext file's end marker) or invalid"),
    "trailing_bytes": req("integer", "bytes after the valid prefix"),
    "records_end": opt("integer", "commitlog: absolute offset where the records end"),
    "stop": opt("string", "commitlog: why the walk stopped (zeros, blank, bad_magic, bad_body_crc ...)"),
    "blank_size": opt("integer", "size field of the BLANK record that ends the file"),
    "units": opt("integer", "queue, timerlog and ext files: valid units"),
    "items": opt("integer", "index: items in use"),
    "slots": opt("integer", "timerwheel: slots in the file"),
    "end_unit_at": opt("integer", "compaction CQ: where the end unit the broker writes to close a file starts "
                                  "(trailing end_filler)"),
    "invalid_from": opt("integer", "first non-zero byte after the valid prefix"),
    "invalid_to": opt("integer", "end of the last non-zero byte after the valid prefix"),
    "note": opt("string", "something unusual but not damage (a short file, an odd BLANK size)"),
    "problem": opt("object", "damage: the first bad offset and why (the command exits 4)", PROBLEM),
}


def _unit(kind: str, doc: str, **fields) -> dict:
    return {"schema": SCHEMA_FIELD, "kind": req("string", f'"{kind}": {doc}'), **fields}


def _i(doc: str) -> dict:
    return req("integer", doc)


CQ_FIELDS = {"unit": _i("unit number in the file"),
             "logical_offset": _i("the unit's queue offset (file start / unit size + unit)"),
             "physical_offset": _i("commitlog offset of the message"), "size": _i("message size")}

STORE_SUMMARY = {
    "schema": SCHEMA_FIELD,
    "kind": req("string", '"store": a whole store at a glance (dump STORE)'),
    "root": req("string", "the store directory"),
    "engine": req("string", 'where the consume queues live: "file" or "rocksdb" (storeType=defaultRocksDB)'),
    "unsupported": opt("array", "why rmqctl cannot read this store type (DLedger, multi-path commitlog ...)"),
    "rocksdb": opt("object", "storeType=defaultRocksDB: the RocksDB consume queues and metadata", {
        "consume_queues": opt("object", "store/consumequeue/ (path, rocksdb_version as its OPTIONS file names it, "
                                        "column_families, queues, dispatched_up_to: the commitlog offset the "
                                        "dispatch checkpoint entry records, malformed_entries)"),
        "metadata": opt("object", "config/{topics,subscriptionGroups,consumerOffsets}/: table -> {entries, "
                                  "data_version, rocksdb_version, problems}")}),
    "commitlog": req("object", "commitlog files", {
        "files": _i("number of files"), "file_size": _i("configured file size"),
        "sizes_on_disk": req("array", "distinct file sizes found"), "bytes": _i("bytes on disk"),
        "min_offset": _i("first offset held"), "max_offset": _i("end of the valid records"),
        "last_file_ends_with": req("string", "how the last file's records end (zeros, blank, bad_magic ...)"),
        "first_file": req("string|null", "first file name"), "last_file": req("string|null", "last file name"),
        "gaps": req("array", "[from, to] ranges no file covers"),
        "strays": req("array", "entries in commitlog/ that are not commitlog files")}),
    "consume_queues": req("array", "one object per consume queue", {
        "topic": req("string", "topic"), "queue_id": _i("queue id"), "files": _i("files (0: RocksDB queues)"),
        "min_offset": _i("first queue offset"), "max_offset": _i("next queue offset")}),
    "topics": req("array", "topic names with consume queues"),
    "batchconsumequeue": opt("array", "TOPIC/QUEUE of batch consume queues"),
    "consumequeue_ext": opt("array", "TOPIC/QUEUE of consume queue extensions"),
    "index": req("object", "index files", {
        "files": req("array", "file names"), "hash_slot_num": _i("hash slots per file"),
        "index_num": _i("items per file"), "file_size": _i("expected file size")}),
    "checkpoint": req("object|null", "the checkpoint's fields (null: missing)"),
    "abort": req("boolean", "abort file present (the next start runs abnormal recovery)"),
    "lock": req("string", "lock state: held, free or missing"),
    "next_start": req("string", "the recovery the broker runs on its next start"),
    "config": req("array", "config/*.json", {
        "file": req("string", "file name"), "main": req("string", "main copy's state"),
        "bak": req("string", ".bak copy's state"), "broker_would": req("string", "what the broker would load")}),
    "other": opt("object", "timer, compaction and other directories: name -> {files, bytes}"),
    "compaction": opt("object", "compaction topics (5.x): the compaction store's queues", {
        "cq_file_size": _i("compaction CQ file size used (compactionCqMappedFileSize)"),
        "log_file_size": _i("compaction log file size used (compactionMappedFileSize)"),
        "topics": req("array|null", "COMPACTION topics of config/topics.json (null: no topics.json)"),
        "queues": req("array", "one object per compaction queue", {
            "topic": req("string", "topic"), "queue_id": _i("queue id"),
            "log_files": req("array", "compactionLog file names"), "cq_files": req("array", "compactionCq file names"),
            "units": _i("valid CQ units"), "min_offset": _i("first queue offset held"),
            "max_offset": req("integer|null", "next queue offset (null: the broker does not load the queue)"),
            "position": req("integer|null", "compaction/position-checkpoint's position (null: none)"),
            "broker_load": req("string", "what the broker's load does: loads; loads, deletes FILES; not loaded; "
                                         "FAILS (the broker does not start)"),
            "why": opt("string", "why the queue is not loaded as it is")})}),
    "not_followed": opt("array", "links out of the store or special files, not read"),
}

DLEDGER_DUMP = {
    "dledger_store": _unit("dledger_store", "a DLedger commitlog store at a glance (dump STORE)",
                           root=req("string", "the store directory"),
                           engine=req("string", "the commitlog engine"),
                           engine_evidence=req("string", "what on disk tells the engine and its version"),
                           self_id=req("string", "the DLedger member id (dledger-<id>/)"),
                           data_files=req("array", "data file names"), data_file_size=_i("data file size"),
                           index_files=req("array", "index file names"), index_file_size=_i("index file size"),
                           entries=_i("valid entries"), first_index=_i("first entry index (-1: none)"),
                           last_index=_i("last entry index (-1: none)"), terms=req("array", "terms of the entries"),
                           data_end=_i("where the entries end (DLedger's recovery keeps data up to here)"),
                           log_ends_with=req("string", "why the entry walk ended (end, files, or a failed check)"),
                           checkpoint=req("object|null", "dledger checkpoint properties (endIndex, committedIndex)"),
                           currterm=req("object|null", "currterm properties (currTerm, voteLeader)"),
                           consume_queues=req("array", "one object per consume queue", {
                               "topic": req("string", "topic"), "queue_id": _i("queue id"),
                               "max_offset": _i("next queue offset")}),
                           index=req("array", "index/ file names"),
                           abort=req("boolean", "abort file present"), lock=req("string", "lock state")),
    "dledger_entry": _unit("dledger_entry", "a DLedger entry header (data file)",
                           position=_i("absolute position in the data log"), magic=_i("entry magic (1)"),
                           size=_i("entry size"), index=_i("entry index"), term=_i("entry term"),
                           pos=_i("pos field as stored"), channel=_i("reserved"), chain_crc=_i("reserved (0)"),
                           body_crc=_i("reserved (0)"), body_length=_i("body length"),
                           message_offset=_i("the wrapped message's physical offset (pos + 48)")),
    "dledger_index_unit": _unit("dledger_index_unit", "a DLedger index unit", unit=_i("unit number (= entry index)"),
                                magic=_i("magic"), pos=_i("entry position"), size=_i("entry size"),
                                index=_i("entry index"), term=_i("entry term")),
    "dledger_properties": _unit("dledger_properties", "dledger checkpoint or currterm file",
                                file=req("string", "file name"), properties=req("object", "key -> value")),
}

DUMP_VARIANTS = {
    "rocksdb_cq_unit": _unit("rocksdb_cq_unit", "a unit of the consume-queue RocksDB (default column family)",
                             topic=req("string", "topic"), queue_id=_i("queue id"),
                             queue_offset=_i("the unit's queue offset"),
                             physical_offset=_i("commitlog offset of the message"), size=_i("message size"),
                             tags_code=_i("tag hash code"), store_timestamp=_i("store time (epoch ms)")),
    "rocksdb_cq_offset": _unit("rocksdb_cq_offset", "a min/max entry of the offset column family",
                               topic=req("string", "topic"), queue_id=_i("queue id"),
                               entry=req("string", '"max" (the last unit) or "min" (the first)'),
                               physical_offset=_i("commitlog offset of that unit"),
                               queue_offset=_i("queue offset of that unit (the queue's max offset is max + 1)")),
    "rocksdb_checkpoint": _unit("rocksdb_checkpoint", "the dispatch checkpoint entry (CHECKPOINT_TOPIC)",
                                dispatched_up_to=_i("commitlog offset up to which messages were dispatched")),
    "rocksdb_metadata": _unit("rocksdb_metadata", "one entry of a metadata RocksDB (config/<table>/)",
                              table=req("string", "topics, subscriptionGroups or consumerOffsets"),
                              column_family=req("string", "default, kvDataVersion or forbidden"),
                              key=req("string", "topic, group or topic@group"),
                              value=req("object|string", "the JSON document (a string if it is not JSON)")),
    "rocksdb_malformed": _unit("rocksdb_malformed", "a key or value that does not follow the broker's layout",
                               column_family=req("string", "column family"), key=req("string", "the key, hex"),
                               problem=req("string", "what is wrong")),
    **DLEDGER_DUMP,
    "message": MESSAGE,
    "trailer": TRAILER,
    "store": STORE_SUMMARY,
    "cq_unit": _unit("cq_unit", "a consume queue unit", **CQ_FIELDS,
                     tags_code=_i("tag hash code (or an ext address)"),
                     pre_blank=opt("boolean", "a pre-blank filler unit (the queue starts later)"),
                     ext_address=opt("integer", "offset in consumequeue_ext when tags_code is an ext address")),
    "bcq_unit": _unit("bcq_unit", "a batch consume queue unit", **CQ_FIELDS,
                      tags_code=_i("tag hash code"), store_timestamp=_i("store time (epoch ms)"),
                      msg_base_offset=_i("queue offset of the batch's first message"),
                      batch_size=_i("messages in the batch"), compacted_offset=_i("compacted offset"),
                      reserved=_i("reserved")),
    "compaction_cq_unit": _unit("compaction_cq_unit", "a compaction CQ unit (compaction/compactionCq; the file "
                                "is named after its log file)",
                                unit=_i("unit number in the file"),
                                logical_offset=_i("the unit's queue offset (= msg_base_offset)"),
                                physical_offset=_i("offset of the record in the compaction log"),
                                size=_i("record size"), tags_code=_i("tag hash code"),
                                store_timestamp=_i("store time (epoch ms)"),
                                msg_base_offset=_i("queue offset of the record"),
                                batch_size=_i("messages in the unit (1)"), compacted_offset=_i("compacted offset"),
                                reserved=_i("reserved")),
    "cq_ext_unit": _unit("cq_ext_unit", "a consume queue extension unit",
                         position=_i("byte position in the file"), size=_i("unit size"),
                         tags_code=_i("tag hash code"), msg_store_time=_i("store time (epoch ms)"),
                         bit_map_size=_i("filter bitmap length"),
                         filter_bit_map=req("string", "filter bitmap, hex")),
    "index_header": _unit("index_header", "the index file header",
                          begin_timestamp=_i("first message's store time"),
                          end_timestamp=_i("last message's store time"),
                          begin_phy_offset=_i("first message's commitlog offset"),
                          end_phy_offset=_i("last message's commitlog offset"),
                          hash_slot_count=_i("slots in use (as counted by the writer)"),
                          index_count=_i("next item number (items in use + 1)"),
                          file_size=_i("file size"), expected_size=_i("size for these slot/item numbers"),
                          hash_slot_num=_i("hash slots assumed"), index_num=_i("items assumed")),
    "index_slot": _unit("index_slot", "a non-empty hash slot (--slots)", slot=_i("slot number"),
                        item=_i("the slot's newest item")),
    "index_item": _unit("index_item", "an index item", item=_i("item number"), key_hash=_i("key hash"),
                        phy_offset=_i("message's commitlog offset"),
                        time_diff=_i("seconds after begin_timestamp"), pre_index_no=_i("previous item in the chain"),
                        slot=_i("slot the hash maps to")),
    "timerlog_unit": _unit("timerlog_unit", "a timerlog unit", unit=_i("unit number"),
                           position=_i("timerlog offset (what wheel slots and prev_pos hold)"),
                           size=_i("unit size"), prev_pos=_i("previous unit of the same slot"),
                           magic=_i("magic"), curr_write_time_ms=_i("write time (epoch ms)"),
                           delayed_time=_i("when it fires (epoch ms)"),
                           commitlog_offset=_i("message's commitlog offset"),
                           commitlog_size=_i("message size"), real_topic_hash=_i("real topic's hash"),
                           reserved=_i("reserved")),
    "timerwheel_slot": _unit("timerwheel_slot", "a timer wheel slot in use", slot=_i("slot number"),
                             time_secs=_i("slot time (s)"), first_pos=_i("first timerlog unit"),
                             last_pos=_i("last timerlog unit"), num=_i("units"), magic=_i("magic")),
    "checkpoint": _unit("checkpoint", "the checkpoint file", file_size=_i("file size"),
                        physic_msg_timestamp=_i("commitlog flushed up to (epoch ms)"),
                        logics_msg_timestamp=_i("consume queues flushed up to (epoch ms)"),
                        index_msg_timestamp=_i("index flushed up to (epoch ms)"),
                        master_flushed_offset=_i("5.0+: master flushed offset"),
                        confirm_phy_offset=_i("5.1.1+: confirmed offset"),
                        generation=req("string", "which layout the non-zero fields show"),
                        min_timestamp=_i("the broker's getMinTimestamp()"),
                        min_timestamp_index=_i("the broker's getMinTimestampIndex()")),
    "timercheck": _unit("timercheck", "the timer checkpoint", file_size=_i("file size"),
                        last_read_time_ms=_i("last read time (epoch ms)"),
                        last_timer_log_flush_pos=_i("timerlog flushed up to"),
                        last_timer_queue_offset=_i("timer queue offset read up to"),
                        master_timer_queue_offset=_i("master's timer queue offset"),
                        data_version_state_version=_i("dataVersion.stateVersion"),
                        data_version_timestamp=_i("dataVersion.timestamp"),
                        data_version_counter=_i("dataVersion.counter")),
    "abort": _unit("abort", "the abort file", file_size=_i("file size"),
                   pid=req("integer|null", "process id written in it (null: none)"),
                   content=req("string", "content"), meaning=req("string", "what it means for the next start")),
    "lock": _unit("lock", "the lock file", file_size=_i("file size"), content=req("string", "content"),
                  state=req("string", "held (a running broker), free or missing")),
    "config": _unit("config", "a config/*.json file", file=req("string", "the file"),
                    used=req("string|null", "the copy the broker would load: main, .bak or null"),
                    verdict=req("string", "what the broker would do with it"),
                    main=req("string", "main copy's state"), bak=req("string", ".bak copy's state"),
                    notes=req("array", "remarks (strings)"),
                    content=req("object|array|string|integer|number|boolean|null", "the loaded document")),
}

COPY = {
    "path": req("string", "the copy's path"), "status": req("string", "ok, missing, unreadable, bad ..."),
    "size": req("integer|null", "bytes"), "description": req("string", "status in words"),
    "error": opt("string", "why it cannot be read"),
    "stale_tail": opt("object", "bytes after the JSON value: {value_end, trailing_bytes}"),
    "meaning": opt("object", "what the broker's decode() makes of it: decode_error, entries, missing_tables, "
                             "null_tables, unknown_keys, warnings"),
}

LOADED = {
    "schema": SCHEMA_FIELD,
    "file": req("string", "config name (topics, consumerOffset ...)"),
    "path": req("string", "main file path"),
    "used": req("string|null", "the copy the broker would load: main, .bak or null"),
    "verdict": req("string", "what the broker would do"),
    "main": req("object", "the main copy", COPY),
    "bak": req("object", "the .bak copy", COPY),
    "notes": req("array", "remarks (strings)"),
    "problem": opt("string", "why the broker would not load main (when it would not)"),
}

EDIT = {
    "schema": SCHEMA_FIELD,
    "file": req("string", "config name (topics, consumerOffset ...)"),
    "path": req("string", "the file written (or that would be)"),
    "changes": req("array", "what changed, one sentence each"),
    "changed": req("boolean", "the content differs from before"),
    "written": req("boolean", "the file was written"),
    "dry_run": req("boolean", "--dry-run: nothing written"),
    "journal": req("string|null", "quarantine journal of the write (undo with rmqctl undo --op)"),
    "diff": req("string", "unified diff old -> new"),
    "bak_updated": req("boolean", "the previous content was rotated to .bak"),
    "bak_note": req("string|null", "why .bak was kept as it was"),
}

ACTION = {
    "step": _i("1-based step number"), "kind": req("string", "write_range, write_file, truncate, delete ..."),
    "group": req("string", "what the step belongs to (commitlog, a queue, index, checkpoint ...)"),
    "path": req("string", "file, relative to the store"),
    "offset": opt("integer", "where the write starts"), "length": opt("integer", "bytes written or cut"),
    "why": req("string", "reason"),
}

PLAN = {
    "schema": SCHEMA_FIELD,
    "store": req("string", "the store"),
    "abort": req("boolean", "abort file present"),
    "broker": req("object", "what the broker would do on its next start (recovery, start_file, valid_end, stop, "
                            "confirm_offset, files it would delete or truncate); empty for rebuild"),
    "commitlog": req("object", "the commitlog scan: scan_start, valid_end, last_valid, stop"),
    "actions": req("array", "the planned (or done) steps, in order", ACTION),
    "problems": req("array", "what rmqctl will not fix by itself (strings); non-empty: exit 4, nothing changed"),
    "notes": req("array", "remarks (strings)"),
    "summary": req("object", "counts (valid_end, queues_changed, units_added, index_items ...)"),
    "topics": opt("object", "rebuild: the topics.json filter (checked_against, why, skipped)"),
    "timer": opt("object", "recover: config/timercheck bounds"),
    "dry_run": opt("boolean", "--dry-run: true"),
    "rolled_back_first": opt("string", "interrupted operations rolled back before this one"),
    "applied": opt("boolean", "a real run: whether anything was changed"),
    "journal": opt("string", "a real run that changed the store: the quarantine journal folder"),
    "undo": opt("string", "a real run that changed the store: the command that undoes it"),
}

SIDE = {"store": req("string", "the store"), "min_offset": _i("first commitlog offset"),
        "max_offset": _i("end of the valid records"), "bytes": _i("max_offset - min_offset"),
        "file_size": _i("commitlog file size"), "files": _i("commitlog files"),
        "confirm_offset": req("integer|null", "checkpoint confirmPhyOffset (null: no checkpoint)")}

STATS_BASE = {
    "store": req("string", "store name"), "topic": req("string", "topic"),
    "messages": _i("messages"), "bytes": _i("bytes of their records"),
    "first_store_timestamp": req("integer|null", "first store time (epoch ms)"),
    "last_store_timestamp": req("integer|null", "last store time (epoch ms)"),
    "min_size": req("integer|null", "smallest record"), "max_size": req("integer|null", "largest record"),
    "avg_size": req("number|null", "mean record size"),
    "distinct_keys": req("integer|null", "distinct KEYS (HyperLogLog estimate)"),
    "distinct_uniq_keys": req("integer|null", "distinct UNIQ_KEY (HyperLogLog estimate)"),
    "size_histogram": req("object", "record count per size bucket"),
}

# --- the schemas -----------------------------------------------------------------------------------------

SCHEMAS: dict[str, dict] = {
    "rmqctl.dump/1": {
        "command": "dump", "shape": "stream",
        "doc": 'one object per record or unit, "kind" telling which; every file ends with a "trailer"',
        "variants": DUMP_VARIANTS,
    },
    "rmqctl.query/1": {
        "command": "query", "shape": "stream", "doc": "one object per message found (the fields of dump's messages)",
        "fields": MESSAGE,
    },
    "rmqctl.verify/1": {
        "command": "verify", "shape": "report", "doc": "the verify report",
        "fields": {
            "schema": SCHEMA_FIELD,
            "store": req("string", "what was checked (store or file)"),
            "clean": req("boolean", "no errors or warnings"),
            "counts": req("object", "findings per severity", {
                "error": _i("errors"), "warning": _i("warnings"), "info": _i("notes")}),
            "stats": req("object", "messages, bytes, commitlog_files, commitlog_min_offset, commitlog_end, queues, "
                                   "index_files, recovery (the predicted recovery), seconds"),
            "findings": req("array", "one object per finding, errors first", {
                "severity": req("string", "error, warning or info"),
                "check": req("string", "the finding's code (see DESCRIPTION)"),
                "path": req("string", "file"), "offset": req("integer|null", "where in the file"),
                "expected": req("string|integer|null", "what was expected"),
                "actual": req("string|integer|null", "what was found"),
                "message": req("string", "explanation")}),
        },
    },
    "rmqctl.recover/1": {"command": "recover", "shape": "report", "doc": "the recovery plan and outcome",
                         "fields": PLAN},
    "rmqctl.rebuild/1": {"command": "rebuild", "shape": "report", "doc": "the rebuild plan and outcome",
                         "fields": PLAN},
    "rmqctl.undo/1": {
        "command": "undo", "shape": "report", "doc": "what undo restored (or would)",
        "fields": {
            "schema": SCHEMA_FIELD, "op": req("string", "the operation's journal folder"),
            "already_undone": req("boolean", "it was undone before: nothing to do"),
            "dry_run": req("boolean", "--dry-run: nothing changed"),
            "steps": req("array", "one object per journal entry, in restore order", {
                "path": req("string", "file, relative to the store"), "kind": req("string", "journal entry kind"),
                "action": req("string", "restore, skip (already as saved) or conflict (changed since)"),
                "reason": req("string|null", "why skipped or in conflict")}),
        },
    },
    "rmqctl.undo-list/1": {
        "command": "undo", "shape": "stream", "doc": "undo --list: one object per journaled operation",
        "fields": {
            "schema": SCHEMA_FIELD, "op": req("string", "journal folder name (give it to --op)"),
            "name": req("string", "operation (recover, rebuild-cq, offsets-reset ...)"),
            "state": req("string", "open, committed, aborted, undone ..."),
            "actions": _i("journal entries"), "begun": req("string|null", "start time (UTC)"),
        },
    },
    "rmqctl.diff/1": {
        "command": "diff", "shape": "report", "doc": "the comparison of two replicas",
        "fields": {
            "schema": SCHEMA_FIELD,
            "verdict": req("string", "identical, a_prefix, b_prefix, diverged or disjoint"),
            "verdict_line": req("string", "the verdict in words"),
            "a": req("object", "replica A", SIDE), "b": req("object", "replica B", SIDE),
            "common_prefix_end": _i("end of the longest common commitlog prefix"),
            "ahead": req("object|null", "the longer replica when one is a prefix: side, messages, bytes"),
            "first_divergent": req("object|null", "diverged: the first differing record on each side (a, b) "
                                                  "and the bytes after the common prefix"),
            "queues": req("array", "every consume queue of either side", {
                "topic": req("string", "topic"), "queue_id": _i("queue id"),
                "a_max": req("integer|null", "max offset in A (null: absent)"),
                "b_max": req("integer|null", "max offset in B (null: absent)")}),
            "consumer_offsets": req("array", "committed offsets that differ", {
                "group": req("string", "group"), "topic": req("string", "topic"), "queue_id": _i("queue id"),
                "a": req("integer|null", "offset in A"), "b": req("integer|null", "offset in B")}),
            "topics": req("object", "topics.json differences", {
                "only_a": req("array", "topics only in A"), "only_b": req("array", "topics only in B"),
                "changed": req("array", "topics configured differently")}),
            "ha": req("string", "what the broker's HA would do"),
            "notes": req("array", "remarks (strings)"),
            "stats": req("object", "work done", {"probes": _i("file probes"),
                                                 "bytes_compared": _i("bytes compared")}),
        },
    },
    "rmqctl.reclaim/1": {
        "command": "reclaim", "shape": "report", "doc": "the reclaim plan and outcome",
        "fields": {
            "schema": SCHEMA_FIELD, "store": req("string", "the store"),
            "file_reserved_hours": _i("fileReservedTime used"),
            "min_offset_before": _i("commitlog min offset now"), "min_offset_after": _i("min offset after"),
            "max_offset": _i("commitlog max offset"), "bytes_freed": _i("bytes the plan frees"),
            "files": req("array", "files to reclaim", {
                "kind": req("string", "commitlog, consumequeue or index"),
                "path": req("string", "file, relative to the store"), "bytes": _i("size"),
                "reason": req("string", "why it may go")}),
            "commitlog_stopped_by": req("string|null", "what keeps the next commitlog file"),
            "blocking_groups": req("object", "group -> first unconsumed offset that blocks"),
            "forced_groups": req("array", "groups given with --force-unconsumed"),
            "group_losses": req("object", "group -> per queue unconsumed messages lost (or lost if forced)"),
            "min_offset_if_forced": _i("min offset if every blocking group were forced"),
            "notes": req("array", "remarks (strings)"),
            "applied": req("boolean", "files were moved or deleted"),
            "apply_with": opt("string|null", "plan only: the option that applies it"),
            "journal": opt("string", "applied: the quarantine journal folder"),
            "undo": opt("string", "applied with --move-to: the command that undoes it"),
            "moved_to": opt("string", "applied with --move-to: the directory"),
            "deleted_without_copy": opt("boolean", "applied with --delete: true"),
            "rolled_back_first": opt("string", "interrupted operations rolled back before this one"),
        },
    },
    "rmqctl.stats/1": {
        "command": "stats", "shape": "report", "doc": "statistics over one or more stores",
        "fields": {
            "schema": SCHEMA_FIELD, "stores": req("array", "store names"),
            "totals": req("object", "messages, bytes, topics, queues over every store"),
            "topics": req("array", "per store and topic", {**STATS_BASE, "queues": _i("queues")}),
            "queues": req("array", "per store, topic and queue", {
                **STATS_BASE, "queue_id": _i("queue id"), "max_offset": req("integer|null", "next queue offset"),
                "peak_per_minute": _i("most messages stored in one minute"),
                "multi_dispatched_units": opt("integer", "units dispatched to other queues (LMQ)")}),
            "rate": req("object", "messages per time bucket per topic: bucket_ms, unit, per_minute_divisor, series"),
            "consumer_lag": req("array", "per group, topic and queue (config/consumerOffset.json)", {
                "store": req("string", "store name"), "group": req("string", "group"),
                "topic": req("string", "topic"), "queue_id": _i("queue id"),
                "consumer_offset": _i("committed offset"), "max_offset": req("integer|null", "queue max offset"),
                "lag": req("integer|null", "messages not consumed")}),
            "scan": req("object", "the scan: bytes, splits, runs, stops (where each store's commitlog ends)"),
        },
    },
    "rmqctl.export/1": {
        "command": "export", "shape": "report", "doc": "what was exported",
        "fields": {"schema": SCHEMA_FIELD, "out": req("string", "output directory"),
                   "format": req("string", "parquet or jsonl"), "messages": _i("messages written"),
                   "files": _i("files written")},
    },
    "rmqctl.export-schema/1": {
        "command": "export", "shape": "report",
        "doc": "export --schema: the messages schema of export, read_commitlog and the rocketmq data source",
        "fields": {"schema": SCHEMA_FIELD, "version": _i("messages schema version"),
                   "columns": req("array", "the columns in order", {
                       "name": req("string", "column name"), "type": req("string", "Spark SQL type"),
                       "nullable": req("boolean", "may be null"),
                       "body_only": req("boolean", "present only with bodies"),
                       "since_version": _i("schema version that added it"), "doc": req("string", "meaning")}),
                   "export_layout": req("object", "default_partition_by, partition_columns, derived, style, "
                                                  "metadata_file")},
    },
    "rmqctl.export-unconsumed/1": {
        "command": "export", "shape": "report",
        "doc": "export --unconsumed: what was salvaged, per consumer group and queue",
        "fields": {"schema": SCHEMA_FIELD, "out": req("string", "output directory"),
                   "format": req("string", "parquet or jsonl"), "messages": _i("rows written"),
                   "queues": req("array", "one object per group, topic and queue", {
                       "group": req("string", "consumer group"), "topic": req("string", "topic (retry topics too)"),
                       "queue_id": _i("queue id"),
                       "committed": req("integer|null", "the group's committed offset (null: none)"),
                       "start": req("integer|null", "first queue offset exported (null: skipped)"),
                       "max_offset": req("integer|null", "the queue's max offset (next offset to be written)"),
                       "rows": _i("rows written"), "from_consume_queue": _i("rows found through the consume queue"),
                       "from_commitlog": _i("rows found by the commitlog's QUEUEOFFSET (consume queue damaged or "
                                            "missing)"),
                       "not_placed": _i("offsets in [start, max) found nowhere (exit 4)"),
                       "reasons": req("array", "why offsets could not be placed (strings)")}),
                   "notes": req("array", "remarks (strings)"), "files": _i("files written")},
    },
    "rmqctl.replay/1": {
        "command": "replay", "shape": "report", "doc": "what replay sent (or would send, --dry-run)",
        "fields": {"schema": SCHEMA_FIELD, "rows": _i("rows read"),
                   "sent": _i("messages sent (with --dry-run: that would be sent)"),
                   "failed": _i("messages the proxy did not accept (exit 4)"),
                   "already_sent": _i("skipped: the resume file shows them sent"),
                   "in_doubt_resent": _i("messages in doubt from a killed run, sent again"),
                   "in_doubt_skipped": _i("messages in doubt left out (--in-doubt skip)"),
                   "duplicate_rows": _i("rows of a message already sent for another group"),
                   "not_sent": req("object", "reason -> rows left out on purpose (scheduled, PREPARED, ROLLBACK ...)"),
                   "failures": req("array", "the first failures, \"where: why\" (strings)"),
                   "dry_run": req("boolean", "--dry-run: nothing sent")},
    },
    "rmqctl.quarantine-list/1": {
        "command": "quarantine list", "shape": "stream", "doc": "one object per quarantine journal",
        "fields": {"schema": SCHEMA_FIELD, "name": req("string", "journal folder name (give it to undo --op)"),
                   "op": req("string", "operation (recover, rebuild-cq, offsets-reset ...)"),
                   "state": req("string", "committed, undone, open, aborted or undo-in-progress"),
                   "begun": req("string", "start time, ISO 8601 (empty when unknown)"),
                   "begun_ms": req("integer|null", "start time (epoch ms; null when unknown)"),
                   "actions": req("object", "journal entry kind -> count"),
                   "files": _i("files in the folder"), "bytes": _i("apparent size of those files"),
                   "disk_bytes": _i("bytes the folder allocates"),
                   "linked_files": _i("saved files whose inode has other links"),
                   "linked_bytes": _i("bytes of those files"), "max_links": _i("most links of one saved file"),
                   "frees_bytes": _i("allocated bytes only this journal holds (freed by removing it)")},
    },
    "rmqctl.quarantine-prune/1": {
        "command": "quarantine prune", "shape": "report", "doc": "the journals removed (or that would be)",
        "fields": {"schema": SCHEMA_FIELD, "dry_run": req("boolean", "--dry-run: nothing removed"),
                   "removed": req("array", "journal names removed (or that would be)"),
                   "kept": req("array", "journals kept", {
                       "name": req("string", "journal name"), "state": req("string", "its state"),
                       "why": req("string", "why it is kept")}),
                   "leftovers": req("array", "folders of an interrupted prune, removed"),
                   "frees_bytes": _i("bytes freed (or that would be)")},
    },
    "rmqctl.config-status/1": {"command": "config status", "shape": "stream",
                               "doc": "one object per config file: which copy the broker would load", "fields": LOADED},
    "rmqctl.config-show/1": {"command": "config show", "shape": "report", "doc": "a config file and its content",
                             "fields": {**LOADED, "content": req("object|array|null", "the loaded document")}},
    "rmqctl.config-get/1": {
        "command": "config get", "shape": "report", "doc": "one value of a config file",
        "fields": {"schema": SCHEMA_FIELD, "file": req("string", "config name"),
                   "path": req("string", "the file read"), "key": req("string", "the PATH asked for"),
                   "value": req("object|array|string|integer|number|boolean|null", "the value")},
    },
    "rmqctl.config-diff/1": {
        "command": "config diff", "shape": "report", "doc": "two copies of a config file compared",
        "fields": {"schema": SCHEMA_FIELD, "a": req("string", "first file"), "b": req("string", "second file"),
                   "identical": req("boolean", "same bytes"), "same_content": req("boolean", "same parsed content"),
                   "layout_only": req("boolean", "same content, different layout"),
                   "diff": req("string", "unified diff (empty when same content)")},
    },
    "rmqctl.config-restore/1": {
        "command": "config restore", "shape": "report", "doc": "main restored from .bak",
        "fields": {"schema": SCHEMA_FIELD, "path": req("string", "main file"),
                   "changed": req("boolean", "main differs from .bak"), "written": req("boolean", "main was written"),
                   "journal": req("string|null", "quarantine journal (undo with rmqctl undo --op)"),
                   "diff": req("string", "unified diff main -> .bak")},
    },
    "rmqctl.config-offsets-show/1": {
        "command": "config offsets show", "shape": "stream", "doc": "one object per group, topic and queue",
        "fields": {"schema": SCHEMA_FIELD, "group": req("string", "group"), "topic": req("string", "topic"),
                   "queue": _i("queue id"), "offset": _i("committed offset"),
                   "min": req("integer|null", "queue min offset (null: no consume queue)"),
                   "max": req("integer|null", "queue max offset"), "lag": req("integer|null", "max - offset")},
    },
    "rmqctl.config-topics-list/1": {
        "command": "config topics list", "shape": "stream", "doc": "one object per topic of topics.json",
        "fields": {"schema": SCHEMA_FIELD, "topic": req("string", "topic"),
                   "readQueueNums": req("integer|null", "read queues"),
                   "writeQueueNums": req("integer|null", "write queues"),
                   "perm": req("integer|null", "permission bits (4 read, 2 write, 1 inherit)"),
                   "order": req("boolean|null", "ordered topic"), "topicSysFlag": req("integer|null", "system flag"),
                   "attributes": req("object", "5.x attributes")},
    },
    "rmqctl.config-groups-list/1": {
        "command": "config groups list", "shape": "stream", "doc": "one object per subscription group",
        "fields": {"schema": SCHEMA_FIELD, "group": req("string", "group"),
                   **{k: req(t + "|null", d) for k, t, d in (
                       ("retryMaxTimes", "integer", "redeliveries before the DLQ"),
                       ("retryQueueNums", "integer", "retry queues"),
                       ("consumeBroadcastEnable", "boolean", "broadcast consumption"),
                       ("consumeEnable", "boolean", "consumption allowed"),
                       ("consumeFromMinEnable", "boolean", "start from the min offset"),
                       ("consumeMessageOrderly", "boolean", "orderly consumption"),
                       ("brokerId", "integer", "broker to consume from"))}},
    },
    "rmqctl.config-delay-show/1": {
        "command": "config delay show", "shape": "stream", "doc": "one object per delay level",
        "fields": {"schema": SCHEMA_FIELD, "level": _i("delay level (1-based)"),
                   "delay": req("string|null", "the level's delay as configured (1s, 5m, 2h ...; null: a level "
                                               "beyond messageDelayLevel)"),
                   "delay_ms": req("integer|null", "the level's delay in ms"),
                   "queue": _i("SCHEDULE_TOPIC_XXXX queue (level - 1)"),
                   "offset": req("integer|null", "delayOffset.json's offset (null: no entry, the broker starts at 0)"),
                   "min": req("integer|null", "the schedule queue's min offset (null: no consume queue)"),
                   "max": req("integer|null", "the schedule queue's max offset (null: no consume queue)"),
                   "start": req("integer|null", "where the broker resumes delivery: offset clamped to [min, max]"),
                   "pending": _i("messages still to deliver (max - start)"),
                   "earliest_due_ms": req("integer|null", "when the first pending message falls due (epoch ms)"),
                   "latest_due_ms": req("integer|null", "when the last pending message falls due (epoch ms)")},
    },
}

for _cmd in ("config set", "config delete", "config offsets set", "config offsets reset", "config offsets clone",
             "config topics create", "config topics update", "config topics delete", "config groups create",
             "config groups update", "config groups delete", "config delay set"):
    SCHEMAS[f"rmqctl.{_cmd.replace(' ', '-')}/1"] = {
        "command": _cmd, "shape": "report", "doc": "the edit and its outcome", "fields": EDIT}


def register(sid: str, schema: dict) -> None:
    """Add a schema from another module (same dict shape as above)."""
    SCHEMAS[sid] = schema


def schema_id(command: str) -> str:
    """The newest schema id of a command name ("dump", "config-offsets-show")."""
    best = None
    prefix = f"rmqctl.{command}/"
    for sid in SCHEMAS:
        if sid.startswith(prefix) and (best is None or int(sid[len(prefix):]) > int(best[len(prefix):])):
            best = sid
    return best or f"{prefix}1"


def fields_of(sid: str, obj: dict | None = None) -> dict | None:
    """The declared fields for an object of schema sid (by its "kind" for schemas with variants)."""
    s = SCHEMAS.get(sid)
    if s is None:
        return None
    if "variants" in s:
        return s["variants"].get((obj or {}).get("kind"))
    return s["fields"]


def for_page(page: str) -> list[str]:
    """Schema ids printed by the command of man page `page` ("rmqctl-config-offsets-show")."""
    return sorted(sid for sid, s in SCHEMAS.items() if "rmqctl-" + s["command"].replace(" ", "-") == page)
