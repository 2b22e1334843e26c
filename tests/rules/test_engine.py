"""The resolution engine: layers, fixed point, cycles, conflicts, require rules, provenance."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servetune.api import resolve_launch
from servetune.errors import ConflictError, SpecError, UnknownNameError
from servetune.rules.engine import RequireViolation


def _rules_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def test_layers_rule_preset_trial_pin_in_order(tmp_path):
    """A pin beats a trial, which beats a preset, which beats a rule; the chain records each."""
    preset = tmp_path / "p.yaml"
    preset.write_text("name: p\nsummary: s\nset:\n  prefill_decode_interval: 5\n")
    res = resolve_launch(
        "qwen3-vl-8b-instruct",
        gpu="h200",
        sglang_version="0.5.23",
        preset=str(preset),
        trial={"prefill_decode_interval": 7},
        sets=["prefill_decode_interval=9"],
    )
    chain = res.config.get("prefill_decode_interval").chain
    assert [(d.layer, d.value) for d in chain] == [("rule", 22), ("preset", 5), ("tuner", 7), ("pin", 9)]
    assert res.config.get("prefill_decode_interval").value == 9
    assert "prefill_decode_interval" in res.pinned


def test_trial_breaking_a_require_rule_is_a_require_violation():
    """A tuner trial that breaks a require rule is never launched: RequireViolation."""
    with pytest.raises(RequireViolation) as info:
        resolve_launch(
            "qwen3-vl-8b-instruct",
            gpu="h200",
            sglang_version="0.5.23",
            nnodes=2,
            trial={"mm_feature_transport": "cuda_ipc"},
        )
    assert "cuda-ipc-transport-single-node" in info.value.message
    assert "tuner" in info.value.message


def test_pin_breaking_a_require_rule_names_both():
    """A pin that breaks a require rule is an error naming the pin and the rule."""
    with pytest.raises(ConflictError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", sets=["prefill_decode_interval=-3"])
    assert not isinstance(info.value, RequireViolation)
    assert "prefill_decode_interval=-3 (pin cli --set)" in info.value.message
    assert "prefill-decode-interval-non-negative" in info.value.message


def test_cycle_is_an_error_naming_the_rules(tmp_path):
    """Two rules that switch each other off are reported as a cycle."""
    path = _rules_file(
        tmp_path,
        """
rules:
  - id: test-a
    summary: a
    why: a
    when: {field.schedule_policy: {is_set: false}}
    set: {stream_interval: 2}
  - id: test-b
    summary: b
    why: b
    when: {field.stream_interval: {is_set: false}}
    set: {schedule_policy: lpm}
""",
    )
    with pytest.raises(ConflictError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path])
    assert "test-a" in info.value.message and "test-b" in info.value.message
    assert "switch each other" in info.value.message


def test_conflicting_rules_are_a_load_time_error(tmp_path):
    """Two rules that can match together and set one field differently fail at load time."""
    path = _rules_file(
        tmp_path,
        """
rules:
  - id: test-one
    summary: a
    why: a
    when: {gpu.arch: sm90}
    set: {schedule_policy: lpm}
  - id: test-two
    summary: b
    why: b
    when: {gpu.memory_mib: {gte: 80000}}
    set: {schedule_policy: fcfs}
""",
    )
    with pytest.raises(ConflictError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path])
    assert "test-one" in info.value.message and "test-two" in info.value.message
    assert "supersedes" in info.value.help


@pytest.mark.parametrize(
    "second_when", ["{gpu.arch: sm80}", "{gpu.memory_mib: {lt: 1000}}", "{gpu.arch: {in: [sm100, sm80]}}"]
)
def test_disjoint_rules_do_not_conflict(tmp_path, second_when):
    """Rules whose conditions cannot hold together may set one field differently."""
    path = _rules_file(
        tmp_path,
        f"""
rules:
  - id: test-one
    summary: a
    why: a
    when: {{gpu.arch: sm90, gpu.memory_mib: {{gte: 60000}}}}
    set: {{schedule_policy: lpm}}
  - id: test-two
    summary: b
    why: b
    when: {second_when}
    set: {{schedule_policy: fcfs}}
""",
    )
    res = resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path])
    assert res.config.get("schedule_policy").decision.source == "test-one"


def test_supersedes_orders_two_overlapping_rules(tmp_path):
    """With `supersedes`, the superseding rule wins and the other is reported as superseded."""
    path = _rules_file(
        tmp_path,
        """
rules:
  - id: test-one
    summary: a
    why: a
    when: {gpu.arch: sm90}
    set: {schedule_policy: lpm}
  - id: test-two
    summary: b
    why: b
    when: {gpu.memory_mib: {gte: 80000}}
    set: {schedule_policy: fcfs}
    supersedes: [test-one]
""",
    )
    res = resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path])
    assert res.config.get("schedule_policy").value == "fcfs"
    outcome = {o.rule_id: o for o in res.config.outcomes}["test-one"]
    assert outcome.status == "superseded" and "test-two" in outcome.note


def test_a_key_the_target_lacks_is_skipped_with_a_reason(tmp_path, catalogs):
    """A rule value for a field the target SGLang lacks is never emitted; the skip says why."""
    old = min(catalogs, key=lambda c: len(c.fields))
    newest = max(catalogs, key=lambda c: len(c.fields))
    missing = sorted(set(newest.fields) - set(old.fields))
    field = next(f for f in missing if newest.fields[f].type == "int" and newest.fields[f].action == "store")
    path = _rules_file(
        tmp_path,
        f"""
rules:
  - id: test-new-field
    summary: a
    why: a
    set: {{{field}: 3}}
""",
    )
    res = resolve_launch("qwen3-8b", gpu="h200", sglang_version=old.sglang_version, rules_files=[path])
    assert res.config.get(field) is None
    assert f"--{field.replace('_', '-')}" not in res.argv()
    skip = [s for s in res.config.skipped if s.key == field]
    assert skip and f"SGLang {old.sglang_version} has no field '{field}'" == skip[0].reason


def test_unknown_pin_is_an_error_with_did_you_mean():
    """--set with a misspelt field is an error that suggests the right name."""
    with pytest.raises(UnknownNameError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", sets=["max_runing_requests=4"])
    assert "did you mean 'max_running_requests'" in info.value.help


def test_pin_value_is_typed_by_the_catalog():
    """--set values are parsed by the field's type and choices."""
    with pytest.raises(SpecError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", sets=["max_running_requests=many"])
    assert "expected an integer, but got 'many'" in info.value.message
    with pytest.raises(SpecError) as info:
        resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", sets=["radix_eviction_policy=lruu"])
    assert "did you mean 'lru'" in info.value.message


def test_resolution_is_pure(monkeypatch):
    """Same inputs give the same config, and the process environment is neither read nor written."""
    monkeypatch.setenv("SGLANG_VLM_CACHE_SIZE_MB", "777")
    before = dict(os.environ)
    a = resolve_launch("qwen3-vl-8b-instruct", gpu="h200", sglang_version="0.5.23", sets=["max_running_requests=512"])
    b = resolve_launch("qwen3-vl-8b-instruct", gpu="h200", sglang_version="0.5.23", sets=["max_running_requests=512"])
    assert a.config == b.config and a.argv() == b.argv() and a.env() == b.env()
    assert a.env()["SGLANG_VLM_CACHE_SIZE_MB"] == "0"
    assert dict(os.environ) == before


@pytest.mark.parametrize("gpu", ["h200", "h100-sxm:8", "a100-40gb", "l4", "b200"])
@pytest.mark.parametrize(
    "model", ["qwen3-vl-8b-instruct", "qwen3-vl-30b-a3b-instruct", "qwen2.5-vl-3b-instruct", "llama-3.1-8b-instruct"]
)
def test_every_value_is_explained_and_catalogued(gpu, model, catalogs):
    """Every resolved key has a decision chain ending in its value, and names a catalogued field or env var."""
    for catalog in catalogs:
        res = resolve_launch(model, gpu=gpu, sglang_version=catalog.sglang_version, sets=["max_running_requests=500"])
        for key, resolved in {**res.config.fields, **res.config.env}.items():
            assert resolved.chain and resolved.chain[-1].value == resolved.value
            assert key in catalog.fields or key in catalog.env
            assert all(d.reason for d in resolved.chain)


def test_no_rules_gives_only_the_pins():
    """use_rules=False (the tuner's SGLang-defaults baseline) applies no rule."""
    res = resolve_launch(
        "qwen3-vl-8b-instruct", gpu="h200", sglang_version="0.5.23", use_rules=False, sets=["max_running_requests=64"]
    )
    assert set(res.config.fields) == {"max_running_requests"} and not res.config.env


def test_a_derived_value_follows_its_source_or_is_skipped(tmp_path):
    """`{from: FIELD}` copies the resolved source (clamped); with the source unset it is skipped, saying why."""
    path = _rules_file(
        tmp_path,
        """
rules:
  - id: test-derived
    summary: a
    why: a
    set: {cuda_graph_max_bs_prefill: {from: max_running_requests, max: 300}}
""",
    )
    res = resolve_launch(
        "qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path], sets=["max_running_requests=512"]
    )
    assert res.config.get("cuda_graph_max_bs_prefill").value == 300
    res = resolve_launch("qwen3-8b", gpu="h200", sglang_version="0.5.23", rules_files=[path])
    assert res.config.get("cuda_graph_max_bs_prefill") is None
    assert [s.reason for s in res.config.skipped if s.key == "cuda_graph_max_bs_prefill"] == [
        "derived from 'max_running_requests', which is unset"
    ]
