"""The output rule, checked on the installed console script: every --json object carries a known
"schema" id (first), and its fields are exactly the fields rmqctl.schemas documents for that id, with
the documented types (optional fields may be absent; nothing undocumented may appear)."""
from __future__ import annotations

import json

import pytest
from output_runs import runs

from rmqctl.schemas import SCHEMAS, TYPES, fields_of

PY_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", list: "array",
           dict: "object"}


def _type_ok(value, declared: str) -> bool:
    t = PY_TYPE[type(value)]
    allowed = declared.split("|")
    return t in allowed or (t == "integer" and "number" in allowed)


def check_object(obj: dict, fields: dict, where: str) -> list[str]:
    errors = []
    unknown = sorted(set(obj) - set(fields))
    missing = sorted(k for k, f in fields.items() if not f.get("optional") and k not in obj)
    if unknown:
        errors.append(f"{where}: undocumented field(s) {unknown}")
    if missing:
        errors.append(f"{where}: documented field(s) missing {missing}")
    for k in set(obj) & set(fields):
        f, v = fields[k], obj[k]
        if not _type_ok(v, f["type"]):
            errors.append(f"{where}.{k}: {PY_TYPE[type(v)]} is not {f['type']}")
        elif "fields" in f and isinstance(v, dict):
            errors += check_object(v, f["fields"], f"{where}.{k}")
        elif "fields" in f and isinstance(v, list):
            for i, item in enumerate(v[:50]):
                errors += check_object(item, f["fields"], f"{where}.{k}[{i}]") if isinstance(item, dict) \
                    else [f"{where}.{k}[{i}]: not an object"]
    return errors


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return runs(tmp_path_factory.mktemp("output-rule"))


def test_the_schemas_are_well_formed():
    def walk(fields, where):
        for name, f in fields.items():
            assert set(f) <= {"type", "doc", "optional", "fields"}, (where, name)
            assert f["doc"].strip(), (where, name)
            assert all(t in TYPES for t in f["type"].split("|")), (where, name, f["type"])
            if "fields" in f:
                walk(f["fields"], f"{where}.{name}")

    for sid, s in SCHEMAS.items():
        assert sid == f"rmqctl.{sid[len('rmqctl.'):].split('/')[0]}/{int(sid.split('/')[1])}"
        assert s["shape"] in ("stream", "report") and s["doc"] and s["command"]
        for fields in (s["variants"].values() if "variants" in s else [s["fields"]]):
            assert "schema" in fields and not fields["schema"].get("optional")
            walk(fields, sid)


def test_every_json_output_matches_its_schema(outputs):
    errors, seen = [], {}
    for argv, code, objs, err in outputs:
        cmd = " ".join(argv)
        assert code in (0, 1, 4), f"{cmd}: exit {code}: {err}"
        assert "Traceback" not in err, cmd
        assert objs, f"{cmd}: printed nothing ({err.strip()})"
        ids = {o.get("schema") for o in objs}
        for i, o in enumerate(objs):
            sid = o.get("schema")
            if sid not in SCHEMAS:
                errors.append(f"{cmd}: object {i}: unknown schema {sid!r}")
                continue
            if next(iter(o)) != "schema":
                errors.append(f"{cmd}: object {i}: schema is not the first field")
            fields = fields_of(sid, o)
            if fields is None:
                errors.append(f"{cmd}: object {i}: {sid} has no variant kind={o.get('kind')!r}")
                continue
            seen.setdefault(sid, set()).add(o.get("kind") if "variants" in SCHEMAS[sid] else None)
            errors += check_object(o, fields, f"{cmd}: {sid}#{i}")
        for sid in ids & set(SCHEMAS):
            if SCHEMAS[sid]["shape"] == "report":
                n = sum(1 for o in objs if o.get("schema") == sid)
                if n != 1:
                    errors.append(f"{cmd}: {sid} is a report, printed {n} times")
    assert not errors, "\n".join(errors[:40])
    # the runs cover every schema but export's (it needs Spark) and every dump kind
    assert set(SCHEMAS) - set(seen) == {"rmqctl.export/1"}, sorted(set(SCHEMAS) - set(seen))
    assert seen["rmqctl.dump/1"] == set(SCHEMAS["rmqctl.dump/1"]["variants"]), \
        set(SCHEMAS["rmqctl.dump/1"]["variants"]) - seen["rmqctl.dump/1"]


def test_the_checker_catches_an_undocumented_or_mistyped_field():
    fields = SCHEMAS["rmqctl.config-get/1"]["fields"]
    good = {"schema": "rmqctl.config-get/1", "file": "topics", "path": "p", "key": "k", "value": 3}
    assert check_object(good, fields, "x") == []
    assert check_object({**good, "extra": 1}, fields, "x")
    assert check_object({**good, "file": 1}, fields, "x")
    assert check_object({k: v for k, v in good.items() if k != "key"}, fields, "x")


def test_each_line_is_one_compact_object(outputs):
    """Streams are JSON Lines, reports one object: no pretty-printed JSON spread over lines."""
    for _argv, _code, objs, _err in outputs:
        for o in objs:
            assert json.loads(json.dumps(o)) == o
