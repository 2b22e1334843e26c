"""On the stand-in (real launches): the planted 20x slower config (`--mm-attention-backend sdpa`)
is cut in its first wave, as `too_slow` in a throughput study and below the incumbent's capacity in
a capacity study, whose best config beats the baseline's capacity."""

from __future__ import annotations

import sys

import yaml

from servetune.testing.standin import expected_throughput
from tests.tuner.conftest import GPU, MODEL, STANDIN, interrupt_when, load_trials, run_tune

SLOW_LOAD = """\
name: slow-test
summary: 128 requests, 64 in flight, long enough answers that a 20x slower server misses its first wave.
kind: text
requests: 128
max_concurrency: 64
input_tokens: 128
output_tokens: 128
warmup_requests: 4
seed: 1
"""


def _argv(tmp_path, workload: str, space: str, *extra: str) -> list[str]:
    (tmp_path / "w.yaml").write_text(workload)
    (tmp_path / "space.yaml").write_text(space)
    return [
        sys.executable, "-m", "servetune", "tune", "--model", MODEL, "--gpu", GPU,
        "--workload", str(tmp_path / "w.yaml"), "--space", str(tmp_path / "space.yaml"),
        "--sglang-cmd", STANDIN, "--run-dir", str(tmp_path / "run"), "--no-rules", "--quiet", "--json",
        "--confirm", "0", "--seed", "1", *extra,
    ]  # fmt: skip


def test_a_throughput_study_stops_the_slow_config_in_its_first_wave_as_too_slow(tune_env, tmp_path):
    """The sdpa trial misses the first-wave deadline taken from the best finished trial: FAIL
    too_slow, after far less bench time than its full run would take."""
    space = "summary: the planted slow backend\ntune:\n  mm_attention_backend: {choice: [fa3, sdpa]}\n"
    code, data, stderr = run_tune(_argv(tmp_path, SLOW_LOAD, space, "--trials", "3", "--sampler", "random"), tune_env)
    assert code == 0, stderr
    trials = load_trials(f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    sdpa = [t for t in trials if t.user_attrs.get("params", {}).get("mm_attention_backend") == "sdpa"]
    slow = [t for t in sdpa if "duplicate_of" not in t.user_attrs]
    assert len(slow) == 1, [t.user_attrs.get("params") for t in trials]
    # proposed again: a config failure, so the failure is copied and the config not relaunched
    assert all(t.user_attrs["failure"]["class"] == "too_slow" for t in sdpa)
    failure, guard = slow[0].user_attrs["failure"], slow[0].user_attrs["guard"]
    assert failure["class"] == "too_slow" and "of the first 64 requests" in failure["message"]
    base = next(t for t in trials if t.user_attrs.get("source") == "rules")
    assert guard["reference_rate"] >= base.user_attrs["metrics"]["comparable_request_throughput"] * 0.999
    full_run_s = (
        128
        / expected_throughput(
            ["--mm-attention-backend", "sdpa"], concurrency=64, input_tokens=128, output_tokens=128, time_scale=0.5
        ).request_throughput
    )
    bench_s = slow[0].user_attrs["timing"]["bench_s"]
    assert bench_s < 0.6 * full_run_s, (bench_s, full_run_s)  # cut well before the run would have ended
    assert data["best"]["params"].get("mm_attention_backend") != "sdpa"


CAP_LOAD = """\
name: cap-test
summary: Short text requests for capacity searches on the stand-in.
kind: text
requests: 64
max_concurrency: 16
input_tokens: 64
output_tokens: 32
warmup_requests: 2
seed: 1
"""
PRESET = """\
name: two-at-a-time
summary: A conservative running limit, under the trials.
set:
  max_running_requests: 2
  mm_attention_backend: fa3
"""
CAP_SPACE = """\
summary: the running limit and the planted slow backend
tune:
  max_running_requests: {choice: [2, 8]}
  mm_attention_backend: {choice: [fa3, sdpa]}
"""


def test_a_capacity_study_beats_the_baseline_and_cuts_the_slow_config(tune_env, tmp_path):
    """The local phase tries both one-field changes of the baseline: max_running_requests=8 carries
    more load within the SLO; sdpa misses at the incumbent's capacity in its first step (PRUNED
    below_floor). The written preset's evidence holds the SLO and the capacities."""
    (tmp_path / "preset.yaml").write_text(PRESET)
    out = tmp_path / "best.yaml"
    argv = _argv(
        tmp_path, CAP_LOAD, CAP_SPACE, "--preset", str(tmp_path / "preset.yaml"), "--objective", "capacity",
        "--slo", "p90_ttft_ms<=150", "--start-rate", "16", "--step-seconds", "8", "--step-warmup-seconds", "0.5",
        "--backlog-seconds", "2", "--warmup-wave", "4", "--resolution", "0.25", "--trials", "3", "--local-trials", "2",
        "--out", str(out),
    )  # fmt: skip
    env = dict(tune_env, SERVETUNE_STANDIN_TIME_SCALE="0.25")
    code, data, stderr = run_tune(argv, env)
    assert code == 0, stderr
    by_params = {(t["params"]["max_running_requests"], t["params"]["mm_attention_backend"]): t for t in data["trials"]}
    base = data["baseline"]
    assert base["params"] == {"max_running_requests": 2, "mm_attention_backend": "fa3"}
    wide = by_params[(8, "fa3")]
    steps = [(s["rate"], s["state"], s["why"]) for s in (wide.get("capacity") or {}).get("steps", [])]
    assert wide["state"] == "COMPLETE", (wide.get("note"), steps)
    assert wide["values"][0] > 1.5 * base["values"][0], (wide["values"], base["values"], steps)
    slow = next(t for k, t in by_params.items() if k[1] == "sdpa")
    assert slow["state"] == "PRUNED" and slow["note"].startswith("below_floor")
    (step,) = slow["capacity"]["steps"]
    assert not step["met"] and step["state"] == "missed" and step["completed"] < step["sent"]
    assert data["best"]["params"]["max_running_requests"] == 8 and data["ratio"] > 1.5
    evidence = yaml.safe_load(out.read_text())["evidence"]
    assert evidence["slos"] == ["p90_ttft_ms<=150"] and evidence["capacity"]["slos"] == ["p90_ttft_ms<=150"]
    assert evidence["capacity"]["best"]["request_rate"] > 1.5 * evidence["capacity"]["baseline"]["request_rate"]


def test_a_capacity_trial_stopped_part_way_keeps_its_finished_steps_when_the_study_resumes(tune_env, tmp_path):
    """SIGINT (a job's time limit) once the baseline's search has finished two steps: exit 130. The same
    command resumes; the baseline's launch (found by its config's hash) keeps those two steps as measured,
    marked with the stopped launch's directory, runs on from there and reports them kept."""
    import json
    import subprocess
    from pathlib import Path

    (tmp_path / "preset.yaml").write_text(PRESET)
    argv = _argv(
        tmp_path, CAP_LOAD, CAP_SPACE, "--preset", str(tmp_path / "preset.yaml"), "--objective", "capacity",
        "--slo", "p90_ttft_ms<=150", "--start-rate", "16", "--step-seconds", "8", "--step-warmup-seconds", "0.5",
        "--backlog-seconds", "2", "--warmup-wave", "4", "--resolution", "0.25", "--trials", "1",
    )  # fmt: skip
    env = dict(tune_env, SERVETUNE_STANDIN_TIME_SCALE="0.25")
    first = tmp_path / "run" / "trial-0000" / "steps"
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    interrupt_when(proc, lambda: len(list(first.glob("0[1-9]-*/verdict.json"))) >= 2, 120, poll=0.1)
    done = sorted(p.parent.name for p in first.glob("0[1-9]-*/verdict.json"))
    assert len(done) >= 2

    code, data, stderr = run_tune(argv, env)
    assert code == 0, stderr
    resumed = next(t for t in data["trials"] if t["state"] == "COMPLETE" and t.get("capacity"))
    steps = resumed["capacity"]["steps"]
    kept = [s for s in steps if s.get("resumed_from")]
    assert [Path(s["resumed_from"]).name for s in kept] == done  # every finished step, in order
    assert all(s["state"] == json.loads((first / n / "verdict.json").read_text())["state"] for s, n in zip(kept, done))
    assert len(steps) > len(kept) and f"{len(kept)} kept from the stopped launch in trial-0000" in resumed["note"]
