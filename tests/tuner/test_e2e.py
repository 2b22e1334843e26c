"""`servetune tune` end to end on the stand-in: real launches, real HTTP load, real failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.tuner.conftest import MODEL, load_trials, run_tune, tune_argv

# The baseline's p99 TTFT on the stand-in (128 requests, 64 in flight, time scale 0.5) read 300-1900 ms
# across runs of unchanged code on the 2-core CI machine (the code before session 5 too: 436, 1885,
# 1457 ms), so an 800 ms bound failed the whole module by chance; 2500 ms keeps the study feasible
# while the sampler's slower configs (1600-2000 ms when the machine is quiet) can still miss it.
SLO_MS = 2500.0
# The local phase's first trial is a one-field change of the baseline drawn with this seed:
# with 19 it is mem_fraction_static 0.94, which dies with CUDA OOM at start (the OOM test below).
SEED = 19


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """One seeded study with an SLO and OOM-prone values, shared by the assertions below."""
    import os

    from tests.tuner import conftest

    tmp = tmp_path_factory.mktemp("e2e")
    workload = tmp / "tuner-test.yaml"
    workload.write_text(conftest.WORKLOAD)
    space = tmp / "space.yaml"
    space.write_text(conftest.SPACE)
    env = dict(os.environ, SERVETUNE_STANDIN_TIME_SCALE="0.5", SERVETUNE_RUNS_DIR=str(tmp / "runs"))
    run_dir = tmp / "run"
    argv = tune_argv(
        workload,
        space,
        run_dir,
        "--slo",
        f"p99_ttft_ms<={SLO_MS:g}",
        "--confirm",
        "1",
        "--out",
        str(tmp / "best.yaml"),
        "--json",
        trials=10,
        seed=SEED,
    )
    code, data, stderr = run_tune(argv, env)
    assert code == 0, stderr
    return {"data": data, "tmp": tmp, "run_dir": run_dir, "stderr": stderr}


def _by_number(data):
    return {t["number"]: t for t in data["trials"]}


def test_baselines_run_first_and_the_result_is_at_least_the_baseline(study_run):
    data = study_run["data"]
    trials = _by_number(data)
    assert trials[0]["source"] == "rules" and trials[1]["source"] == "defaults"
    assert data["baseline"]["number"] == 0
    best = data["best"]
    assert best is not None
    if trials[0]["state"] == "COMPLETE" and trials[0]["feasible"]:
        assert best["values"][0] >= data["baseline"]["values"][0]
    assert data["ratio"] is not None and data["ratio"] >= 1.0
    assert set(data) >= {"best", "baseline", "trials"} and set(best) >= {"params", "metrics"}


def test_the_slo_is_respected(study_run):
    data = study_run["data"]
    assert data["best"]["metrics"]["p99_ttft_ms"] <= SLO_MS
    for t in data["trials"]:
        if t["state"] == "COMPLETE":
            assert t["feasible"] == (t["metrics"]["p99_ttft_ms"] <= SLO_MS), t


def test_oom_trials_are_infeasible_records_with_class_and_log_tail(study_run):
    data = study_run["data"]
    ooms = [t for t in data["trials"] if t["params"].get("mem_fraction_static") == 0.94]
    assert ooms, "the seeded study should try the OOM value at least once"
    assert any(t["source"] == "local" for t in ooms)
    for t in ooms:
        assert t["state"] == "FAIL" and t["failure"]["class"] == "oom"
        assert "metrics" not in t and "values" not in t
        if "not relaunched" not in t.get("note", ""):
            assert "out of memory" in t["failure"]["log_tail"].lower()


def test_a_config_identical_to_a_failed_one_is_not_relaunched(study_run):
    storage = f"sqlite:///{study_run['run_dir'] / 'study.db'}"
    trials = load_trials(storage)
    failed = {
        t.user_attrs["config_hash"]: t.number
        for t in trials
        if t.state.name == "FAIL" and "duplicate_of" not in t.user_attrs
    }
    for t in trials:
        if "duplicate_of" in t.user_attrs and t.state.name == "FAIL":
            assert failed[t.user_attrs["config_hash"]] == t.user_attrs["duplicate_of"]
            assert not (Path(t.user_attrs["run_dir"]) / "server.log").exists()
    hashes = [
        t.user_attrs.get("config_hash") for t in trials if t.state.name == "FAIL" and "duplicate_of" not in t.user_attrs
    ]
    assert len(hashes) == len(set(hashes)), "a failed config was launched twice"


def test_the_preset_carries_the_evidence_and_resolves(study_run):
    path = study_run["tmp"] / "best.yaml"
    preset = yaml.safe_load(path.read_text())
    from servetune.schema.preset import Preset

    Preset.model_validate(preset)
    ev = preset["evidence"]
    for key in ("metrics", "baseline_metrics", "best_trial", "trials", "ratio", "model", "workload", "sglang_version"):
        assert key in ev, key
    assert preset["made_for"]["model"] == MODEL
    assert preset["set"] == study_run["data"]["best"]["set"]
    from servetune.api import resolve_launch

    res = resolve_launch(MODEL, gpu="h200", preset=str(path))
    for field, value in preset["set"].items():
        assert res.requested().get(field, res.env().get(field)) in (value, str(value))


def test_the_report_reads_the_study_back(study_run, tmp_path):
    import subprocess

    storage = f"sqlite:///{study_run['run_dir'] / 'study.db'}"
    out = subprocess.run(
        [sys.executable, "-m", "servetune", "tune", "report", "--storage", storage, "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "tuned/baseline" in out.stdout and "oom" in out.stdout
    assert (tmp_path / "summary.json").exists() and (tmp_path / "history.html").exists()
    # where the trials' time went: the medians of what each launched trial's run directory recorded
    import json
    import statistics

    tt = json.loads((tmp_path / "summary.json").read_text())["trial_time"]
    recorded = [json.loads(p.read_text())["timings"] for p in study_run["run_dir"].glob("trial-*/result.json")]
    assert tt["trials"] == len(recorded) > 0
    assert tt["total_s"] == pytest.approx(statistics.median(r["total_s"] for r in recorded), abs=0.06)
    started = [r["startup_phases"]["engine_s"] for r in recorded if r.get("startup_phases")]
    assert tt["startup_phases"]["engine_s"] == pytest.approx(statistics.median(started), abs=0.06)
    assert f"trial time (median of {tt['trials']} launches): {tt['total_s']:g} s = start" in out.stdout


def test_pareto_objectives_report_a_front_and_gpu_sets(tune_env, workload_file, space_file, tmp_path):
    argv = tune_argv(
        workload_file,
        space_file,
        tmp_path / "run",
        "--objective",
        "throughput,p99_ttft",
        "--confirm",
        "0",
        "--json",
        "--gpus",
        "0,1",
        trials=5,
    )
    code, data, stderr = run_tune(argv, tune_env)
    assert code == 0, stderr
    assert [o["direction"] for o in data["objectives"]] == ["maximize", "minimize"]
    assert data["pareto_front"] and data["best"]["number"] in data["pareto_front"]
    storage = f"sqlite:///{tmp_path / 'run' / 'study.db'}"
    slots = {t.user_attrs["worker"]["slot"] for t in load_trials(storage)}
    assert slots <= {0, 1}
    envs = [(Path(t.user_attrs["run_dir"]) / "env.json") for t in load_trials(storage) if t.state.name == "COMPLETE"]
    assert any('"CUDA_VISIBLE_DEVICES"' in p.read_text() for p in envs if p.exists())
