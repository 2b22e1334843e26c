"""The resolved launch for every bundled model, GPU profile, catalog, workload and preset is the
one recorded in tests/fixtures/golden/resolve.json (`scripts/golden_resolve.py --write` re-records
it after an intended change to rules or resolution)."""

from __future__ import annotations

import json

from tests.conftest import load_script


def _golden_module():
    return load_script("scripts/golden_resolve.py")


def test_every_recorded_case_resolves_to_the_recorded_launch_and_provenance():
    golden = _golden_module()
    want = json.loads(golden.GOLDEN.read_text(encoding="utf-8"))
    cases = golden.cases()
    assert [w["case"] for w in want] == json.loads(json.dumps(cases)), "the case list changed: re-record"
    for case, recorded in zip(cases, want):
        got = json.loads(json.dumps(golden.record(case), sort_keys=True, default=str))
        assert got == recorded, f"resolve changed for {case}"
