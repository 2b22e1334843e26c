"""The local phase: a baseline's full config from what the server reported, its one-field
neighbours, and the loop queueing them before TPE takes over."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from servetune.schema.space import ChoiceDistribution, FloatDistribution, IntDistribution
from servetune.tuner._local import NO_NEIGHBOUR, effective_params, local_budget, neighbours, propose, snap

REPO = Path(__file__).resolve().parents[2]


def _choice(*values):
    return ChoiceDistribution.model_validate({"choice": list(values)})


def _int(low, high, **kw):
    return IntDistribution.model_validate({"int": [low, high], **kw})


def _float(low, high, **kw):
    return FloatDistribution.model_validate({"float": [low, high], **kw})


@pytest.mark.parametrize(
    "value, dist, expected",
    [
        (2048, _choice(8, 16, 32, 64, 128), 128),  # auto max_running_requests far above the list
        (40, _choice(16, 32, 64), 32),  # nearest on a log scale: 40/32 < 64/40
        (48, _choice(16, 32, 64), 64),
        (True, _choice(False, True), True),  # a bool stays a bool, never 1
        (1, _choice(0.5, 1.0), 1.0),  # an int among float choices: the listed float
        (None, _choice(None, 64, 128), None),  # auto is a choice
        ("lpm", _choice("fcfs", "lpm"), "lpm"),
        ("dfs-weight", _choice("fcfs", "lpm"), NO_NEIGHBOUR),  # not a choice and not a number
        (2048, _int(32, 1024, log=True), 1024),  # clipped into the range
        (13, _int(0, 32, step=4), 12),  # onto the step grid
        (0.8387624218749999, _float(0.70, 0.92, step=0.01), 0.84),
        ("fast", _int(0, 8), NO_NEIGHBOUR),
    ],
)
def test_snap_places_a_reported_value_in_the_space(value, dist, expected):
    got = snap(value, dist)
    assert (
        (got is expected)
        if expected is NO_NEIGHBOUR or expected is None or isinstance(expected, bool)
        else got == expected
    )
    assert type(got) is type(expected) or expected is NO_NEIGHBOUR


def test_neighbours_differ_in_exactly_one_field():
    space = {
        "mrr": _int(32, 1024, log=True),
        "graph": _choice(None, 64, 128),
        "mem": _float(0.70, 0.92, step=0.01),
        "interval": _int(0, 32, step=2),
    }
    start = {"mrr": 1024, "graph": None, "mem": 0.84, "interval": 0}
    found = neighbours(space, start)
    for n in found:
        assert sum(n[k] != start[k] for k in start) == 1, n
    moves = {k: sorted((n[k] for n in found if n[k] != start[k]), key=repr) for k in start}
    assert moves["mrr"] == [512, 724]  # half and 1/sqrt(2); up is past the bound
    assert moves["graph"] == [128, 64]
    assert moves["mem"] == [0.78, 0.9]  # 0.84 -+ 0.055, onto the 0.01 grid
    assert moves["interval"] == [8]  # a quarter of the range up; down is below 0


def test_propose_skips_what_was_tried_and_ends_when_all_were():
    space = {"a": _choice(1, 2, 3), "b": _choice("x", "y")}
    start = {"a": 1, "b": "x"}
    tried = [start]
    rng = random.Random(0)
    seen = []
    while (p := propose(space, start, tried, rng)) is not None:
        assert p not in tried
        tried.append(p)
        seen.append(p)
    assert sorted(seen, key=repr) == sorted([{"a": 2, "b": "x"}, {"a": 3, "b": "x"}, {"a": 1, "b": "y"}], key=repr)


def test_effective_params_from_a_real_sglang_server_info():
    """SGLang 0.5.17's /server_info from the H200 (tests/fixtures/h200/launch8b): max_running_requests is
    None at the top level and the scheduler's figure sits under another key; the decode graph
    width is not reported, which the shipped spaces cover with a null (auto) choice."""
    info = json.loads((REPO / "tests/fixtures/h200/launch8b/server_info.json").read_text())
    space = {
        "max_running_requests": _int(32, 1024, log=True),
        "mem_fraction_static": _float(0.70, 0.92, step=0.01),
        "chunked_prefill_size": _choice(None, 2048, 4096, 8192, 16384),
        "cuda_graph_max_bs_decode": _choice(None, 64, 128),
        "schedule_policy": _choice("fcfs", "lpm"),
        "SGLANG_VLM_CACHE_SIZE_MB": _choice(0, 100, 1024),
    }
    got = effective_params(space, {}, info, {"SGLANG_VLM_CACHE_SIZE_MB": "100"})
    assert got == {
        "max_running_requests": 1024,
        "mem_fraction_static": 0.84,
        "chunked_prefill_size": 8192,
        "cuda_graph_max_bs_decode": None,
        "schedule_policy": "fcfs",
        "SGLANG_VLM_CACHE_SIZE_MB": 100,
    }
    # env values arrive as text: a bool choice reads "1", a number outside the list is snapped
    flags = {"SGLANG_ENABLE_X": _choice(False, True), "SGLANG_VLM_CACHE_SIZE_MB": _choice(0, 100, 1024)}
    assert effective_params(flags, {}, info, {"SGLANG_ENABLE_X": "1", "SGLANG_VLM_CACHE_SIZE_MB": "200"}) == {
        "SGLANG_ENABLE_X": True,
        "SGLANG_VLM_CACHE_SIZE_MB": 100,
    }
    # the baseline's own values win over the report
    assert (
        effective_params(space, {"chunked_prefill_size": 4096}, info, {"SGLANG_VLM_CACHE_SIZE_MB": "0"})[
            "chunked_prefill_size"
        ]
        == 4096
    )
    # a field neither set nor reported (and no auto choice): no full config
    assert effective_params({"cuda_graph_max_bs_decode": _choice(64, 128)}, {}, info, {}) is None


def test_the_budget_is_two_per_field_and_at_most_a_quarter_of_the_trials():
    assert local_budget(5, 80) == 10
    assert local_budget(10, 40) == 10
    assert local_budget(5, 10) == 2
    assert local_budget(5, 3) == 0


def _run(tmp_path, monkeypatch, **options):
    """A study whose launch + benchmark is a function of the config (`FakeRunner`: the boundary this
    file does not cross; tests/tuner/test_e2e.py launches real stand-in servers), reporting what the
    stand-in's /server_info reports for the same flags."""
    from servetune.runner import Failure
    from servetune.testing import FakeRunner
    from servetune.testing.standin import expected_throughput
    from servetune.testing.standin._config import build_parser, resolve
    from servetune.tuner import TuneOptions, Tuner
    from tests.tuner.conftest import SPACE, WORKLOAD

    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    (tmp_path / "space.yaml").write_text(SPACE)

    def model_measure(call):
        v = expected_throughput(
            call.argv, concurrency=64, input_tokens=128, output_tokens=64, requests=128
        ).request_throughput
        if v is None:
            return Failure(cls="oom", stage="start", message="CUDA out of memory")
        return {"comparable_request_throughput": v, "completed": 128}

    runner = FakeRunner(model_measure, server_info=lambda call: resolve(build_parser().parse_args(call.argv)))
    tuner = Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload=str(tmp_path / "w.yaml"),
            space_file=str(tmp_path / "space.yaml"),
            seed=3,
            confirm_rounds=0,
            prune=False,
            run_dir=tmp_path / "study",
            **options,
        ),
        runner=runner,
    )
    tuner.run()
    return tuner, tuner.study.get_trials(deepcopy=False)


def test_the_first_sampled_trials_are_one_field_changes_of_the_best_so_far(tmp_path, monkeypatch):
    tuner, trials = _run(tmp_path, monkeypatch, trials=16)
    assert tuner.local_budget == 4
    rules = trials[0]
    assert rules.user_attrs["source"] == "rules"
    eff = rules.user_attrs["effective_params"]
    assert set(eff) == set(tuner.space.params) and eff["mem_fraction_static"] == 0.8  # the stand-in's auto value
    local = [t for t in trials if t.user_attrs.get("source") == "local"]
    assert len(local) == 4
    by_number = {t.number: t for t in trials}
    for t in local:
        base = by_number[t.user_attrs["local_of"]]
        start = base.user_attrs.get("effective_params") or base.user_attrs["params"]
        changed = {k for k in start if t.user_attrs["params"][k] != start[k]}
        assert len(changed) == 1, (t.user_attrs["params"], start)
        # what the launch sets: the incumbent's own settings plus the change; what the incumbent
        # left to SGLang stays unset (the rules set none of these fields for this model and GPU)
        if base.user_attrs["source"] in ("rules", "local"):
            assert set(t.user_attrs["layer"]) == set(base.user_attrs.get("layer") or {}) | changed
        # the incumbent was the best finished trial when the neighbour was queued
        earlier = [x.value for x in trials if x.number < t.number and x.state.name == "COMPLETE"]
        assert base.value == max(earlier)
    sampled = [t for t in trials if t.user_attrs.get("source") == "sampler"]
    assert sampled and min(t.number for t in sampled) > max(t.number for t in local)


@pytest.mark.parametrize("options", [{"local_trials": 0}, {"sampler": "random"}])
def test_no_local_phase_when_off_or_for_random_search(tmp_path, monkeypatch, options):
    tuner, trials = _run(tmp_path, monkeypatch, trials=8, **options)
    assert tuner.local_budget == 0
    assert not [t for t in trials if t.user_attrs.get("source") == "local"]
