"""Every verify finding code has a stable, documented entry (rmqctl/check/codes.py, man rmqctl-verify);
no documented code is dead."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rmqctl.check.codes import CODES, man_section
from rmqctl.check.run import verify_store
from rmqctl.store.config import StoreConfig
from rmqctl.store.layout import Store

ROOT = Path(__file__).resolve().parents[1]
STORES = sorted(p for p in (ROOT / "fixtures" / "stores").iterdir() if (p / "store").is_dir())
PREFIXES = ("abort|bcq|checkpoint|commitlog|compaction|config|cq|dledger|index|lock|recovery|rocksdb_cq|rocksdb_meta|"
            "store|timer")
CODE_RE = re.compile(rf'"((?:{PREFIXES})\.[a-z_]+)"')


def emittable() -> set[str]:
    """The code strings the checks' source names (every Finding's check is such a literal)."""
    found = set()
    for p in (ROOT / "rmqctl" / "check").glob("*.py"):
        if p.name != "codes.py":
            found |= set(CODE_RE.findall(p.read_text()))
    return found


def test_source_scan_sees_the_checks():
    codes = emittable()
    # the grep must find the codes the checks are known to use, else it proves nothing
    assert {"commitlog.body_crc", "cq.behind", "index.slot_hash", "config.load", "abort.present"} <= codes
    assert len(codes) > 60


def test_every_emittable_code_is_documented_and_none_is_dead():
    codes = emittable()
    assert sorted(codes - set(CODES)) == [], "codes emitted by rmqctl/check without an entry in codes.py"
    assert sorted(set(CODES) - codes) == [], "documented codes no check can emit"


def test_entries_are_complete_and_free_of_internal_ids():
    for code, c in CODES.items():
        assert re.fullmatch(rf"(?:{PREFIXES})\.[a-z_]+", code), code
        for text in c:
            assert text.strip() and not text.endswith("."), (code, text)
            assert not re.search(r"\b[FR]\d+\b", text), (code, text)


@pytest.mark.parametrize("name", [p.name for p in STORES])
def test_fixture_store_findings_are_documented(name):
    d = ROOT / "fixtures" / "stores" / name
    cfg = StoreConfig.from_file(d / "manifest.json") if (d / "manifest.json").exists() else StoreConfig()
    report = verify_store(Store.open(d / "store", cfg, check_supported=False))
    checks = {f.check for f in report.findings}
    if name.startswith("crash-"):  # the crash stores do produce findings: the check below is not vacuous
        assert "abort.present" in checks
    assert checks <= set(CODES)


def test_man_page_lists_every_code():
    from rmqctl.manpage import pages

    page = pages()["rmqctl-verify.1"]
    assert ".SH FINDING CODES" in page
    text = man_section()
    for code in CODES:
        assert re.search(rf"^{re.escape(code)}$", text, re.MULTILINE), code
        assert code in page
