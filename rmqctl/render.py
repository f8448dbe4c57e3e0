"""Turning decoded records into output: one stable dict per message for --json, and readable
text. Field names here are the documented JSON Lines schema (man rmqctl-dump)."""
from __future__ import annotations

import base64
import datetime as _dt
import json
import re

from rmqctl.formats.commitlog import TRANSACTION_TYPE_NAMES
from rmqctl.formats.properties import CRC32_PROPERTY
from rmqctl.terminal import escape

BODY_MODES = ("text", "hex", "base64", "none")


def offset_msg_id(store_host_raw: bytes, store_port: int, physical_offset: int) -> str:
    """MessageDecoder.createMessageId: store host address + port + offset, upper-case hex."""
    return (store_host_raw + store_port.to_bytes(4, "big", signed=True)
            + physical_offset.to_bytes(8, "big", signed=True)).hex().upper()


def body_value(body: bytes, mode: str):
    if mode == "none":
        return None
    if mode == "hex":
        return body.hex()
    if mode == "base64":
        return base64.b64encode(body).decode("ascii")
    return body.decode("utf-8", errors="backslashreplace")


def _body(r, raw_body: bool):
    """(bytes to show, Body or None): a compressed body decompressed unless raw_body (rmqctl.bodies)."""
    if not r.sys_flag & 1:
        return r.body, None
    from rmqctl.bodies import body_of

    b = body_of(r.body, r.sys_flag, raw_body)
    return b.data, b


def message_dict(r, body: str = "base64", raw_body: bool = False, schema: str = "rmqctl.dump/1") -> dict:
    """The JSON object of one message record (fields declared in rmqctl.schemas)."""
    d = {
        "schema": schema,
        "kind": "message",
        "physical_offset": r.offset,
        "size": r.total_size,
        "magic": "V2" if r.version == 2 else "V1",
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "sys_flag": r.sys_flag,
        "transaction_type": TRANSACTION_TYPE_NAMES[r.sys_flag & 0xC],
        "flag": r.flag,
        "body_crc": r.body_crc,
        "body_crc_ok": r.crc_ok,
        "born_timestamp": r.born_timestamp,
        "born_host": r.born_host,
        "store_timestamp": r.store_timestamp,
        "store_host": r.store_host,
        "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset,
        "msg_id": offset_msg_id(r.store_host_raw, r.store_port, r.physical_offset),
        "body_length": r.body_length,
        "properties": r.properties,
    }
    if r.physical_offset != r.offset:
        d["physical_offset_field"] = r.physical_offset
    if r.prop_crc is not None:
        d["property_crc_ok"] = r.prop_crc
    data, b = _body(r, raw_body)
    if body != "none":
        d["body_encoding"] = body
        d["body"] = body_value(data, body)
    if b is not None:
        from rmqctl.bodies import extra_fields

        d.update(extra_fields(b))
    return d


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_B64 = {"base64", "hex", "none"}


def message_json(r, body: str = "base64", raw_body: bool = False,
                 _topic_cache={},  # noqa: B006 -- deliberate per-process cache shared across calls
                 schema: str = "rmqctl.dump/1") -> str:
    """jsonl(message_dict(r, body)) built without the intermediate dict: the dump --json hot path.
    tests/test_render.py proves both give identical lines."""
    topic = _topic_cache.get(r.topic)
    if topic is None:
        if len(_topic_cache) > 10000:
            _topic_cache.clear()
        topic = _topic_cache[r.topic] = _dumps(r.topic)
    tx = TRANSACTION_TYPE_NAMES[r.sys_flag & 0xC]
    crc_ok = "null" if r.crc_ok is None else ("true" if r.crc_ok else "false")
    parts = [
        '{"schema":"', schema, '","kind":"message","physical_offset":', str(r.offset), ',"size":', str(r.total_size),
        ',"magic":"', "V2" if r.version == 2 else "V1", '","topic":', topic, ',"queue_id":', str(r.queue_id),
        ',"queue_offset":', str(r.queue_offset), ',"sys_flag":', str(r.sys_flag), ',"transaction_type":"', tx,
        '","flag":', str(r.flag), ',"body_crc":', str(r.body_crc), ',"body_crc_ok":', crc_ok,
        ',"born_timestamp":', str(r.born_timestamp), ',"born_host":"', r.born_host,
        '","store_timestamp":', str(r.store_timestamp), ',"store_host":"', r.store_host,
        '","reconsume_times":', str(r.reconsume_times), ',"prepared_transaction_offset":',
        str(r.prepared_transaction_offset), ',"msg_id":"',
        offset_msg_id(r.store_host_raw, r.store_port, r.physical_offset), '","body_length":', str(r.body_length),
        ',"properties":', _dumps(r.properties),
    ]
    if r.physical_offset != r.offset:
        parts += [',"physical_offset_field":', str(r.physical_offset)]
    if r.prop_crc is not None:
        parts += [',"property_crc_ok":', "true" if r.prop_crc else "false"]
    data, b = _body(r, raw_body) if r.sys_flag & 1 else (r.body, None)
    if body != "none":
        v = body_value(data, body)
        parts += [',"body_encoding":"', body, '","body":', ('"' + v + '"') if body in _B64 else _dumps(v)]
    if b is not None:
        from rmqctl.bodies import extra_fields

        parts += ["," + _dumps(k) + ":" + _dumps(v) for k, v in extra_fields(b).items()]
    parts.append("}")
    return "".join(parts)


def fmt_time(ms: int) -> str:
    if ms <= 0:
        return str(ms)
    try:
        return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def message_text(r, body: str = "text", max_body: int = 200, raw_body: bool = False) -> str:
    """Readable multi-line rendering of one message (every value from the record is escaped)."""
    props = {k: v for k, v in r.properties.items()}
    tx = TRANSACTION_TYPE_NAMES[r.sys_flag & 0xC]
    lines = [
        f"@{r.offset}  {escape(r.topic)}  queue {r.queue_id}  offset {r.queue_offset}  size {r.total_size}"
        f"  {'V2 ' if r.version == 2 else ''}sysflag 0x{r.sys_flag:x}{'' if tx == 'NOT' else ' ' + tx}",
        f"  stored {fmt_time(r.store_timestamp)} by {escape(r.store_host)}   born {fmt_time(r.born_timestamp)}"
        f" at {escape(r.born_host)}",
        f"  msgId {offset_msg_id(r.store_host_raw, r.store_port, r.physical_offset)}"
        f"  bodyCRC {r.body_crc}{'' if r.crc_ok in (True, None) else ' (BAD)'}"
        + ("" if r.reconsume_times == 0 else f"  reconsume {r.reconsume_times}")
        + ("" if r.prepared_transaction_offset == 0 else f"  preparedTxOffset {r.prepared_transaction_offset}"),
    ]
    if props:
        shown = ", ".join(f"{escape(k)}={escape(v)}" for k, v in props.items() if k != CRC32_PROPERTY)
        if CRC32_PROPERTY in props:
            shown += f", {CRC32_PROPERTY}={escape(props[CRC32_PROPERTY])}" + (" (BAD)" if r.prop_crc is False else "")
        lines.append(f"  properties {shown}")
    data, b = _body(r, raw_body)
    size = str(r.body_length)
    if b is not None:
        size += f" {b.compression}" + (f" -> {len(data)}" if b.decompressed else ", as stored")
    if body != "none":
        v = body_value(data, body)
        if body == "text" and len(v) > max_body:
            v = v[:max_body] + f"... ({len(data)} bytes)"
        lines.append(f"  body[{size}] {escape(v)}")
    if b is not None and b.note:
        lines.append(f"  note: {escape(b.note)}")
    return "\n".join(lines)


# json.dumps(ensure_ascii=False) leaves lone surrogates (bytes of a file name that are not UTF-8) raw: written out,
# they would make the line invalid UTF-8. As \udcNN escapes the line stays valid, and json.loads gives the name back.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> str:
    return text if _SURROGATE.search(text) is None else _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def jsonl(obj) -> str:
    return _utf8(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def json_line(command: str, obj: dict) -> str:
    """One output object as compact JSON, `"schema": "rmqctl.<command>/<n>"` first (rmqctl.schemas)."""
    from rmqctl.schemas import schema_id

    return _utf8(json.dumps({"schema": schema_id(command), **obj}, ensure_ascii=False, separators=(",", ":"),
                            default=str))


def emit_json(command: str, obj: dict) -> None:
    """Write one object (a report, or one line of a JSON Lines stream) to stdout."""
    import sys

    sys.stdout.write(json_line(command, obj) + "\n")
