"""The tuner's TPE: config failures are infeasible points it learns from; its set-up survives
Optuna releases that drop deprecated arguments."""

from __future__ import annotations

import warnings

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from servetune.tuner._sampler import TPE_SETUP, _FailuresAsInfeasible, make_tpe_sampler, setup_for

SPACE = {
    "max_running_requests": IntDistribution(0, 4),
    "cuda_graph_max_bs_decode": IntDistribution(0, 3),
    "mem_fraction_static": IntDistribution(0, 2),
}


def _failed(params: dict, cls: str) -> optuna.trial.FrozenTrial:
    return create_trial(
        state=TrialState.FAIL,
        params=params,
        distributions=SPACE,
        user_attrs={"failure": {"class": cls, "message": "", "log_tail": ""}},
    )


def _study(sampler) -> optuna.Study:
    """Throughput rises with the memory fraction (index 0 -> 1); three configs with the highest
    one (index 2) ran out of memory."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for (mrr, graph, mem), value in [((3, 3, 1), 176.0), ((1, 0, 0), 60.0), ((0, 1, 0), 50.0), ((2, 2, 1), 150.0)]:
        study.add_trial(
            create_trial(
                value=value,
                distributions=SPACE,
                params={"max_running_requests": mrr, "cuda_graph_max_bs_decode": graph, "mem_fraction_static": mem},
            )
        )
    for mrr, graph in [(3, 2), (4, 3), (1, 1)]:
        study.add_trial(
            _failed({"max_running_requests": mrr, "cuda_graph_max_bs_decode": graph, "mem_fraction_static": 2}, "oom")
        )
    return study


def test_config_failures_are_seen_as_infeasible_and_other_failures_are_not():
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        _failed({"max_running_requests": 1, "cuda_graph_max_bs_decode": 1, "mem_fraction_static": 2}, "oom")
    )
    study.add_trial(
        _failed({"max_running_requests": 2, "cuda_graph_max_bs_decode": 1, "mem_fraction_static": 0}, "interrupted")
    )
    seen = _FailuresAsInfeasible(study).get_trials(deepcopy=False)
    assert [t.state for t in seen] == [TrialState.PRUNED, TrialState.FAIL]
    assert seen[0].constraints and all(v > 0 for v in seen[0].constraints.values())
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.FAIL, TrialState.FAIL]  # stored as is


@pytest.mark.parametrize("aware", [True, False])
def test_the_sampler_stays_out_of_a_region_that_ran_out_of_memory(aware):
    """Over 40 seeds, the failure-aware TPE (almost) never proposes the memory fraction that failed;
    Optuna's plain TPE, which skips FAIL trials, follows the rising throughput into it."""
    picks = 0
    for seed in range(40):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = (
                make_tpe_sampler(seed)
                if aware
                else optuna.samplers.TPESampler(
                    seed=seed, n_startup_trials=2, **{k: v for k, v in setup_for(optuna.samplers.TPESampler).items()}
                )
            )
            trial = _study(sampler).ask(SPACE)
        picks += trial.params["mem_fraction_static"] == 2
    if aware:
        assert picks <= 2, picks
    else:
        assert picks >= 20, picks


def test_set_up_arguments_a_release_lacks_are_left_out():
    class Older(optuna.samplers.TPESampler):  # a release that removed the deprecated arguments
        def __init__(self, *, seed=None, n_startup_trials=10, n_ei_candidates=24, multivariate=None, group=False):
            super().__init__(
                seed=seed,
                n_startup_trials=n_startup_trials,
                n_ei_candidates=n_ei_candidates,
                multivariate=multivariate,
                group=group,
            )

    kept = setup_for(Older)
    assert kept == {k: TPE_SETUP[k] for k in ("multivariate", "group", "n_ei_candidates")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Older(seed=0, **kept)


def test_trials_count_launches_and_a_sampler_that_only_reproposes_ends_the_study(tmp_path, monkeypatch):
    """A space of two configs and --trials 10: the baseline and both configs are launched (3 of
    the 10 allowed); re-proposals are reused, not counted, and after MAX_REPROPOSALS in a row the
    study stops instead of asking forever."""
    from servetune.testing import FakeRunner
    from servetune.tuner import MAX_REPROPOSALS, TuneOptions, Tuner
    from servetune.tuner.events import Converged
    from tests.tuner.conftest import WORKLOAD

    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    (tmp_path / "space.yaml").write_text("tune:\n  chunked_prefill_size: {choice: [2048, 8192]}\n")
    runner: FakeRunner

    def fake_measure(call):  # stands in for launch + benchmark: a value per config
        return {"comparable_request_throughput": 100.0 + len(runner.calls), "completed": 128}

    runner = FakeRunner(fake_measure)
    events = []
    tuner = Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload=str(tmp_path / "w.yaml"),
            space_file=str(tmp_path / "space.yaml"),
            trials=10,
            seed=0,
            confirm_rounds=0,
            prune=False,
            run_dir=tmp_path / "study",
        ),
        runner=runner,
        on_event=events.append,
    )
    tuner.run()
    trials = tuner.study.get_trials(deepcopy=False)
    reused = [t for t in trials if "duplicate_of" in t.user_attrs]
    assert len(runner.calls) == 3 and len(trials) == 3 + len(reused)
    assert [type(e) for e in events if isinstance(e, Converged)] == [Converged]
    assert len(reused) >= MAX_REPROPOSALS
