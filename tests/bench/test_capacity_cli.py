"""`servetune bench --capacity` end to end on the stand-in: one launch, the search's steps, the table, the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from servetune.bench.capacity import step_seed


def test_managed_capacity_prints_the_search_and_the_servers_start_up(tmp_path):
    run_dir = tmp_path / "cap"
    argv = [
        sys.executable, "-m", "servetune", "bench", "--model", "qwen3-8b", "--gpu", "h200", "--workload", "text-chat",
        "--set", "max_running_requests=4", "--capacity", "--slo", "p90_ttft_ms<=400", "--start-rate", "16",
        "--resolution", "0.25", "--step-seconds", "10", "--backlog-seconds", "3", "--step-warmup-seconds", "1",
        "--warmup-wave", "4", "--seed", "7", "--run-dir", str(run_dir),
        "--sglang-cmd", f"{sys.executable} -m servetune.testing.standin",
    ]  # fmt: skip
    env = {**os.environ, "SERVETUNE_STANDIN_START_DELAY_S": "1.0"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    recorded = json.loads((run_dir / "capacity.json").read_text())
    assert recorded["request_rate"] is not None and recorded["steps"]
    # --seed: the search's sequences, step k drawing step_seed(7, k) (a repeat with another seed draws new ones)
    assert recorded["seed"] == 7
    # the stand-in logs its decode lines by time, not every 40 decode steps like SGLang: its millisecond stamps
    # say so, and no engine figures are made up (tests/bench/test_engineclock.py)
    assert recorded["engine"] is None and "\nengine " not in out.stdout
    assert [s["seed"] for s in recorded["steps"]] == [step_seed(7, s["index"]) for s in recorded["steps"]]
    result = json.loads((run_dir / "result.json").read_text())
    phases = result["timings"]["startup_phases"]
    assert phases["cuda_graphs_s"] == 0.5  # half the stand-in's START_DELAY_S, as its log says
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("server       start-up"))
    assert "CUDA graphs 0.5 s" in line and str(run_dir) in line


def test_a_server_you_started_gets_the_same_search_and_a_soak(tmp_path):
    """`bench --url` runs the managed path's implementation (`search_server`, `soak_server`): the
    warm-up wave, step directories with every arrival and the verdict, SGLang-style telemetry from
    `--server-log`, capacity.json, the plots; then a soak at a rate, met only at its end."""
    from servetune.launch import LaunchOptions, start_server

    options = LaunchOptions(
        sglang_cmd=[sys.executable, "-m", "servetune.testing.standin"], run_dir=tmp_path / "server",
        wait_gpu_release=False,
    )  # fmt: skip
    # the stand-in at twice its default pace: a step gathers the judged requests its verdict needs in half the time
    fast = {"SERVETUNE_STANDIN_TIME_SCALE": "0.125"}
    server = start_server(["--model-path", "m", "--max-running-requests", "4"], fast, {}, options)
    try:
        common = [
            sys.executable, "-m", "servetune", "bench", "--url", server.url, "--workload", "text-chat",
            "--slo", "p90_ttft_ms<=400", "--server-log", str(server.log_path), "--step-warmup-seconds", "1",
            "--backlog-seconds", "3", "--warmup-wave", "4", "--json",
        ]  # fmt: skip
        cap_dir, soak_dir = tmp_path / "cap", tmp_path / "soak"
        argv = [*common, "--capacity", "--start-rate", "8", "--resolution", "0.3", "--step-seconds", "10",
                "--run-dir", str(cap_dir)]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        cap = json.loads(out.stdout)["capacity"]
        assert cap["request_rate"] is not None and cap["certified"], cap["note"]
        assert json.loads((cap_dir / "capacity.json").read_text())["request_rate"] == cap["request_rate"]
        first = cap_dir / "steps" / f"01-{cap['steps'][0]['rate']:.4g}"
        assert (first / "telemetry.jsonl").read_text().strip() and (first / "verdict.json").exists()
        assert (cap_dir / "steps" / "00-warmup").is_dir() and (cap_dir / "timeline.png").exists()
        rate = f"{cap['request_rate'] * 0.7:.3g}"
        argv = [*common, "--soak-seconds", "14", "--request-rate", rate, "--run-dir", str(soak_dir)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        soak = json.loads(out.stdout)["soak"]
        assert soak["state"] == "met" and soak["at_s"] >= 13.5, soak["why"]
        assert (soak_dir / "soak.json").exists() and (soak_dir / "soak.png").exists()
        assert (soak_dir / "soak" / "telemetry.jsonl").read_text().strip()
    finally:
        server.stop()


def test_a_soak_stopped_after_the_search_keeps_the_searchs_capacity_and_says_how_to_soak_it(tmp_path):
    """Ctrl-C (or a job's time limit) during the soak that follows a search: exit 130, and the search's
    result is already in capacity.json (written before the soaks, so a cut soak loses no step); stderr says
    the search had ended, where its figure is and how to soak that rate alone, not "search anew"."""

    from servetune.launch import LaunchOptions, start_server
    from tests.tuner.conftest import interrupt_when

    options = LaunchOptions(
        sglang_cmd=[sys.executable, "-m", "servetune.testing.standin"], run_dir=tmp_path / "server",
        wait_gpu_release=False,
    )  # fmt: skip
    server = start_server(["--model-path", "m", "--max-running-requests", "4"], {}, {}, options)
    cap_dir = tmp_path / "cap"
    argv = [
        sys.executable, "-m", "servetune", "bench", "--url", server.url, "--workload", "text-chat",
        "--slo", "p90_ttft_ms<=400", "--step-warmup-seconds", "1", "--backlog-seconds", "3", "--warmup-wave", "4",
        "--capacity", "--start-rate", "8", "--resolution", "0.5", "--step-seconds", "8", "--soak-seconds", "120",
        "--run-dir", str(cap_dir),
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = interrupt_when(proc, lambda: (cap_dir / "soaks").is_dir(), 240, settle=2.0)  # 2 s into the soak
        recorded = json.loads((cap_dir / "capacity.json").read_text())
        assert recorded["request_rate"] is not None and recorded["steps"] and not recorded.get("soaks")
        line = next(ln for ln in stderr.splitlines() if ln.startswith("interrupted by SIGINT"))
        assert f"the search had ended at {recorded['request_rate']:.4g} req/s" in line, line
        assert str(cap_dir / "capacity.json") in line and f"--request-rate {recorded['request_rate']:.4g}" in line
        assert "search anew" not in line
        interrupted = json.loads((cap_dir / "result.json").read_text())["interrupted"]
        assert interrupted["stage"] == "soak" and interrupted["exit_code"] == 130
    finally:
        server.stop()
