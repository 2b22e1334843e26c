"""Crashes are data, and a study survives `kill -9` of its tuner."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.tuner.conftest import interrupt_when, load_trials, run_tune, tune_argv
from tests.tuner.conftest import wait_until as _wait


def test_crashing_servers_are_recorded_as_failed_trials_and_nothing_is_written(
    tune_env, workload_file, space_file, tmp_path
):
    env = dict(tune_env, SERVETUNE_STANDIN_CRASH_AFTER="3")
    run_dir = tmp_path / "run"
    code, data, stderr = run_tune(
        tune_argv(workload_file, space_file, run_dir, "--json", "--confirm", "0", trials=3), env
    )
    assert code == 0, stderr
    assert data["best"] is None and data["ratio"] is None
    # --trials counts launches: a config proposed again (here the defaults, the same as the rules) is reused
    assert len([t for t in data["trials"] if "not relaunched" not in t.get("note", "")]) == 3
    for t in data["trials"]:
        assert t["state"] == "FAIL"
        if t["params"].get("mem_fraction_static") != 0.94:
            assert t["failure"]["class"] == "crash", t["failure"]
            assert t["failure"]["log_tail"]
    code, _, stderr = run_tune(
        tune_argv(workload_file, space_file, run_dir, "--out", str(tmp_path / "b.yaml"), "--confirm", "0", trials=3),
        env,
    )
    assert code == 1 and "no feasible trial" in stderr and "Traceback" not in stderr


def test_resume_after_kill_9_keeps_completed_trials_and_fails_the_interrupted_one(
    tune_env, workload_file, space_file, tmp_path
):
    run_dir = tmp_path / "run"
    storage = f"sqlite:///{run_dir / 'study.db'}"
    argv = tune_argv(workload_file, space_file, run_dir, "--confirm", "0", "--no-prune", trials=5)
    # every start-up takes 3 s, so the kill below lands while the trial it saw running still runs
    slow_start = {**tune_env, "SERVETUNE_STANDIN_START_DELAY_S": "3"}
    proc = subprocess.Popen(argv, env=slow_start, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def two_done_one_running():
        trials = _trials_so_far(run_dir, storage)
        done = [t for t in trials if t.state.name == "COMPLETE"]
        running = [
            t
            for t in trials
            if t.state.name == "RUNNING" and (Path(t.user_attrs.get("run_dir", "/nonexistent")) / "server.pid").exists()
        ]
        return len(done) >= 2 and bool(running)

    try:
        assert _wait(two_done_one_running, 120), proc.stderr.read() if proc.poll() is not None else "timed out"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = {t.number: t for t in load_trials(storage)}
    completed = {n: t.values for n, t in before.items() if t.state.name == "COMPLETE"}
    interrupted = [n for n, t in before.items() if t.state.name == "RUNNING"]
    assert len(interrupted) == 1
    orphan_dir = Path(before[interrupted[0]].user_attrs["run_dir"])
    orphan_pid = int((orphan_dir / "server.pid").read_text())

    code, data, stderr = run_tune(argv + ["--json"], tune_env)
    assert code == 0, stderr
    after = {t["number"]: t for t in data["trials"]}
    for n, values in completed.items():
        assert after[n]["state"] == "COMPLETE" and after[n]["values"] == values
    lost = after[interrupted[0]]
    assert lost["state"] == "FAIL" and lost["failure"]["class"] == "worker_lost"
    retries = [t for t in data["trials"] if f"retry of trial {interrupted[0]}" in t.get("note", "")]
    assert len(retries) == 1 and retries[0]["params"] == lost["params"]
    finished = [t for t in data["trials"] if t["state"] != "FAIL" or t["failure"]["class"] != "worker_lost"]
    assert len([t for t in finished if "not relaunched" not in t.get("note", "")]) == 5  # --trials counts launches
    assert _wait(lambda: not _alive(orphan_pid), 10), "the server the killed tuner left behind was not reaped"


def _trials_so_far(run_dir: Path, storage: str) -> list:
    """The study's trials while a tuner writes it; [] before the study exists."""
    if not (run_dir / "study.db").exists():
        return []
    try:
        return load_trials(storage)
    except Exception:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_ctrl_c_stops_the_server_marks_the_trial_interrupted_and_resume_retries_it(
    tune_env, workload_file, space_file, tmp_path
):
    """SIGINT (Ctrl-C) while a trial's server starts: exit 130, that server's group is gone, the trial
    is FAIL `interrupted` with a retry queued, stderr says how to resume and how to read the trials
    so far; the resumed study keeps the completed trials and runs the retry."""
    run_dir = tmp_path / "run"
    storage = f"sqlite:///{run_dir / 'study.db'}"
    argv = tune_argv(workload_file, space_file, run_dir, "--confirm", "0", "--no-prune", trials=4)
    slow_start = {**tune_env, "SERVETUNE_STANDIN_START_DELAY_S": "3"}
    proc = subprocess.Popen(
        [*argv, "--json"], env=slow_start, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    running_pid: list[int] = []

    def one_done_one_starting():
        trials = _trials_so_far(run_dir, storage)
        for t in trials:
            pid_file = Path(t.user_attrs.get("run_dir", "/nonexistent")) / "server.pid"
            if t.state.name == "RUNNING" and pid_file.exists() and any(d.state.name == "COMPLETE" for d in trials):
                running_pid[:] = [int(pid_file.read_text())]
                return True
        return False

    err = interrupt_when(proc, one_done_one_starting, 120)
    assert "interrupted by SIGINT: tune stopped" in err and "resume with the same command" in err
    assert f"servetune tune report --storage {storage}" in err and "--json" in err
    assert _wait(lambda: not _alive(running_pid[0]), 10), "the interrupted trial's server is still running"
    before = {t.number: t for t in load_trials(storage)}
    stopped = [
        t
        for t in before.values()
        if t.state.name == "FAIL" and (t.user_attrs.get("failure") or {}).get("class") == "interrupted"
    ]
    assert len(stopped) == 1
    completed = {n: t.values for n, t in before.items() if t.state.name == "COMPLETE"}
    assert completed

    code, data, stderr = run_tune([*argv, "--json"], tune_env)
    assert code == 0, stderr
    after = {t["number"]: t for t in data["trials"]}
    for n, values in completed.items():
        assert after[n]["state"] == "COMPLETE" and after[n]["values"] == values
    retries = [t for t in data["trials"] if f"retry of trial {stopped[0].number}" in t.get("note", "")]
    assert len(retries) == 1 and retries[0]["params"] == after[stopped[0].number]["params"]
    # the retry ran to an outcome of its own (a result, or its config's failure such as OOM)
    assert retries[0]["state"] == "COMPLETE" or retries[0]["failure"]["class"] not in ("interrupted", "worker_lost")
