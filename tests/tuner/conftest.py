"""Fixtures for the tuner tests: the stand-in server, a small workload, a space on its knobs.

Every end-to-end test runs `servetune tune` as a real subprocess that launches real stand-in
server processes (`python -m servetune.testing.standin`) and benchmarks them over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

STANDIN = f"{sys.executable} -m servetune.testing.standin"
MODEL = "qwen3-8b"
GPU = "h200"

# 64 in flight against the stand-in's default decode graph of 32: graph width matters.
WORKLOAD = """\
name: tuner-test
summary: Small text load for the tuner tests (about two seconds per trial on the stand-in).
kind: text
requests: 128
max_concurrency: 64
input_tokens: 128
output_tokens: 64
warmup_requests: 4
seed: 1
steady_trim: 0.1
"""

# The stand-in's landscape: a wider decode graph and more running requests help, up to the
# KV budget; mem_fraction_static 0.94 dies with CUDA OOM at start.
SPACE = """\
summary: The stand-in's knobs.
tune:
  max_running_requests: {int: [8, 128], log: true}
  cuda_graph_max_bs_decode: {choice: [16, 32, 64, 128]}
  chunked_prefill_size: {choice: [512, 2048, 8192]}
  prefill_decode_interval: {int: [0, 16], step: 4}
  mem_fraction_static: {choice: [0.8, 0.85, 0.94]}
"""


@pytest.fixture
def tune_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    # slow enough that the landscape, not the 2-core box's scheduling noise, ranks configs
    env["SERVETUNE_STANDIN_TIME_SCALE"] = "0.5"
    env["SERVETUNE_RUNS_DIR"] = str(tmp_path / "runs")
    env.pop("SERVETUNE_STANDIN_CRASH_AFTER", None)
    return env


@pytest.fixture
def workload_file(tmp_path: Path) -> Path:
    path = tmp_path / "tuner-test.yaml"
    path.write_text(WORKLOAD)
    return path


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return path


def tune_argv(
    workload_file: Path, space_file: Path, run_dir: Path, *extra: str, trials: int = 8, seed: int = 1
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "servetune",
        "tune",
        "--model",
        MODEL,
        "--gpu",
        GPU,
        "--workload",
        str(workload_file),
        "--space",
        str(space_file),
        "--trials",
        str(trials),
        "--sglang-cmd",
        STANDIN,
        "--run-dir",
        str(run_dir),
        "--seed",
        str(seed),
        "--quiet",
        *extra,
    ]


def run_tune(argv: list[str], env: dict[str, str], timeout: float = 150) -> tuple[int, dict | None, str]:
    """Run the CLI; (exit code, parsed --json stdout or None, stderr)."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    data = None
    if proc.stdout.strip():
        try:
            data = json.loads(proc.stdout)
        except json.JSONDecodeError:
            data = None
    return proc.returncode, data, proc.stderr


def load_trials(storage: str, study: str | None = None):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if study is None:
        study = optuna.study.get_all_study_names(storage)[0]
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


def wait_until(predicate, timeout: float, poll: float = 0.2) -> bool:
    """Whether `predicate()` turned true within `timeout` seconds (asked every `poll` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return False


def interrupt_when(proc: subprocess.Popen, ready, timeout: float, *, poll: float = 0.2, settle: float = 0.0) -> str:
    """SIGINT to `proc` (a command started with its stderr piped, as a user's Ctrl-C reaches it) once `ready()`
    holds, `settle` seconds after; its stderr once it has exited with 130, as a user interrupts it. Fails if it
    exits first or `ready()` stays false for `timeout` s; killed if it outlives the signal by 60 s."""
    try:
        ok = wait_until(lambda: proc.poll() is not None or ready(), timeout, poll)
        assert ok and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else "timed out"
        time.sleep(settle)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    return err
