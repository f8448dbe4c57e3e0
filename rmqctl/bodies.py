"""Message bodies as the consumer sees them: decompression of bodies stored compressed.

The broker stores a compressed body as the producer sent it (BODYCRC covers the compressed bytes);
consumers decompress it (MessageDecoder.decode with deCompressBody). SYSFLAG bit 0x1 (COMPRESSED_FLAG)
marks it; RocketMQ 5.x adds the compression type in bits 8-10 (MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
0x700): 1 LZ4 (an LZ4 frame, lz4-java's LZ4FrameOutputStream), 2 ZSTD (a zstd frame, zstd-jni's
ZstdOutputStream), 3 ZLIB, and 0 -- every 4.x client -- ZLIB as well (CompressionType.findByValue);
4..7 are unknown (the broker's decoder throws). ZLIB is a zlib stream (java.util.zip.Deflater, with
header and Adler-32).

lz4 and zstd need the optional extra `compression` (pip install 'rmqctl[compression]'); they are
imported only when such a body is met. A body that cannot be decompressed -- unknown type, corrupt or
truncated stream, missing module -- yields a note for that message; the stored bytes are kept.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x700
TYPE_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}
# a decompressed body larger than this is not materialised (a bomb, or garbage read as a stream)
MAX_BODY = 256 * 1024 * 1024


@dataclass(frozen=True)
class Body:
    data: bytes                 # what to show: decompressed bytes, or the stored bytes
    compression: str | None     # None: not compressed; "zlib" | "lz4" | "zstd" | "unknown(N)"
    decompressed: bool          # data is the decompressed body
    note: str | None = None     # why a compressed body was not decompressed


def compression_of(sys_flag: int) -> str | None:
    if not sys_flag & COMPRESSED_FLAG:
        return None
    t = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return TYPE_NAMES.get(t, f"unknown({t})")


def body_of(stored: bytes, sys_flag: int, raw: bool = False) -> Body:
    """The body to show for a record (`raw`: the stored bytes, still saying how they are compressed)."""
    name = compression_of(sys_flag)
    if name is None:
        return Body(stored, None, False)
    if raw:
        return Body(stored, name, False)
    fn = _DECODERS.get(name)
    if fn is None:
        return Body(stored, name, False, f"unknown compression type {name[8:-1]} (SYSFLAG 0x{sys_flag:x}); "
                                         "body shown as stored")
    try:
        return Body(fn(stored), name, True)
    except _Missing as e:
        return Body(stored, name, False, f"{name} body shown as stored: {e}")
    except _TooBig as e:
        return Body(stored, name, False, f"{name} body {e}; shown as stored")
    except Exception as e:  # noqa: BLE001 - any decoder failure is a note about this message, never a crash
        return Body(stored, name, False, f"{name} stream is corrupt ({_why(e)}); body shown as stored")


class _Missing(Exception):
    pass


def _why(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return " ".join(text.split())[:160]


class _TooBig(Exception):
    pass


def _too_big():
    return _TooBig(f"decompresses to more than {MAX_BODY} bytes")


def _zlib(data: bytes) -> bytes:
    # java.util.zip.InflaterInputStream: one zlib stream; bytes after its end are ignored
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_BODY + 1)
    if len(out) > MAX_BODY:
        raise _too_big()
    if not d.eof:
        raise ValueError("truncated zlib stream")
    return out


def _lz4(data: bytes) -> bytes:
    try:
        import lz4.frame
    except ImportError:
        raise _Missing("the lz4 module is not installed (pip install 'rmqctl[compression]')") from None
    # LZ4FrameInputStream reads frame after frame to the end of the input. LZ4 expands at most ~255x:
    # a short input is decompressed in one call; a long one is fed 4 KiB at a time under the bound.
    out, rest = bytearray(), bytes(data)
    while rest:
        if len(rest) * 256 <= MAX_BODY - len(out):
            try:
                got, n = lz4.frame.decompress(rest, return_bytes_read=True)
            except RuntimeError as e:
                raise ValueError("truncated lz4 frame" if "incomplete" in str(e) else str(e)) from None
            out += got
            rest = rest[n:]
            continue
        d = lz4.frame.LZ4FrameDecompressor()
        pos = _feed_bounded(d, rest, out, "lz4")
        rest = d.unused_data + rest[pos:]
    return bytes(out)


def _feed_bounded(d, rest, out: bytearray, what: str) -> int:
    """Feed one frame of `rest` to the streaming decompressor `d` 4 KiB at a time, appending to `out` (the
    output bound is checked between feeds); returns how much of `rest` was fed."""
    pos = 0
    while not d.eof and pos < len(rest):
        out += d.decompress(rest[pos:pos + 4096])
        pos += 4096
        if len(out) > MAX_BODY:
            raise _too_big()
    if not d.eof:
        raise ValueError(f"truncated {what} frame")
    return pos


def _zstd(data: bytes) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise _Missing("the zstandard module is not installed (pip install 'rmqctl[compression]')") from None
    # ZstdInputStream reads frame after frame to the end of the input
    # (fed 4 KiB at a time: decompressobj has no output bound, and the bound is checked between feeds)
    out, rest = bytearray(), memoryview(data)
    while len(rest):
        d = zstandard.ZstdDecompressor().decompressobj()
        pos = _feed_bounded(d, rest, out, "zstd")
        rest = memoryview(d.unused_data + bytes(rest[pos:]))
    return bytes(out)


_DECODERS = {"zlib": _zlib, "lz4": _lz4, "zstd": _zstd}


def extra_fields(b: Body) -> dict:
    """The JSON fields a compressed body adds after `body` (none for an uncompressed one)."""
    if b.compression is None:
        return {}
    d = {"body_compression": b.compression, "body_decompressed": b.decompressed}
    if b.decompressed:
        d["body_decompressed_length"] = len(b.data)
    if b.note:
        d["body_note"] = b.note
    return d
