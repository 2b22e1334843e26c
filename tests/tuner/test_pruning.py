"""The pruner's rule: decide only on a full wave of steady completions, never prune a baseline,
prune a trial clearly worse than the best finished one at the same step, by a margin that
tightens as the steady window grows."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from servetune.tuner._pruning import PRUNE_MARGINS, BestRelativePruner, Checkpoints, checkpoints, window_ready
from tests.tuner.conftest import WORKLOAD


def _study(direction: str = "maximize", margins=PRUNE_MARGINS, concurrency: int | None = 64) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study(direction=direction, pruner=BestRelativePruner(margins, concurrency=concurrency))


def _finished(study: optuna.Study, values: dict[int, float], final: float, source: str = "sampler") -> None:
    t = study.ask()
    t.set_user_attr("source", source)
    for step, v in values.items():
        t.report(v, step)
    study.tell(t, final)


def _running(study: optuna.Study, step: int, value: float, source: str = "sampler"):
    t = study.ask()
    t.set_user_attr("source", source)
    t.report(value, step)
    return t


def test_checkpoint_grid_is_twelfths_of_the_run():
    assert checkpoints(384) == [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352]
    assert checkpoints(12) == list(range(1, 12))


def test_never_decides_before_one_wave_in_the_steady_window():
    points = Checkpoints(384, concurrency=64)
    # ramp-up: the steady window holds fewer completions than one wave at every checkpoint
    for step, in_window in ((32, 0), (64, 0), (96, 20), (128, 52), (150, 63)):
        assert points.due(step, {"steady_completed": in_window}) is None
    assert not window_ready({"steady_completed": 63}, 64)
    assert window_ready({"steady_completed": 64}, 64)
    # the first decision: reported under its grid step, later steps of the same grid point skipped
    assert points.due(165, {"steady_completed": 70}) == 160
    assert points.due(170, {"steady_completed": 75}) is None
    assert points.due(199, {"steady_completed": 100}) == 192


def test_the_first_wave_is_one_decision_before_the_window_opens():
    """With `first_wave`, the report at exactly `concurrency` completions (no steady window yet)
    is a decision; a report that comes later than that, or a window already open, is not."""
    points = Checkpoints(384, concurrency=64, first_wave=True)
    assert points.due(32, {"steady_completed": 0}) is None
    assert points.due(64, {"steady_completed": 0}) == 64
    assert points.due(70, {"steady_completed": 6}) is None  # back to the grid: a full wave in the window first
    assert points.due(131, {"steady_completed": 67}) == 128
    late = Checkpoints(384, concurrency=64, first_wave=True)
    assert late.due(63, {"steady_completed": 0}) is None
    assert late.due(65, {"steady_completed": 1}) is None  # the first wave's end was not seen: no early decision
    assert Checkpoints(384, concurrency=64).due(64, {"steady_completed": 0}) is None  # off (latency objectives)
    assert Checkpoints(64, concurrency=64, first_wave=True).first_wave is None  # a run of one wave
    # judged with the lower first-wave bar
    study = _study()
    _finished(study, {64: 100.0, 128: 100.0}, 100.0, source="rules")
    assert _running(study, 64, 45.0).should_prune() is False  # could be a running limit just under the load
    assert _running(study, 64, 35.0).should_prune() is True


def test_the_real_loop_prunes_only_after_a_wave_and_never_the_baseline(tmp_path, monkeypatch, space_file):
    """`Tuner.run` with a `FakeRunner` giving synthetic partial results at the builtin client's
    progress points (every requests // 50 completions and the end of the first wave): the baseline
    completes; a trial at 42% of its throughput passes the first-wave look (40%) and is pruned at
    the first checkpoint whose steady window holds a full wave (64, at 144 completions here: step
    160 of the grid); one at 30% is pruned at the
    end of the first wave; PRUNED trials keep partial metrics."""
    from servetune.testing import FakeRunner
    from servetune.tuner import TuneOptions, Tuner

    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    workload_file = tmp_path / "w.yaml"
    workload_file.write_text(WORKLOAD.replace("requests: 128", "requests: 384"))
    values = {}

    def fake_measure(call):
        value = 100.0 if not values else (42.0 if len(values) % 2 else 30.0)
        values[call.run_dir] = value
        return {"comparable_request_throughput": value, "completed": call.total}

    def partial(call, done):
        return {
            "comparable_request_throughput": values[call.run_dir],
            "completed": done,
            "steady_completed": max(0, int(0.9 * done) - 64),
        }

    runner = FakeRunner(fake_measure, progress=partial)
    tuner = Tuner(
        TuneOptions(
            model="qwen3-8b",
            gpu="h200",
            workload=str(workload_file),
            space_file=str(space_file),
            trials=5,
            seed=1,
            confirm_rounds=0,
            run_dir=tmp_path / "study",
            client="builtin",
        ),
        runner=runner,
    )
    tuner.run()
    trials = tuner.study.get_trials(deepcopy=False)
    base = [t for t in trials if t.user_attrs.get("source") == "rules"]
    assert base and base[0].state == TrialState.COMPLETE
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert {t.user_attrs["metrics"]["comparable_request_throughput"] for t in pruned} == {42.0, 30.0}, [
        t.state for t in trials
    ]
    for t in pruned:
        at = t.user_attrs["pruned_at"]
        assert min(t.intermediate_values) == 64  # every trial's first look: the end of the first wave
        if t.user_attrs["metrics"]["comparable_request_throughput"] == 30.0:
            assert at["step"] == 64 and at["steady_completed"] == 0
        else:
            # the first grid step (every 32) whose report finds a full wave inside the window
            assert at["step"] == 160 and at["steady_completed"] >= 64
            assert sorted(t.intermediate_values) == [64, 160]
    result = tuner.result()
    assert result.best is not None and result.best.state == "COMPLETE"


def test_prunes_a_clearly_worse_trial_at_the_same_step():
    study = _study(margins=0.85)
    _finished(study, {160: 100.0, 192: 101.0}, 100.0, source="rules")
    worse = _running(study, 160, 60.0)
    assert worse.should_prune() is True
    close = _running(study, 160, 0.9 * 100.0)
    assert close.should_prune() is False
    edge = _running(study, 160, 0.85 * 100.0)
    assert edge.should_prune() is False  # at the margin: kept


def test_the_margin_tightens_as_the_window_grows():
    """At 64 in flight, step 128 holds one whole wave after the ramp-up one: a config that reads
    50% of the best there is kept (an H200 run of the best config itself read 52% of its batch's
    best); at two waves (step 192) 60% is the bar, from three waves (step 256) on 70%."""
    pruner = BestRelativePruner(concurrency=64)
    assert [pruner.margin(s) for s in (64, 128, 191, 192, 255, 256, 704)] == [0.4, 0.45, 0.45, 0.6, 0.6, 0.7, 0.7]
    assert BestRelativePruner(concurrency=None).margin(704) == 0.45  # open loop: no waves, the lenient margin
    study = _study()
    _finished(study, {128: 100.0, 192: 100.0, 256: 100.0}, 100.0, source="rules")
    assert _running(study, 128, 50.0).should_prune() is False
    assert _running(study, 128, 40.0).should_prune() is True
    assert _running(study, 192, 65.0).should_prune() is False
    assert _running(study, 192, 55.0).should_prune() is True
    assert _running(study, 256, 75.0).should_prune() is False
    assert _running(study, 256, 65.0).should_prune() is True


def test_an_inflated_partial_value_is_no_reference_beyond_its_finished_value():
    """On the H200 a batched server's partial value at the first decision read up to 136% of its
    full run: the reference is capped at the finished value, so a config as good as the best is
    kept; a partial below the finished value stays the reference (a shared early bias cancels)."""
    study = _study(margins=0.85)
    _finished(study, {128: 135.0}, 100.0, source="rules")
    assert _running(study, 128, 90.0).should_prune() is False  # 90 >= 0.85 x 100 (uncapped: < 0.85 x 135)
    assert _running(study, 128, 80.0).should_prune() is True
    low = _study(margins=0.85)
    _finished(low, {128: 80.0}, 100.0, source="rules")  # early values read low for everyone
    assert _running(low, 128, 72.0).should_prune() is False  # 72 >= 0.85 x 80
    assert _running(low, 128, 60.0).should_prune() is True
    minimize = _study("minimize", margins=0.85)
    _finished(minimize, {128: 60.0}, 100.0, source="rules")  # a latency that read low early
    assert _running(minimize, 128, 110.0).should_prune() is False  # against 100, not 60


def test_never_prunes_the_baselines():
    study = _study()
    _finished(study, {160: 100.0}, 100.0, source="sampler")
    for source in ("rules", "defaults"):
        t = _running(study, 160, 10.0, source=source)
        assert t.should_prune() is False


def test_no_finished_reference_no_pruning():
    study = _study()
    # a pruned trial's (or a running one's) values are no reference; only COMPLETE trials are
    pruned = study.ask()
    pruned.report(500.0, 160)
    study.tell(pruned, state=TrialState.PRUNED)
    t = _running(study, 160, 10.0)
    assert t.should_prune() is False
    # a reference at another step does not count either
    _finished(study, {192: 100.0}, 100.0)
    assert t.should_prune() is False


def test_minimize_prunes_clearly_higher_values():
    study = _study("minimize")
    _finished(study, {160: 100.0}, 100.0, source="rules")
    assert _running(study, 160, 230.0).should_prune() is True  # one wave in the window: above best / 0.45
    assert _running(study, 160, 210.0).should_prune() is False


def test_margins_are_checked():
    for bad in (1.5, 0.0, ((1.0, 0.5), (3.0, 1.2)), ()):
        with pytest.raises(ValueError):
            BestRelativePruner(bad)


def test_a_gate_below_one_wave_keeps_a_floor_of_completions():
    from servetune.tuner._pruning import MIN_WINDOW_COMPLETIONS, window_needs

    assert window_needs(64) == 64  # the default: one full wave
    assert window_needs(64, waves=0.5) == 32
    assert window_needs(128, waves=0.5) == 64
    # never down to the H200 study's 5-9 completions: a floor of MIN_WINDOW_COMPLETIONS, or a full wave when smaller
    assert window_needs(16, waves=0.5) == 16
    assert window_needs(48, waves=0.25) == MIN_WINDOW_COMPLETIONS
    assert not window_ready({"steady_completed": 31}, 64, waves=0.5)
    assert window_ready({"steady_completed": 32}, 64, waves=0.5)
