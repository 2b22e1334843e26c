"""`--objective capacity` on the FakeRunner (a queueing model per config, no process): baselines run
the full search, later trials start at the incumbent's capacity and a trial cut there is PRUNED
(`below_floor`), a config that misses at the lowest rate is FAIL `slo_unmet`, confirmation
re-measures capacity interleaved, and the study refuses a resume with other SLOs or settings.
The runaway guard of throughput studies: references, deadlines and `too_slow` as a config failure."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from servetune.bench.slo import parse_slos
from servetune.errors import SpecError, TuningError
from servetune.runner import RUNAWAY_FACTOR, Failure
from servetune.testing import FakeRunner
from servetune.tuner import TuneOptions, Tuner, build_preset
from tests.bench.queue_model import model_records

SPACE = """\
summary: running limit only
tune:
  max_running_requests: {choice: [1, 2, 4, 8]}
"""
SLO = "p99_ttft_ms<=200"


def _capacity_runner(calls_at: list | None = None) -> FakeRunner:
    """Capacity steps from a queueing model whose slots are the config's max_running_requests
    (1 slot: prefill alone misses the bound, so that config can never meet it)."""

    def measure(call):
        slots = int(call.values.get("max_running_requests") or 2)
        rate = call.workload.request_rate
        if calls_at is not None:
            calls_at.append((slots, rate))
        prefill = 0.25 if slots == 1 else 0.02
        return model_records(call, slots=slots, prefill_s=prefill)

    def server_info(call):  # what SGLang's /server_info reports: the running limit in effect
        return {"max_running_requests": int(call.values.get("max_running_requests") or 2)}

    return FakeRunner(measure, server_info=server_info)


def _options(tmp_path, space_file, **kw) -> TuneOptions:
    base = dict(
        model="qwen3-8b",
        gpu="h200",
        workload="text-chat",
        space_file=str(space_file),
        sets=(),
        objective="capacity",
        slos=(SLO,),
        start_rate=4.0,
        resolution=0.1,
        step_seconds=60.0,
        confirm_soak_seconds=60.0,
        trials=6,
        seed=3,
        sampler="random",
        confirm_rounds=0,
        run_dir=tmp_path / "study",
        client="builtin",
        no_rules=True,
    )
    base.update(kw)
    return TuneOptions(**base)


@pytest.fixture
def cap_space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return path


def test_a_capacity_study_floors_later_trials_at_the_incumbent_and_records_its_search(tmp_path, cap_space):
    """The baseline searches from the start rate with no floor; each later trial is screened by one step
    at the best capacity so far plus the resolution (10%); those that miss it are PRUNED below_floor
    after that step; slots=1 is slo_unmet."""
    at: list = []
    runner = _capacity_runner(at)
    tuner = Tuner(_options(tmp_path, cap_space), runner=runner)
    result = tuner.run()
    trials = sorted(tuner.study.get_trials(deepcopy=False), key=lambda t: t.number)
    base = next(t for t in trials if t.user_attrs.get("source") == "rules")
    assert base.state == TrialState.COMPLETE and base.user_attrs["floor"] is None
    assert base.user_attrs["capacity"]["steps"][0]["rate"] == 4.0
    best, cut = base.values[0], 0
    for t in trials:
        if "duplicate_of" in t.user_attrs or t.user_attrs.get("source") in ("rules", "defaults"):
            continue
        if t.user_attrs.get("not_launched"):  # the server model ruled it out: no launch, no floor
            assert t.state == TrialState.PRUNED and t.user_attrs["pruned"]["why"] == "predicted_below"
            continue
        floor = t.user_attrs["floor"]
        assert floor == pytest.approx(best * 1.1)
        steps = t.user_attrs["capacity"]["steps"]
        if t.state == TrialState.PRUNED:
            cut += 1
            assert t.user_attrs["pruned"] == {"why": "below_floor", "floor": floor}
            assert len(steps) == 1 and steps[0]["rate"] == pytest.approx(floor) and not steps[0]["met"]
        else:
            assert t.state == TrialState.COMPLETE and steps[0]["rate"] == pytest.approx(floor)
            assert t.values[0] >= floor and len(steps) > 1
            best = max(best, t.values[0])
    assert cut >= 1
    by_mrr = {
        t.user_attrs["params"].get("max_running_requests"): t for t in trials if "duplicate_of" not in t.user_attrs
    }
    assert by_mrr[8].state == TrialState.COMPLETE and by_mrr[8].values[0] > 2 * base.values[0]
    assert result.best.params["max_running_requests"] == 8
    preset = build_preset(result)
    cap = preset["evidence"]["capacity"]
    assert cap["slos"] == [SLO] and cap["best"]["request_rate"] == pytest.approx(result.best.values[0], rel=1e-3)
    assert cap["search"]["start_rate"] == 4.0 and cap["baseline"]["request_rate"] == pytest.approx(
        base.values[0], rel=1e-3
    )
    assert preset["evidence"]["metrics"]["capacity_request_rate"] == pytest.approx(result.best.values[0], rel=1e-3)


def test_a_config_that_cannot_meet_the_slo_at_any_rate_is_slo_unmet_and_not_relaunched(tmp_path, cap_space):
    """A baseline of one slot misses at every rate down to the lowest: FAIL slo_unmet (a config failure)."""
    preset = tmp_path / "one.yaml"
    preset.write_text("name: one\nsummary: One request at a time.\nset:\n  max_running_requests: 1\n")
    runner = _capacity_runner()
    opts = _options(tmp_path, cap_space, preset=str(preset), trials=2, start_rate=0.2)
    tuner = Tuner(opts, runner=runner)
    tuner.run()
    trials = tuner.study.get_trials(deepcopy=False)
    assert trials[0].state == TrialState.FAIL and trials[0].user_attrs["failure"]["class"] == "slo_unmet"
    assert "not met at any rate tried" in trials[0].user_attrs["failure"]["message"]


def test_confirmation_remeasures_capacity_interleaved(tmp_path, cap_space):
    """B F B F: the finalist's capacity search starts at its own capacity; ratios and a verdict."""
    at: list = []
    tuner = Tuner(_options(tmp_path, cap_space, confirm_rounds=2, trials=4), runner=_capacity_runner(at))
    result = tuner.run()
    conf = result.confirmation
    assert conf["objective"] == "capacity" and conf["rounds"] == 2
    (fin,) = conf["finalists"]
    assert len(fin["values"]) == 2 and len(conf["baseline_values"]) == 2
    assert fin["ratios"] == pytest.approx([f / b for f, b in zip(fin["values"], conf["baseline_values"])])
    assert fin["verdict"] == "better" and conf["chosen_trial"] == fin["trial"]
    assert result.ratio() == pytest.approx(fin["median"])
    # the confirmation ends with soaks: the winner from its median capacity down until one holds (at most
    # two), the baseline at the rate the winner held
    soaks = {k["trial"]: k for k in conf["soaks"]}
    assert set(soaks) == {fin["trial"], conf["baseline_trial"]}
    median = sorted(fin["values"])[0] + (sorted(fin["values"])[1] - sorted(fin["values"])[0]) / 2
    won, base = soaks[fin["trial"]], soaks[conf["baseline_trial"]]
    tried = won.get("tried") or [won]
    assert tried[0]["rate"] == pytest.approx(median) and len(tried) <= 2
    if len(tried) == 2:
        assert tried[0]["state"] != "met" and tried[1]["rate"] == pytest.approx(median / 1.1)  # resolution 0.1
    assert won["rate"] == tried[-1]["rate"] and conf["sustained"] == (won["rate"] if won["state"] == "met" else None)
    assert base["rate"] == pytest.approx(won["rate"]) and base["state"] != "met"
    assert won["seconds"] == base["seconds"] == 60.0
    assert build_preset(result)["evidence"]["confirmation"]["soaks"]


def test_capacity_slos_are_checked_and_a_resume_with_other_settings_is_refused(tmp_path, cap_space):
    runner = _capacity_runner()
    with pytest.raises(SpecError, match="--objective capacity needs at least one latency --slo"):
        Tuner(_options(tmp_path, cap_space, slos=()), runner=runner).prepare()
    with pytest.raises(SpecError, match="unknown statistic 'p98'"):
        Tuner(_options(tmp_path, cap_space, slos=("p98_ttft_ms<=100",)), runner=runner).prepare()
    with pytest.raises(SpecError, match="bounds steady_request_throughput, not a latency"):
        Tuner(_options(tmp_path, cap_space, slos=("steady_request_throughput>=3",)), runner=runner).prepare()
    with pytest.raises(SpecError, match="capacity is searched alone"):
        Tuner(_options(tmp_path, cap_space, objective="capacity,p99_ttft"), runner=runner).prepare()
    with pytest.raises(SpecError, match="--resolution must be positive"):
        Tuner(_options(tmp_path, cap_space, resolution=0.0), runner=runner).prepare()
    Tuner(_options(tmp_path, cap_space, trials=1), runner=runner).run()
    with pytest.raises(TuningError, match=r"SLOs \['p99_ttft_ms<=200'\] vs \['p99_ttft_ms<=300'\]"):
        Tuner(_options(tmp_path, cap_space, trials=1, slos=("p99_ttft_ms<=300",)), runner=runner).prepare()
    with pytest.raises(TuningError, match="capacity search"):
        Tuner(_options(tmp_path, cap_space, trials=1, confidence=0.9), runner=runner).prepare()
    with pytest.raises(TuningError, match="capacity search"):
        Tuner(_options(tmp_path, cap_space, trials=1, bracket_factor=1.25), runner=runner).prepare()
    # throughput studies keep their generic constraints
    assert parse_slos([SLO])[0].key == "p99_ttft_ms"


def test_the_runaway_guard_takes_the_best_finished_rate_and_too_slow_is_a_config_failure(
    tmp_path, cap_space, monkeypatch
):
    """Baselines run unguarded; later trials get deadlines from the best finished trial's req/s; a
    too_slow trial counts as a launch, is never retried, and its config is not relaunched."""
    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))

    def measure(call):
        mrr = int(call.values.get("max_running_requests") or 2)
        if mrr == 1:
            return Failure(cls="too_slow", stage="bench", message="too slow: 0 of the first 128 requests")
        return {"comparable_request_throughput": 10.0 * mrr, "completed": call.total}

    runner = FakeRunner(measure)
    opts = _options(tmp_path, cap_space, objective="throughput", slos=(), trials=5, requests=256)
    tuner = Tuner(opts, runner=runner)
    tuner.run()
    trials = tuner.study.get_trials(deepcopy=False)
    assert runner.calls[0].guard is None  # the baseline
    seen_best = 0.0
    for call, t in zip(runner.calls, [t for t in trials if "duplicate_of" not in t.user_attrs]):
        if t.user_attrs.get("source") in ("rules", "defaults"):
            assert call.guard is None
        else:
            assert call.guard is not None and t.user_attrs["guard"]["reference_rate"] == pytest.approx(seen_best)
            assert call.guard.wave == 128 and call.guard.total_s == pytest.approx(
                RUNAWAY_FACTOR * 256 / seen_best + 15.0
            )
        if t.state == TrialState.COMPLETE:
            seen_best = max(seen_best, t.values[0])
    slow = [t for t in trials if t.user_attrs.get("params", {}).get("max_running_requests") == 1]
    assert slow and slow[0].user_attrs["failure"]["class"] == "too_slow"
    assert all(t.state == TrialState.FAIL for t in slow)
    assert sum(1 for c in runner.calls if c.values.get("max_running_requests") == 1) == 1  # never relaunched
    assert not any("retry_of" in t.user_attrs for t in trials)


@pytest.mark.parametrize(("confirm_step", "expected_step"), [(None, 60.0), (90.0, 90.0)])
def test_confirmation_steps_take_the_study_length_unless_told(tmp_path, cap_space, confirm_step, expected_step):
    """The confirmation's searches run steps of at most --step-seconds (60 here), or
    --confirm-step-seconds; each round is seeded by its number, so the baseline and the finalist meet
    the same step sequences in one round and new ones in the next."""
    calls: list = []

    def measure(call):
        slots = int(call.values.get("max_running_requests") or 2)
        calls.append((call.run_dir, call.workload.request_rate, call.requests, call.workload.seed))
        return model_records(call, slots=slots, prefill_s=0.25 if slots == 1 else 0.02)

    opts = _options(tmp_path, cap_space, confirm_rounds=2, trials=4, confirm_step_seconds=confirm_step)
    result = Tuner(opts, runner=FakeRunner(measure)).run()
    assert result.confirmation["step_s"] == expected_step
    confirming = [
        c for c in calls if "confirm" in c[0].parts and c[1] is not None and not any("soak" in x for x in c[0].parts)
    ]
    assert confirming
    for _, rate, requests, _ in confirming:
        assert requests >= int(rate * expected_step * 1.2) + 50
    rounds: dict = {}
    for run_dir, _, _, seed in confirming:
        rounds.setdefault(run_dir.parent.name.split("-")[0], {}).setdefault(run_dir.parent.name, []).append(seed)
    for name, by_trial in rounds.items():
        firsts = {seeds[0] for seeds in by_trial.values()}
        assert len(firsts) == 1, (name, by_trial)  # one round, one first step for every config
    assert len({next(iter(v.values()))[0] for v in rounds.values()}) == len(rounds)  # rounds differ


def test_the_written_preset_launches_what_the_winner_ran_over_the_study_preset(tmp_path, cap_space):
    """A study run over `--preset` writes the winner over that preset's values, secrets left out:
    resolving the written file alone gives the winner's launch, less the secret (passed again)."""
    from servetune.api import resolve_launch
    from servetune.tuner import write_preset

    preset = tmp_path / "under.yaml"
    preset.write_text(
        "name: under\nsummary: Values under every trial.\nset:\n  schedule_conservativeness: 1.3\n"
        "  chunked_prefill_size: 4096\n  api_key: sk-under-the-trials-0123456789\n"
    )
    launched: dict = {}

    def measure(call):
        launched[next(p for p in call.run_dir.parts if p.startswith("trial-"))] = call.resolution
        slots = int(call.values.get("max_running_requests") or 2)
        return model_records(call, slots=slots, prefill_s=0.02)

    result = Tuner(_options(tmp_path, cap_space, preset=str(preset), trials=4), runner=FakeRunner(measure)).run()
    written = build_preset(result)
    assert written["set"]["schedule_conservativeness"] == 1.3 and written["set"]["chunked_prefill_size"] == 4096
    assert "api_key" not in written["set"] and written["evidence"]["study_preset"] == str(preset)
    assert written["set"]["max_running_requests"] == result.best.params["max_running_requests"]
    path = write_preset(result, tmp_path / "best.yaml")
    assert "sk-under-the-trials" not in path.read_text()
    again = resolve_launch("qwen3-8b", gpu="h200", workload="text-chat", preset=path, use_rules=False)
    ran = launched[f"trial-{result.best.number:04d}"]
    assert {k: v for k, v in ran.requested().items() if k != "api_key"} == again.requested()
    assert "api_key" in ran.requested()


@pytest.mark.parametrize(
    ("confirm", "says"),
    [
        (0, "a certified capacity search per trial from 4 req/s, steps up to 60 s at 95% confidence"),
        (
            1,
            "a certified capacity search per trial from 4 req/s, steps up to 60 s at 95% confidence "
            "(confirmation: steps up to 60 s, then 60 s soaks)",
        ),
    ],
)
def test_the_study_line_says_what_a_capacity_trial_measures(tmp_path, cap_space, confirm, says):
    """Not `N requests per trial` (a capacity trial's request count follows its rates)."""
    from servetune.tuner.events import StudyStarted

    seen: list = []
    Tuner(
        _options(tmp_path, cap_space, trials=2, confirm_rounds=confirm), runner=_capacity_runner(), on_event=seen.append
    ).run()
    (started,) = [e for e in seen if isinstance(e, StudyStarted)]
    assert started.measure == says


def test_confirming_a_resumed_study_again_keeps_the_earlier_confirmation(tmp_path, cap_space, capsys, monkeypatch):
    """A second confirmation (here with 90 s steps after the default 60 s) gets its own directory, past
    one an interrupted confirmation left, and its own record: the first one's stay, the report shows both."""
    from servetune.tuner import load_result
    from servetune.tuner.report import print_summary

    calls: list = []

    def runner():
        def measure(call):
            calls.append(call.run_dir)
            slots = int(call.values.get("max_running_requests") or 2)
            return model_records(call, slots=slots, prefill_s=0.02)

        return FakeRunner(measure)

    first = Tuner(_options(tmp_path, cap_space, confirm_rounds=1, trials=4), runner=runner())
    first.run()
    assert any("confirm" in p.parts for p in calls)
    calls.clear()
    left = tmp_path / "study" / "confirm-2" / "r1-trial-0000"  # an interrupted confirmation's leftovers
    left.mkdir(parents=True)
    (left / "server.log").write_text("interrupted\n")
    again = Tuner(_options(tmp_path, cap_space, confirm_rounds=1, trials=4, confirm_step_seconds=90.0), runner=runner())
    result = again.run()
    assert calls and all("confirm-3" in p.parts for p in calls), calls
    assert (left / "server.log").read_text() == "interrupted\n"
    history = again.study.user_attrs["confirmations"]
    assert [c["step_s"] for c in history] == [60.0, 90.0]
    assert again.study.user_attrs["confirmation"] == history[-1] and result.confirmation["step_s"] == 90.0
    assert history[0]["run_dir"].endswith("confirm") and history[1]["run_dir"].endswith("confirm-3")
    loaded = load_result(again.study, again.storage_url)
    assert loaded.confirmations == history
    monkeypatch.setenv("COLUMNS", "300")
    print_summary(loaded)
    out = capsys.readouterr().out
    assert "with steps up to 90 s" in out and "an earlier confirmation" in out and "with steps up to 60 s" in out


def test_tune_report_into_a_file_is_not_folded_to_80_columns(tmp_path, cap_space):
    """Fleet jobs keep reports as files: the table is 200 columns wide there, so a trial's params
    stay on its row instead of folding into rich's default 80 (COLUMNS still wins)."""
    import os
    import subprocess
    import sys

    tuner = Tuner(_options(tmp_path, cap_space, trials=3), runner=_capacity_runner())
    tuner.run()
    argv = [
        sys.executable,
        "-m",
        "servetune",
        "tune",
        "report",
        "--storage",
        tuner.storage_url,
        "--study",
        tuner.study.study_name,
    ]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    lines = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    assert max(len(line) for line in lines) > 80 and all(len(line) <= 200 for line in lines)
    (row,) = [line for line in lines if "│ 0 " in line]
    assert "max_running_requests=" in row
    narrow = subprocess.run(argv, env={**env, "COLUMNS": "80"}, capture_output=True, text=True, timeout=120).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80


def test_a_finalist_not_confirmed_better_hands_over_to_the_next(tmp_path, cap_space):
    """The best trial (8 slots) serves like the baseline whenever it is re-measured: its confirmation is
    not `better`, so the next finalist (4 slots) is confirmed against the same baseline rounds, measured
    once, and adopted."""
    runs: list = []

    def measure(call):
        slots = int(call.values.get("max_running_requests") or 2)
        confirming = any(part.startswith("confirm") for part in call.run_dir.parts)
        if confirming:
            runs.append((slots, call.run_dir.parent.parent.name if call.run_dir.parent.name == "steps" else ""))
        if confirming and slots == 8:
            slots = 2  # it won the study by luck: re-measured it is the baseline
        return model_records(call, slots=slots, prefill_s=0.25 if slots == 1 else 0.02)

    runner = FakeRunner(measure, server_info=lambda call: {"max_running_requests": 2})
    opts = _options(  # no model seed: the study measures 4 slots before 8, so both are finalists
        tmp_path, cap_space, confirm_rounds=2, trials=6, finalists=3, confirm_soak_seconds=0.0, model_seed=False
    )
    result = Tuner(opts, runner=runner).run()
    conf = result.confirmation
    first, second = conf["finalists"]
    assert first["verdict"] != "better" and second["verdict"] == "better"
    assert conf["chosen_trial"] == second["trial"] and result.ratio() == pytest.approx(second["median"])
    assert result.best.params["max_running_requests"] == 4
    baseline_launches = {d for slots, d in runs if slots == 2 and d.endswith(f"trial-{conf['baseline_trial']:04d}")}
    assert len(baseline_launches) == 2  # two rounds, shared by both finalists


def test_no_finalist_confirmed_better_keeps_the_baseline_and_says_why(tmp_path, cap_space):
    def measure(call):
        slots = int(call.values.get("max_running_requests") or 2)
        if any(part.startswith("confirm") for part in call.run_dir.parts):
            slots = 2  # every finalist serves like the baseline when re-measured
        return model_records(call, slots=slots, prefill_s=0.25 if slots == 1 else 0.02)

    runner = FakeRunner(measure, server_info=lambda call: {"max_running_requests": 2})
    opts = _options(
        tmp_path, cap_space, confirm_rounds=2, trials=6, finalists=2, confirm_soak_seconds=0.0, model_seed=False
    )
    result = Tuner(opts, runner=runner).run()
    conf = result.confirmation
    assert conf["chosen_trial"] == conf["baseline_trial"] and len(conf["finalists"]) == 2
    assert all(f["verdict"] != "better" for f in conf["finalists"])
    assert "the baseline is kept" in conf["note"] and f"trial {conf['finalists'][0]['trial']}" in conf["note"]
    assert result.ratio() == pytest.approx(1.0)


def test_a_winner_whose_soak_does_not_hold_is_soaked_one_resolution_lower_and_the_baseline_there(
    tmp_path, cap_space, capsys
):
    """The confirmation's soaks step down (`CONFIRM_SOAK_TRIES`): the winner's first soak meets a slow
    server (prefill alone over the bound), its second, one resolution lower, a fast one; the baseline
    is soaked at the rate the winner held, and the record's `sustained` is that rate."""

    def measure(call):
        slots = int(call.values.get("max_running_requests") or 2)
        first_soak = "soaks" in call.run_dir.parts and call.run_dir.name.startswith("01-")
        return model_records(call, slots=slots, prefill_s=0.25 if slots == 1 or first_soak else 0.02)

    opts = _options(tmp_path, cap_space, confirm_rounds=2, trials=4)
    result = Tuner(opts, runner=FakeRunner(measure)).run()
    conf = result.confirmation
    winner = conf["chosen_trial"]
    soaks = {k["trial"]: k for k in conf["soaks"]}
    won = soaks[winner]
    first, second = won["tried"]
    assert first["state"] != "met" and second["state"] == "met", won["why"]
    assert second["rate"] == pytest.approx(first["rate"] / 1.1)  # resolution 0.1
    assert won["rate"] == second["rate"] and conf["sustained"] == pytest.approx(second["rate"])
    if conf["baseline_trial"] != winner:
        assert soaks[conf["baseline_trial"]]["rate"] == pytest.approx(second["rate"])
        assert "tried" not in soaks[conf["baseline_trial"]]  # the baseline gets one soak
    # `tune report` says both tries and the sustained rate
    from servetune.tuner.report import print_report

    print_report(result)
    out = " ".join(capsys.readouterr().out.split())
    assert f"soak of trial {winner} at {first['rate']:.4g} {first['state']}, {second['rate']:.4g} req/s: met" in out
    assert f"sustained {second['rate']:.4g} req/s" in out


def test_the_default_bracket_factor_is_not_stored_so_studies_stored_before_it_resume():
    """A study's search settings are stored and a resume under others is refused; the bracket factor became
    an option later, so its default (the factor every earlier study searched with) is left out of the
    record and an earlier study's stored settings still match; another factor is stored."""
    from servetune.runner import CapacitySearch

    assert "bracket" not in CapacitySearch().record()
    assert CapacitySearch(bracket=1.25).record()["bracket"] == 1.25
    assert CapacitySearch(bracket=1.25).settings()["bracket"] == 1.25
