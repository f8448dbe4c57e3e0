"""recover's one-pass mode (consume queues and index dispatched during the validating scan, kept only
when the end of valid data confirms the guess) plans exactly what the two-pass mode plans: same
actions, same staged bytes, same notes -- on crash fixtures with every fault the matrix injects."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import faultlib as F
from conftest import FIXTURES

STORES = FIXTURES / "stores"


def _checkpoint_zero(root):
    (root / "checkpoint").write_bytes(bytes(4096))


def _bitflip(root):
    recs = F.commitlog_records(root)
    F.flip_body_bit(root, recs[len(recs) // 3])


FAULTS = {
    "none": lambda r: None,
    "torn-tail": F.torn_tail,
    "cq-ahead": F.cq_ahead,
    "cq-behind": F.cq_behind,
    "index-chain": F.index_chain_cycle,
    "checkpoint-zero": _checkpoint_zero,
    "checkpoint-garbage": F.checkpoint_garbage,
    "bitflip-mid": _bitflip,
    "stale-after-end": F.stale_record_after_end,
}


def _plan(root: Path, conf: Path, tmp: Path, speculate: bool, mode: str) -> dict:
    from rmqctl.repair import recover as R
    from rmqctl.repair import speculation
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    cfg = StoreConfig().with_values(json.loads(conf.read_text())["store_config"])
    store = Store.open(root, cfg)
    staging = tmp / ("spec" if speculate else "two")
    staging.mkdir()
    old, speculation.SPECULATE = speculation.SPECULATE, speculate
    try:
        ctx = R.analyze(store, R.Options(on_corruption=mode), staging)
    finally:
        speculation.SPECULATE = old
    out = ctx.plan.to_json()
    for a, j in zip(ctx.plan.actions, out["actions"]):
        if a.kind in ("write_file", "create_file"):
            j["staged_sha256"] = hashlib.sha256(Path(a.payload[1]).read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("fixture", ["crash-multifile-v5", "crash-behind-v4", "basic-multifile-v5"])
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("mode", ["stop", "quarantine"])
def test_one_pass_plans_what_two_passes_plan(tmp_path, fixture, fault, mode):
    F.copy_store(STORES / fixture, tmp_path / fixture)
    root = tmp_path / fixture / "store"
    conf = tmp_path / fixture / "manifest.json"
    (root / "abort").touch()
    FAULTS[fault](root)
    one = _plan(root, conf, tmp_path, True, mode)
    two = _plan(root, conf, tmp_path, False, mode)
    assert two["summary"].pop("commitlog_passes", 2) == 2
    used = one["summary"].pop("commitlog_passes", None)
    assert one == two
    # the guess holds whenever nothing in the queues or the index reaches past the end of valid data
    if mode == "stop" and (fault in ("none", "cq-behind", "checkpoint-zero")
                           or (fault == "torn-tail" and fixture.startswith("crash"))):
        assert used == 1
    if fault == "cq-ahead" and fixture.startswith("crash"):
        assert used == 2
