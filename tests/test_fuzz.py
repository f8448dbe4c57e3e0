"""The fuzz suite (tests/fuzz.py) inside the default run: a fixed seed, every file kind, in-process
with a per-command SIGALRM timeout. Long runs: `python -m tests.fuzz --minutes 30`."""
from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fuzz import KINDS, Fuzzer  # noqa: E402

SEED = 19
CHUNK = 250
CHUNKS = 8                 # 2,000 mixed cases
RSS_GROWTH_MB = 400        # a chunk may not raise this process's peak RSS by more


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    fz = Fuzzer(SEED, tmp_path_factory.mktemp("fuzz"), case_timeout=20)
    yield fz
    fz.close()


def _report(outcomes) -> str:
    lines = []
    for o in outcomes:
        c = o.case
        lines.append(f"python -m tests.fuzz --in-process --seed {c.seed} --case {c.n}  "
                     f"# {c.kind} {c.mutation} {c.base}/{c.rel}")
        lines += [f"    {p[:300]}" for p in o.problems[:3]]
    return "\n".join(lines)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_every_kind_no_internal_error_no_hang(fuzzer, chunk):
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = [fuzzer.run_case(n) for n in range(chunk * CHUNK, (chunk + 1) * CHUNK)]
    assert {o.case.kind for o in outcomes} == set(KINDS)
    # the mutations really changed the files (a few are no-ops: zeros over zeros, a full-length "truncation")
    assert sum(o.injected for o in outcomes) > CHUNK * 0.8
    bad = [o for o in outcomes if o.problems]
    assert not bad, _report(bad)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert grown < RSS_GROWTH_MB, f"peak RSS grew by {grown:.0f} MB over {CHUNK} cases"


@pytest.mark.parametrize("mutation", ["crc_byte", "cq_field"])
def test_fuzz_damage_that_matters_is_reported(tmp_path, mutation):
    """A flipped byte covered by a body CRC, a flipped consume-queue offset/size byte: verify says so."""
    fz = Fuzzer(SEED, tmp_path, only=(mutation,))
    try:
        outcomes = [fz.run_case(n) for n in range(60)]
    finally:
        fz.close()
    hit = [o for o in outcomes if o.case.expect]
    assert len(hit) >= 50 and all(o.injected for o in hit)
    bad = [o for o in outcomes if o.problems]
    assert not bad, _report(bad)


def test_fuzz_damaged_config_key_is_reported(tmp_path):
    fz = Fuzzer(SEED, tmp_path, only=("bad_key",))
    try:
        outcomes = [fz.run_case(n) for n in range(24)]
    finally:
        fz.close()
    assert all(o.injected and o.case.expect == "config" for o in outcomes)
    bad = [o for o in outcomes if o.problems]
    assert not bad, _report(bad)


def test_fuzz_deep_json_no_internal_error(tmp_path):
    fz = Fuzzer(SEED, tmp_path, only=("deep_json",))
    try:
        outcomes = [fz.run_case(n) for n in range(14)]
    finally:
        fz.close()
    bad = [o for o in outcomes if o.problems]
    assert not bad, _report(bad)
