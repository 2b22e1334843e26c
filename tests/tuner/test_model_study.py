"""A capacity study that measures once, models, and spends its launches checking the model: on the
stand-in's landscape in simulated time (`testing.simulated.standin_runner`: each launch a
`StandinServer`, its capacity steps served in simulation with SGLang-style telemetry).

The landscape has the H200's shape: decode time grows with the running batch and jumps past the
CUDA graph (32 wide by default), prefill stalls decode, the KV pool and the decode step cap
throughput, and a running limit trades TPOT for TTFT. At p99 TTFT <= 500 ms and p99 TPOT <= 3.5 ms
SGLang-like defaults (unbounded batch) hold about 53 req/s; the best configs of the space about
1.45x that (a running limit at the graph, or a wider graph with a limit)."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from benchmarks.study_model import study_options  # one study for the test and the benchmark
from servetune.testing.simulated import standin_runner
from servetune.tuner import Tuner


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model-study")
    options = study_options(tmp)
    tuner = Tuner(options, runner=standin_runner(input_tokens=128, output_tokens=128, images=1))
    result = tuner.run()
    trials = sorted(tuner.study.get_trials(deepcopy=False), key=lambda t: t.number)
    return tuner, result, trials


def test_ten_launches_reach_1_3x_the_baseline(study):
    tuner, result, trials = study
    from servetune.tuner._trial import launches

    assert launches(trials, running=False) <= 10  # reused configs and configs the model ruled out launch nothing
    for t in trials:  # a config not launched was predicted under half the incumbent, after the seed held
        if t.user_attrs.get("not_launched"):
            veto = t.user_attrs["pruned"]
            assert veto["why"] == "predicted_below" and veto["predicted"] < 0.5 * veto["incumbent"]
    base = next(t for t in trials if t.user_attrs.get("source") == "rules").values[0]
    assert result.best.values[0] >= 1.3 * base


def test_the_first_sampled_trial_is_the_models_seed_and_lands_within_15_percent(study):
    tuner, _, trials = study
    record = tuner.study.user_attrs["server_model"]
    seeded = next(t for t in trials if t.user_attrs.get("source") == "model")
    assert seeded.number == 2  # right after the two baselines
    assert (
        seeded.params
        and seeded.user_attrs["params"]["max_running_requests"] == (record["seed"]["values"]["max_running_requests"])
    )
    assert seeded.state == TrialState.COMPLETE
    predicted, measured = seeded.user_attrs["predicted"]["capacity"], seeded.values[0]
    assert predicted == pytest.approx(record["seed"]["predicted"])
    assert measured == pytest.approx(predicted, rel=0.15)
    # the model itself: fitted on the baseline, the eager penalty past its 32-wide graph found
    model = record["model"]
    assert model["graph_bs"] == 32 and model["eager_ms"] > 1.0 and model["r2"] > 0.8


def test_every_later_trial_records_its_prediction_beside_its_measurement(study):
    _, _, trials = study
    later = [t for t in trials if t.number >= 2 and "duplicate_of" not in t.user_attrs]
    assert later and all("capacity" in (t.user_attrs.get("predicted") or {}) for t in later)


def test_the_space_is_pruned_by_what_the_baseline_showed(study):
    """The baseline never ran over ~80 requests at once (nothing queued): a running limit or graph above
    twice that cannot bind and is cut; KV usage passed half the pool, so memory fraction stays."""
    tuner, _, trials = study
    evidence = {e["field"]: e for e in tuner.study.user_attrs["server_model"]["evidence"]}
    limit = evidence["max_running_requests"]
    assert limit["action"] == "narrowed" and limit["to"] < 512 and "cannot bind" in limit["why"]
    assert "mem_fraction_static" not in evidence
    for t in trials:
        if t.number >= 2 and "duplicate_of" not in t.user_attrs:
            assert t.user_attrs["params"]["max_running_requests"] <= limit["to"]


def test_tune_report_prints_the_model_its_seed_and_its_error(study, capsys, monkeypatch):
    from servetune.tuner import load_result
    from servetune.tuner.report import print_report

    tuner, _, _ = study
    result = load_result(tuner.study, tuner.storage_url)
    monkeypatch.setenv("COLUMNS", "250")
    print_report(result)
    out = capsys.readouterr().out
    seed = next(t for t in result.trials if t.source == "model")  # measured: the model was refitted on it
    assert f"server model (trials 0 and {seed.number}," in out and "first sampled trial: max_running_requests=" in out
    assert f"refit on the baseline and seed trial {seed.number} (measured" in out
    assert "max_running_requests: narrowed to" in out and "model error: median" in out and "its seed" in out
    error = result.model_error()
    assert error["trials"] >= 1 and abs(error["seed"]) <= 0.15
    assert result.as_json()["model"]["seed"]["predicted"] > 0


def test_configs_the_model_rules_out_are_told_without_a_launch(study):
    """After its seed landed within 15%, a sampled config the model predicts under half the incumbent is
    PRUNED without a launch (the report says why); the seed itself is always launched."""
    tuner, result, trials = study
    skipped = [t for t in trials if t.user_attrs.get("not_launched")]
    assert skipped, "a 10-launch study over this space proposes configs far below the incumbent"
    assert all(t.state == TrialState.PRUNED and "timing" not in t.user_attrs for t in skipped)
    assert all(t.user_attrs.get("source") != "model" for t in skipped)
    notes = {t.number: t.note for t in result.trials}
    assert all("not launched: predicted" in notes[t.number] for t in skipped)


def test_a_float_on_a_step_grid_is_the_grids_value():
    """Optuna's step arithmetic gives 0.8799999999999999 for 0.88; the launch gets 0.88."""
    import optuna

    from servetune.schema.space import FloatDistribution
    from servetune.tuner._params import suggest
    from servetune.tuner.space import ResolvedSpace, SpaceParam

    space = ResolvedSpace(
        {
            "mem_fraction_static": SpaceParam(
                "mem_fraction_static", FloatDistribution(float=(0.70, 0.88), step=0.02), "t"
            )
        }
    )
    study = optuna.create_study()
    study.enqueue_trial({"mem_fraction_static": 0.7 + 9 * 0.02})
    assert suggest(study.ask(), space) == {"mem_fraction_static": 0.88}


def _a_study_stopped_in_its_seed(tmp_path):
    """A 3-launch study on the stand-in, stopped (as by Ctrl-C) when it launches the model's seed:
    (options, runner, the argv it was stopped at)."""
    options = study_options(tmp_path, trials=3)
    runner = standin_runner(input_tokens=128, output_tokens=128, images=1)
    measure, stopped = runner.measure_fn, []

    def stop_the_seed_once(call):
        if "--max-running-requests" in call.argv and not stopped:
            stopped.append(call.argv)
            raise KeyboardInterrupt
        return measure(call)

    runner.measure_fn = stop_the_seed_once
    with pytest.raises(KeyboardInterrupt):
        Tuner(options, runner=runner).run()
    return options, runner, stopped


def test_an_interrupted_seed_is_retried_as_the_same_launch(tmp_path):
    """Ctrl-C during the model's seed (a real case on the H200: a job's time limit) queues a retry; the
    resumed study launches the retry with the seed's own argv, not with placeholder values for the
    fields the baseline left to SGLang (those fields stay unset), and it stays the model's trial."""
    options, runner, stopped = _a_study_stopped_in_its_seed(tmp_path)
    tuner = Tuner(options, runner=runner)
    tuner.run()
    trials = sorted(tuner.study.get_trials(deepcopy=False), key=lambda t: t.number)
    seed = next(t for t in trials if t.user_attrs.get("source") == "model")
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == seed.number)
    assert seed.user_attrs["failure"]["class"] == "interrupted" and stopped
    assert retry.user_attrs["source"] == "model" and retry.state != TrialState.FAIL
    assert retry.user_attrs["layer"] == seed.user_attrs["layer"]
    assert retry.user_attrs["argv"] == seed.user_attrs["argv"]
    assert set(seed.user_attrs["layer"]) == {"max_running_requests", "cuda_graph_max_bs_decode"}


def test_a_seed_whose_retry_launched_another_config_is_queued_again(tmp_path):
    """The H200 study of session 14: the seed was stopped, and its retry (written before retries kept
    `auto`) launched the sampler's placeholders, another config. Resumed, the study queues the seed once
    more (`VoidRetries`), and that retry launches the seed's own argv; a later resume queues nothing."""
    from servetune.tuner import _storage
    from servetune.tuner.events import VoidRetries

    options, runner, stopped = _a_study_stopped_in_its_seed(tmp_path)
    tuner = Tuner(options, runner=runner)
    tuner.prepare()
    (waiting,) = tuner.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    tid = _storage.trial_id(tuner.setup.storage, tuner.study, waiting.number)
    tuner.setup.storage.set_trial_user_attr(tid, "auto", [])  # the retry as the old code queued it
    tuner.run()
    trials = {t.number: t for t in tuner.study.get_trials(deepcopy=False)}
    seed = next(t for t in trials.values() if t.user_attrs.get("source") == "model")
    void = trials[waiting.number]
    assert void.user_attrs["retry_of"] == seed.number
    assert void.user_attrs["config_hash"] != seed.user_attrs["config_hash"]

    events: list = []
    again = Tuner(study_options(tmp_path, trials=4), runner=runner, on_event=events.append)
    again.run()
    assert [e.trials for e in events if isinstance(e, VoidRetries)] == [(seed.number,)]
    (retry,) = [t for t in again.study.get_trials(deepcopy=False)
                if t.user_attrs.get("retry_of") == seed.number and t.number != void.number]  # fmt: skip
    assert retry.state != TrialState.FAIL and retry.user_attrs["source"] == "model"
    assert retry.user_attrs["argv"] == seed.user_attrs["argv"]

    later: list = []
    Tuner(study_options(tmp_path, trials=4), runner=runner, on_event=later.append).prepare()
    assert not [e for e in later if isinstance(e, VoidRetries)]
