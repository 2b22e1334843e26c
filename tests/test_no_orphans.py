"""kill -9 of `servetune launch`, of a managed `servetune bench` and of `servetune tune` leaves no server
running within a few seconds (each server's guard stops its group), and no port lock file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.launch.launch_helpers import group_gone
from tests.tuner.conftest import SPACE, WORKLOAD, tune_argv

STANDIN = f"{sys.executable} -m servetune.testing.standin"
GONE_WITHIN_S = 8.0
"""The guard's orphan grace is 3 s before SIGKILL; the rest is slack for a loaded 2-core machine."""


def _records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("server.json"))]


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _serving(root: Path) -> bool:
    """A recorded server has answered (its server_info.json is written) and still runs."""
    from servetune.launch._record import live_server

    return any(
        (p.parent / "server_info.json").exists() and live_server(p.parent) is not None
        for p in root.rglob("server.json")
    )


def _kill_9_when_serving(argv: list[str], env: dict[str, str], root: Path) -> list[dict]:
    """Run `argv`, SIGKILL it once one of its servers serves; the server records found under `root`."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        served = _wait(lambda: _serving(root) or proc.poll() is not None, 120)
        assert served and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else "timed out"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = _records(root)
    assert records
    return records


def _assert_nothing_left(records: list[dict]) -> None:
    from servetune.launch._ports import _lock_dir

    t0 = time.monotonic()
    for rec in records:
        assert group_gone(rec["pgid"], GONE_WITHIN_S - (time.monotonic() - t0)), (
            f"server group {rec['pgid']} (port {rec['port']}) outlived its servetune"
        )
        assert _wait(lambda rec=rec: not (_lock_dir() / f"{rec['port']}.lock").exists(), 2.0)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, SERVETUNE_RUNS_DIR=str(tmp_path / "runs"), SERVETUNE_STANDIN_CHILDREN="2")
    env.pop("SERVETUNE_SGLANG_CMD", None)
    return env


def test_kill_9_of_servetune_launch_leaves_no_server(tmp_path, env):
    """`servetune launch` (a server that ignores SIGTERM, with children) killed by SIGKILL: its group is
    SIGTERMed, then SIGKILLed after the grace, within a few seconds."""
    from servetune.launch import reserve_free_port

    res = reserve_free_port("127.0.0.1")
    port = res.port
    res.release()
    run_dir = tmp_path / "launch"
    argv = [sys.executable, "-m", "servetune", "launch", "--model", "qwen3-8b", "--gpu", "h200", "--quiet"]
    argv += ["--sglang-cmd", STANDIN, "--port", str(port), "--run-dir", str(run_dir)]
    records = _kill_9_when_serving(argv, {**env, "SERVETUNE_STANDIN_IGNORE_SIGTERM": "1"}, run_dir)
    _assert_nothing_left(records)


def test_kill_9_of_a_managed_bench_leaves_no_server(tmp_path, env):
    """`servetune bench --model ...` (it launches the server it measures) killed while it measures."""
    workload = tmp_path / "long.yaml"
    workload.write_text(WORKLOAD.replace("requests: 128", "requests: 4000"))
    run_dir = tmp_path / "bench"
    argv = [sys.executable, "-m", "servetune", "bench", "--model", "qwen3-8b", "--gpu", "h200"]
    argv += ["--workload", str(workload), "--sglang-cmd", STANDIN, "--run-dir", str(run_dir), "--json"]
    records = _kill_9_when_serving(argv, env, run_dir)
    _assert_nothing_left(records)


def test_kill_9_of_servetune_tune_leaves_no_server(tmp_path, env):
    """`servetune tune` (servers launched from worker threads) killed during a trial."""
    workload, space = tmp_path / "tuner-test.yaml", tmp_path / "space.yaml"
    workload.write_text(WORKLOAD)
    space.write_text(SPACE)
    run_dir = tmp_path / "tune"
    argv = tune_argv(workload, space, run_dir, "--confirm", "0", trials=4)
    records = _kill_9_when_serving(argv, {**env, "SERVETUNE_STANDIN_TIME_SCALE": "0.5"}, tmp_path)
    _assert_nothing_left(records)
