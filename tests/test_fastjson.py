"""rmqctl.fastjson: the broker's JSON dialect (docs/store-format.md, Config JSON files), on real broker-written files,
on the reference's verified samples, and on generated documents (hypothesis)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqctl import fastjson as fj
from rmqctl.errors import FormatError

from conftest import REAL_WORLD, real_world_files

# Files under fixtures/real-world that were re-indented by an editor (2 spaces, `"k": v`) after the
# broker wrote them: read, but not byte-identical when re-emitted. Found by re-emitting every file;
# all of them are the latest snapshot of shenyanming95/rocketmq (its @<commit> snapshots are intact).
REINDENTED = {
    "shenyanming95__rocketmq/workdir/store/config/consumerFilter.json",
    "shenyanming95__rocketmq/workdir/store/config/topics.json",
    "shenyanming95__rocketmq/workdir/store/config/delayOffset.json",
    "shenyanming95__rocketmq/workdir/store/config/consumerOffset.json",
    "shenyanming95__rocketmq/store/config/consumerFilter.json",
    "shenyanming95__rocketmq/store/config/delayOffset.json",
    "shenyanming95__rocketmq/store/config/consumerOffset.json",
}
COMPACT_NAMES = {"timermetrics", "transactionMetrics"}


def _json_files():
    out = []
    for p in real_world_files():
        if ".json" in p.name or p.name in COMPACT_NAMES:
            out.append(p)
    return out


JSON_FILES = _json_files()
BROKER_WRITTEN = [p for p in JSON_FILES if not str(p.relative_to(REAL_WORLD)).startswith("_peer_written/")
                  and str(p.relative_to(REAL_WORLD)) not in REINDENTED]


def _id(p):
    return str(p.relative_to(REAL_WORLD))


def test_real_world_corpus_is_there():
    assert len(BROKER_WRITTEN) >= 150, "fixtures/real-world is incomplete"
    assert all((REAL_WORLD / r).exists() for r in REINDENTED)


@pytest.mark.parametrize("path", JSON_FILES, ids=_id)
def test_every_real_world_json_file_is_read(path):
    doc = fj.loads(path.read_bytes(), path)
    assert isinstance(doc, dict)


@pytest.mark.parametrize("path", BROKER_WRITTEN, ids=_id)
def test_broker_written_files_reemit_byte_identical(path):
    raw = path.read_bytes()
    doc = fj.loads(raw, path)
    assert fj.dump_bytes(doc, compact=path.name in COMPACT_NAMES) == raw


@pytest.mark.parametrize("rel", sorted(REINDENTED))
def test_reindented_files_read_with_integer_keys(rel):
    path = REAL_WORLD / rel
    raw = path.read_bytes()
    doc = fj.loads(raw, path)
    assert fj.dump_bytes(doc) != raw  # an editor changed the layout: not byte-identical (expected)
    assert fj.loads(fj.dump_bytes(doc)) == doc
    if rel.endswith("workdir/store/config/consumerOffset.json"):
        q = doc["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]
        assert list(q) == [0, 1, 2, 3] and all(isinstance(k, int) for k in q)


def test_peer_written_quoted_keys_stay_strings():
    p = (REAL_WORLD / "_peer_written/mxsm__rocketmq-rust/rocketmq-broker/tests/fixtures/upgrade/v0.9.0"
         / "config/consumerOffset.json")
    doc = fj.loads(p.read_bytes())
    assert doc["offsetTable"]["V1UpgradeTopic@V1UpgradeGroup"] == {"0": 1}


# --- the layouts of docs/store-format.md, Config JSON files ---------------------------------------------

CONSUMER_OFFSET_5X = (
    '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},\n'
    '\t"groupTopicMap":{\n\t\t"GroupA":["TopicTest","%RETRY%GroupA"],\n\t\t"GroupB":["Empty"]\n\t},\n'
    '\t"offsetTable":{\n\t\t"Empty@GroupB":{},\n\t\t"%RETRY%GroupA@GroupA":{0:2\n\t\t},\n'
    '\t\t"TopicTest@GroupA":{0:113085,1:113084,2:7,3:0\n\t\t}\n\t}\n}')

ORDER_INFO = ('{\n\t"table":{\n\t\t"TopicTest@GroupA":{0:{\n\t\t\t\t"a":"attempt-1",\n\t\t\t\t"cm":0,\n'
              '\t\t\t\t"i":60000,\n\t\t\t\t"o":[\n\t\t\t\t\t5,\n\t\t\t\t\t1\n\t\t\t\t]\n\t\t\t}\n\t\t}\n\t}\n}')

POSITION_CHECKPOINT = '{\n\t"empty":false,\n\t"queueOffsetMap":{\n\t\t"CompactTopic_0":42\n\t}\n}'

DELAY = '{\n\t"offsetTable":{1:5,18:0,3:12\n\t}\n}'

TIMERMETRICS = ('{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},'
                '"timingCount":{"TopicTest":{"count":3,"timeStamp":1700000000001}}}')


@pytest.mark.parametrize("text", [CONSUMER_OFFSET_5X, ORDER_INFO, POSITION_CHECKPOINT, DELAY],
                         ids=["consumerOffset-5x", "consumerOrderInfo", "position-checkpoint", "delayOffset"])
def test_reference_samples_round_trip(text):
    doc = fj.loads(text)
    assert fj.dumps(doc) == text


def test_compact_browser_compatible_round_trip():
    assert fj.dumps(fj.loads(TIMERMETRICS), compact=True) == TIMERMETRICS


def test_inline_set_and_int_keys_are_distinguished():
    doc = fj.loads(CONSUMER_OFFSET_5X)
    assert isinstance(doc["groupTopicMap"]["GroupA"], fj.InlineList)
    assert doc["offsetTable"]["TopicTest@GroupA"] == {0: 113085, 1: 113084, 2: 7, 3: 0}
    assert fj.dumps({"a": {0: 1}}) == '{\n\t"a":{0:1\n\t}\n}'
    assert fj.dumps({"a": {"0": 1}}) == '{\n\t"a":{\n\t\t"0":1\n\t}\n}'
    assert fj.dumps({"a": [1, 2]}) == '{\n\t"a":[\n\t\t1,\n\t\t2\n\t]\n}'
    assert fj.dumps({"a": fj.InlineList([1, 2])}) == '{\n\t"a":[1,2]\n}'
    assert fj.dumps({"a": {}, "b": []}) == '{\n\t"a":{},\n\t"b":[]\n}'
    assert fj.dumps({}) == "{}"


def test_null_entries_are_omitted_like_fastjson():
    assert fj.dumps({"a": None, "b": 1}) == '{\n\t"b":1\n}'


def test_string_escaping_pretty():
    s = 'q"b\\s/\b\f\n\r\t\x01\x0b\x1f\x7f\x80\x9f\xa0é\u2028\u2029中'
    out = fj.dumps({"k": s})
    assert out == ('{\n\t"k":"q\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u000B\\u001F\\u007F\\u0080\\u009F\xa0é'
                   '\\u2028\\u2029中"\n}')
    assert fj.loads(out) == {"k": s}


def test_string_escaping_browser_compatible():
    out = fj.dumps({"k": 'a/b"é\n\x01😀'}, compact=True)
    assert out == '{"k":"a\\/b\\"\\u00E9\\n\\u0001\\uD83D\\uDE00"}'
    assert fj.loads(out) == {"k": 'a/b"é\n\x01\ud83d\ude00'}


def test_compact_quotes_int_keys_and_big_longs():
    assert fj.dumps({"m": {0: 2 ** 60, 1: 5}}, compact=True) == '{"m":{"0":"1152921504606846976","1":5}}'


# --- what fastjson accepts -------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("{'a':'b'}", {"a": "b"}),
    ('{"a":1,}', {"a": 1}),
    ('{"a":[1,2,],}', {"a": [1, 2]}),
    ('/* c */ {"a": // x\n 1 /* y */}', {"a": 1}),
    ('\ufeff{"a":1}', {"a": 1}),
    (b'\xef\xbb\xbf{"a":1}', {"a": 1}),
    ('  {\r\n  "a" :\t1\f}\n\n', {"a": 1}),
    ("{0:5,-1:6}", {0: 5, -1: 6}),
    ('{"0":5}', {"0": 5}),
    ("{abc:1,$x_1:2}", {"abc": 1, "$x_1": 2}),
    ('{"a":1,"a":2}', {"a": 2}),
    ('{"a":"2"}', {"a": "2"}),
    ('{"a":12L,"b":1.5,"c":-2e3}', {"a": 12, "b": 1.5, "c": -2000.0}),
    ('{"a":true,"b":false,"c":null}', {"a": True, "b": False, "c": None}),
    ('{"a":"\\u0041\\x42\\/\\\'"}', {"a": "AB/'"}),
    ("null", None),
])
def test_accepts(text, expected):
    assert fj.loads(text) == expected


@pytest.mark.parametrize("text,offset,reason", [
    (b"", 0, "empty"),
    (b"  \n\t ", 5, "only whitespace"),
    (b'{"a":1}old_garbage}', 7, "stale"),
    (b'{"a":1}\n}', 8, "stale"),
    (b'{"a":1', 6, "end of file"),
    (b'{"a":1 "b":2}', 7, "expected ','"),
    (b'{"a" 1}', 5, "expected ':'"),
    (b'{"a":"x', 5, "unclosed string"),
    (b'{"a":1} /* x', 8, "unclosed"),
    (b'{"a":tru}', 5, "expected a value"),
    (b'\x00\x00\x00\x00', 0, "expected a value"),
    (b'{"\xc3\xa9":1}x', 8, "stale"),
    (b'{,}', 1, "expected a key"),
])
def test_rejects_with_byte_offset(text, offset, reason):
    with pytest.raises(FormatError) as ei:
        fj.loads(text, "f.json")
    e = ei.value
    assert e.offset == offset, str(e)
    assert reason in e.message
    assert str(e).startswith(f"f.json: offset {offset}: ")


def test_trailing_data_keeps_the_value():
    with pytest.raises(fj.TrailingData) as ei:
        fj.loads(b'{"new":"data"}old_garbage}')
    assert ei.value.value == {"new": "data"} and ei.value.value_end == 14 and ei.value.trailing == 12


def test_error_names_the_json_path():
    with pytest.raises(FormatError) as ei:
        fj.loads('{"offsetTable":{"T@G":{0:1,1:}}}')
    assert ei.value.field == "offsetTable.T@G.1"


# --- hypothesis ----------------------------------------------------------------------------------------

_names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_scalars = st.one_of(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), st.booleans(), _names)


def _containers(children):
    str_map = st.dictionaries(_names, children, max_size=4)
    int_map = st.dictionaries(st.integers(min_value=-5, max_value=10 ** 6), children, max_size=4)
    lists = st.lists(children, max_size=4)
    inline = st.lists(_scalars, max_size=4).map(fj.InlineList)
    return st.one_of(str_map, int_map, lists, inline)


_docs = st.dictionaries(_names, st.recursive(_scalars, _containers, max_leaves=20), max_size=5)


@settings(max_examples=300, deadline=None)
@given(_docs)
def test_pretty_round_trip(doc):
    text = fj.dumps(doc)
    back = fj.loads(text)
    assert back == doc
    assert fj.dumps(back) == text
    assert "\n" not in text[-1:] and " " not in text.replace(" ", "") and not text.endswith("\n")


@settings(max_examples=200, deadline=None)
@given(_docs)
def test_compact_round_trip(doc):
    text = fj.dumps(doc, compact=True)
    assert text.isascii()
    assert fj.dumps(fj.loads(text), compact=True) == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.sampled_from([CONSUMER_OFFSET_5X.encode(), ORDER_INFO.encode()]),
       st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=255))
def test_damaged_input_only_raises_format_error(data, pos, byte):
    b = bytearray(data)
    if b:
        b[pos % len(b)] = byte
        b = b[: (pos * 7) % (len(b) + 1)] if pos % 3 == 0 else b
    try:
        fj.loads(bytes(b))
    except FormatError as e:
        assert e.offset is not None and 0 <= e.offset <= len(b)


# --- nesting depth: fastjson's limit, reached without Python recursion ---------------------------------

def _nested(n: int, opener=b"[", closer=b"]") -> bytes:
    return b'{"x":' + opener * n + closer * n + b"}"


def test_nesting_up_to_the_limit_reads_and_writes_back():
    # top-level object + 513 arrays = 514 containers: the broker's fastjson still decodes this
    doc = fj.loads(_nested(fj.MAX_DEPTH - 1))
    assert fj.loads(fj.dump_bytes(doc)) == doc
    assert fj.dumps(doc, compact=True) == _nested(fj.MAX_DEPTH - 1).decode()
    fj.to_plain(doc)
    mixed = fj.loads(b'{"a":' + b'[{"b":' * 256 + b"1" + b"}]" * 256 + b"}")
    assert fj.loads(fj.dump_bytes(mixed)) == mixed and fj.to_plain(mixed)


@pytest.mark.parametrize("n", [fj.MAX_DEPTH, 600, 100_000])
def test_deeper_nesting_is_one_format_error(n):
    with pytest.raises(fj.TooDeep) as ei:
        fj.loads(_nested(n), "f.json")
    assert str(ei.value) == (f"f.json: offset {5 + fj.MAX_DEPTH - 1}: JSON nested more than {fj.MAX_DEPTH} "
                             "levels deep (fastjson gives up at this depth)")
    with pytest.raises(fj.TooDeep):
        fj.loads(b'{"x":' + b'{"a":' * n)


def test_iterative_parser_keeps_paths_duplicates_and_trailing_commas():
    assert fj.loads(b'{"a":{"b":[1,{"c":2,},],"b":[3]},}') == {"a": {"b": [3]}}
    assert isinstance(fj.loads(b'{"a":[1,[2]]}')["a"][1], fj.InlineList)
    with pytest.raises(FormatError) as ei:
        fj.loads('{"a":[1,{"c":[2,}]}')
    assert ei.value.field == "a.1.c.1"
