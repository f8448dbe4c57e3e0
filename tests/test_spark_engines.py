"""verify --engine spark equals the default engine on every fixture (and on a damaged copy): same
findings. (rebuild has no Spark engine: see rmqctl.spark.engines and test_spark_agg.py.)"""
from __future__ import annotations

import shutil

import pytest

from oracle_helpers import fixture_dirs, load_manifest
from spark_fixtures import spark  # noqa: F401 - session fixture

pytestmark = pytest.mark.spark
FIXTURES = [p for p in fixture_dirs() if (p / "store" / "commitlog").is_dir()]


def _open(root, fx):
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    return Store.open(root, StoreConfig().with_values(load_manifest(fx)["store_config"]))


def _damaged(tmp_path):
    """A copy of a multi-file fixture with a body byte flipped in its second commitlog file."""
    fx = next(p for p in FIXTURES if p.name == "basic-multifile-v5")
    root = tmp_path / "damaged" / "store"
    shutil.copytree(fx / "store", root)
    f = sorted((root / "commitlog").iterdir())[1]
    data = bytearray(f.read_bytes())
    data[200] ^= 0x20
    f.write_bytes(bytes(data))
    return fx, root


def _report(rep):
    stats = {k: v for k, v in rep.stats.items() if k != "seconds"}
    return [f.to_dict() for f in rep.sorted()], stats


def test_verify_engine_spark_equals_default(spark, tmp_path):
    from rmqctl.check.run import verify_store
    from rmqctl.spark import engines

    cases = [(fx, fx / "store") for fx in FIXTURES] + [_damaged(tmp_path)]
    assert len(cases) > 20
    n_findings = 0
    for fx, root in cases:
        want = _report(verify_store(_open(root, fx), jobs=1))
        got = _report(engines.verify_store(spark, _open(root, fx)))
        assert got == want, fx.name
        n_findings += len(want[0])
    assert n_findings > 0          # the damaged copy at least


def test_cli_engine_spark(cli, spark, tmp_path):
    """verify --engine spark through the CLI: same output as the default engine."""
    import json

    _, root = _damaged(tmp_path)
    outs = {}
    for engine in ("local", "spark"):
        code, out, err = cli("verify", str(root), "--json", "--engine", engine)
        doc = json.loads(out)
        doc.get("stats", {}).pop("seconds", None)
        outs[engine] = (code, doc)
    assert outs["spark"] == outs["local"] and outs["local"][0] == 4
