"""Held-out check: a capacity study with the server model, on a simulated VLM server servetune has
never seen (`benchmarks/heldout_study.py`, written without reading servetune's own simulators).

One study (seed 0, 10 launches, model seed on) in simulated time, then the long-run truth of the
configs it reports. Deterministic: the server, the arrivals and the study are all seeded.
"""

from __future__ import annotations

import pytest

from benchmarks.heldout_study import (
    OUTPUT_TOKENS,
    SLOS,
    Launch,
    Study,
    arrivals,
    run_study,
    simulate,
    truth_of,
)
from servetune.tuner import SOURCES_BASELINE

SEED = 0
TRIALS = 10


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    return run_study(SEED, model_seed=True, trials=TRIALS, workdir=tmp_path_factory.mktemp("heldout"))


# --- the server itself --------------------------------------------------------------------------


def test_the_server_streams_every_request_in_arrival_order():
    out = simulate(Launch(), arrivals(20.0, 300, 5), 5)
    records = out.records()
    assert len(records) == 300
    assert [r.start for r in records] == sorted(r.start for r in records)
    for r in records:
        assert r.finished and r.success and r.images == 1
        assert len(r.itl) == OUTPUT_TOKENS - 1
        assert 0 < r.ttft < r.latency
        assert sum(r.itl) == pytest.approx(r.latency - r.ttft)
    kinds = {t["kind"] for t in out.telemetry}
    assert kinds == {"prefill", "decode"}
    decode = [t for t in out.telemetry if t["kind"] == "decode"]
    assert all(0 <= t["token_usage"] <= 1 and t["cuda_graph"] == (t["running_req"] <= 48) for t in decode)


def test_a_running_limit_caps_the_batch_and_a_wider_graph_keeps_it_in_graph_mode():
    times = arrivals(45.0, 1500, 7)
    capped = simulate(Launch(max_running_requests=64, graph_bs=64), times, 7)
    assert max(t["running_req"] for t in capped.telemetry) <= 64
    assert all(t["cuda_graph"] for t in capped.telemetry if t["kind"] == "decode")
    default = simulate(Launch(), times, 7)
    assert any(not t["cuda_graph"] for t in default.telemetry if t["kind"] == "decode")


def test_the_landscape_rewards_a_wider_graph_over_the_defaults():
    assert truth_of(Launch(graph_bs=256)) > 1.1 * truth_of(Launch())


# --- the study ----------------------------------------------------------------------------------


def test_the_study_completes(study: Study):
    assert study.error is None, f"the study raised {study.error} after {len(study.launched())} launches"


def test_the_baseline_is_certified_and_not_above_its_truth(study: Study):
    base = study.baseline()
    assert base is not None and base > 0
    first = study.launched()[0]
    assert first.user_attrs["source"] in SOURCES_BASELINE
    launch, perf = study.launch(first)
    assert base <= 1.05 * truth_of(launch, perf)


def test_the_best_is_at_least_the_baseline_and_not_above_its_long_run_truth(study: Study):
    best = study.best()
    assert best is not None
    cap = study.capacity(best)
    assert cap >= study.baseline()
    launch, perf = study.launch(best)
    assert cap <= 1.05 * truth_of(launch, perf), f"{launch.label()} certified {cap:.2f} at {SLOS}"


def test_the_best_config_is_better_in_truth_than_the_defaults(study: Study):
    launch, _ = study.launch(study.best())
    assert truth_of(launch) > truth_of(Launch())


def test_the_model_record_has_a_seed_whose_trial_recorded_its_prediction_or_says_why_not(study: Study):
    record = study.record
    assert record is not None
    seed = record.get("seed")
    if not seed:
        assert any(isinstance(v, str) and v for v in record.values()), record
        return
    trial = study.model_seed_trial()
    assert trial is not None and study.launch(trial) is not None
    assert trial.user_attrs["predicted"]["capacity"] == pytest.approx(seed["predicted"], rel=1e-3)
    assert all(trial.user_attrs["params"].get(k) == v for k, v in seed["values"].items())


def test_every_launch_after_the_baselines_recorded_a_prediction(study: Study):
    later = [t for t in study.launched() if t.user_attrs.get("source") not in SOURCES_BASELINE]
    assert later
    missing = [t.number for t in later if (t.user_attrs.get("predicted") or {}).get("capacity") is None]
    assert not missing
