"""A study reads its facts, catalogs, rules and preset once (one `Context`) and resolves every
trial, baseline and confirmation run from it; `--rules`, `--no-rules` and `--nnodes` reach it."""

from __future__ import annotations

import pytest

from servetune.testing import FakeRunner
from servetune.tuner import TuneOptions, Tuner
from tests.tuner.conftest import SPACE, WORKLOAD, load_trials, run_tune, tune_argv

LPM_RULE = """\
rules:
  - id: test-lpm-on-hopper
    summary: LPM scheduling on Hopper (a test rule).
    why: A rule this model and GPU match, so the rules baseline differs from SGLang's defaults.
    when: {gpu.arch: sm90}
    set: {schedule_policy: lpm}
"""


def _score(call):
    """Throughput rises with max_running_requests (SGLang's auto counts as 64)."""
    mrr = call.values.get("max_running_requests") or 64
    return {"comparable_request_throughput": 100.0 + mrr / 10, "completed": call.total}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "lpm.yaml").write_text(LPM_RULE)
    return tmp_path


def _options(tmp_path, **kw) -> TuneOptions:
    base = dict(
        model="qwen3-8b",
        gpu="h200",
        workload=str(tmp_path / "w.yaml"),
        space_file=str(tmp_path / "space.yaml"),
        trials=6,
        seed=0,
        prune=False,
        confirm_rounds=0,
        run_dir=tmp_path / "study",
    )
    return TuneOptions(**{**base, **kw})


def test_a_study_detects_hardware_and_loads_rules_once(files, monkeypatch):
    """Six trials and a confirmation round resolve from one Context: NVML detection, rule loading
    and the Context build each happen once, not per trial (the tuner once rebuilt them per resolve)."""
    from servetune import hardware
    from servetune.context import Context
    from servetune.rules import loader

    counts = {"build": 0, "detect": 0, "load_rules": 0}
    real_build, real_load = Context.build.__func__, loader.load_rules

    def build(cls, *args, **kwargs):
        counts["build"] += 1
        return real_build(cls, *args, **kwargs)

    def detect(*args, **kwargs):
        counts["detect"] += 1
        return hardware.named_profile("h200")

    def load_rules(*args, **kwargs):
        counts["load_rules"] += 1
        return real_load(*args, **kwargs)

    monkeypatch.setattr(Context, "build", classmethod(build))
    monkeypatch.setattr(hardware, "detect", detect)
    monkeypatch.setattr(loader, "load_rules", load_rules)
    runner = FakeRunner(_score)
    tuner = Tuner(_options(files, gpu=None, confirm_rounds=1), runner=runner)
    result = tuner.run()
    assert result.confirmation is not None  # the confirmation measured too
    assert len(runner.calls) >= 6 + 2
    assert counts == {"build": 1, "detect": 1, "load_rules": 1}


def test_extra_rules_set_the_rules_baseline_and_no_rules_leaves_them_out(files):
    ruled = Tuner(_options(files, rules=(str(files / "lpm.yaml"),), nnodes=1, trials=3), runner=FakeRunner(_score))
    ruled.run()
    trials = ruled.study.get_trials(deepcopy=False)
    by_source = {t.user_attrs["source"]: t for t in reversed(trials)}
    assert "--schedule-policy" in by_source["rules"].user_attrs["argv"]
    assert "--schedule-policy" not in by_source["defaults"].user_attrs["argv"]
    for t in trials:
        argv = t.user_attrs["argv"]
        assert argv[argv.index("--nnodes") + 1] == "1"
        assert ("--schedule-policy" in argv) == (t.user_attrs["source"] != "defaults")

    plain = Tuner(
        _options(files, rules=(str(files / "lpm.yaml"),), no_rules=True, trials=3, study="no-rules"),
        runner=FakeRunner(_score),
    )
    plain.run()
    trials = plain.study.get_trials(deepcopy=False)
    assert all("--schedule-policy" not in t.user_attrs["argv"] for t in trials)
    rules, defaults = trials[0], trials[1]
    assert rules.user_attrs["source"] == "rules" and defaults.user_attrs["source"] == "defaults"
    assert defaults.user_attrs["duplicate_of"] == rules.number  # the same launch: not run twice
    assert rules.user_attrs["argv"] == plain.resolve({}, use_rules=False).argv()


def test_the_tune_command_passes_rules_no_rules_and_nnodes(tune_env, workload_file, space_file, tmp_path):
    """`servetune tune --rules FILE --no-rules --nnodes 1` on the stand-in: the rule file is read
    (a missing one is an error before any launch), no rule applies, and nnodes is pinned."""
    rule = tmp_path / "lpm.yaml"
    rule.write_text(LPM_RULE)
    missing = tmp_path / "missing.yaml"
    code, _, stderr = run_tune(
        tune_argv(workload_file, space_file, tmp_path / "bad", "--rules", str(missing), trials=2), tune_env
    )
    assert code == 1 and "missing.yaml" in stderr and "Traceback" not in stderr
    run_dir = tmp_path / "run"
    argv = tune_argv(
        workload_file,
        space_file,
        run_dir,
        "--rules",
        str(rule),
        "--no-rules",
        "--nnodes",
        "1",
        "--confirm",
        "0",
        trials=2,
    )
    code, _, stderr = run_tune(argv, tune_env)
    assert code == 0, stderr
    trials = load_trials(f"sqlite:///{run_dir / 'study.db'}")
    assert trials[0].user_attrs["source"] == "rules"
    for t in trials:
        argv = t.user_attrs["argv"]
        assert "--schedule-policy" not in argv
        assert argv[argv.index("--nnodes") + 1] == "1"


def test_a_study_without_run_dir_goes_under_the_runs_directory(files, monkeypatch):
    """`$SERVETUNE_RUNS_DIR` holds tune's studies too (runs/tune/<study>), so `servetune runs` finds
    their servers where it finds every other run."""
    monkeypatch.chdir(files)
    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(files / "elsewhere"))
    tuner = Tuner(_options(files, run_dir=None, study="s1", trials=1), runner=FakeRunner(_score))
    tuner.prepare()
    assert tuner.setup.run_dir == files / "elsewhere" / "tune" / "s1"
    assert (files / "elsewhere" / "tune" / "s1" / "study.db").is_file()
    assert not (files / "runs").exists()
