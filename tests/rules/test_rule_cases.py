"""Rule cases as data (tests/rules/cases/*.yaml): GPU x model x pins -> values and rule ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servetune.api import resolve_launch
from servetune.errors import ServetuneError

CASES_DIR = Path(__file__).parent / "cases"


def _cases():
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            yield pytest.param(case, id=f"{path.stem}: {case['name']}")


def _resolve(case):
    return resolve_launch(
        case["model"],
        gpu=case["gpu"],
        workload=case.get("workload"),
        sglang_version=case.get("sglang", "0.5.23"),
        sets=[f"{k}={v}" for k, v in (case.get("set") or {}).items()],
        envs=[f"{k}={v}" for k, v in (case.get("env") or {}).items()],
        nnodes=case.get("nnodes"),
        preset=case.get("preset"),
    )


@pytest.mark.parametrize("case", list(_cases()))
def test_rule_case(case):
    """Each case resolves to the expected values, set by the expected rule."""
    if "expect_error" in case:
        with pytest.raises(ServetuneError) as info:
            _resolve(case)
        assert case["expect_error"] in info.value.message
        return
    res = _resolve(case)
    for key, want in (case.get("expect") or {}).items():
        got = res.config.get(key)
        assert got is not None, f"{key} is unset; outcomes: {[(o.rule_id, o.status) for o in res.config.outcomes]}"
        assert got.value == want["value"], f"{key}: {got.value!r} != {want['value']!r}"
        assert got.decision.source == want["by"], f"{key} decided by {got.decision.source}, expected {want['by']}"
    for key in case.get("expect_unset") or []:
        assert res.config.get(key) is None, (
            f"{key} should be unset, got {res.config.get(key).value!r} by {res.config.get(key).decision.source}"
        )


def test_every_rule_appears_in_a_case_with_by(builtin_rules):
    """Coverage: every built-in rule is the `by` of some case (or the target of an expect_error)."""
    used = set()
    for param in _cases():
        case = param.values[0]
        used |= {want["by"] for want in (case.get("expect") or {}).values()}
        if "expect_error" in case:
            used |= {r.id for r in builtin_rules.rules if f"'{r.id}'" in case["expect_error"]}
    missing = sorted(r.id for r in builtin_rules.rules if r.id not in used)
    assert not missing, f"rules without a case: {missing}"
