"""One interrupt path: SIGINT and SIGTERM, to the process or to its group, stop `bench`, `compare`,
`tune` and `launch` cleanly (real processes, the stand-in server, real signals, SIGINT at its default)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launch.launch_helpers import group_gone

STANDIN = f"{sys.executable} -m servetune.testing.standin"
NOISE = ("Traceback", "never retrieved", "was never awaited", "Cannot send a request")

LONG_WORKLOAD = """\
name: long-chat
summary: Many short chat turns, a few in flight, two warm-up requests.
kind: text
requests: 100000
max_concurrency: 8
input_tokens: 32
output_tokens: 16
warmup_requests: 2
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a shell's foreground job has it


def _spawn(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m servetune ARGS` in its own process group, SIGINT at its default, output to files."""
    out = (tmp_path / "stdout").open("w")
    err = (tmp_path / "stderr").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "servetune", *args],
        stdout=out,
        stderr=err,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def _wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"servetune exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{what} never happened")
        time.sleep(0.05)


def _prefills(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count("Prefill batch")
    except OSError:
        return 0


def _send(proc: subprocess.Popen, sig: int, to_group: bool) -> None:
    (os.killpg if to_group else os.kill)(proc.pid, sig)


def _finish(proc: subprocess.Popen, tmp_path: Path, sig: int) -> str:
    """Wait for the exit; check its status and that stderr holds one `interrupted by` line and no noise."""
    proc.wait(timeout=60)
    err = (tmp_path / "stderr").read_text()
    assert proc.returncode == 128 + sig, err
    for noise in NOISE:
        assert noise not in err, err
    lines = [line for line in err.splitlines() if "interrupted by" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"interrupted by {signal.Signals(sig).name}: "), err
    return lines[0]


def _server_pid(run_dir: Path) -> int:
    return json.loads((run_dir / "server.json").read_text())["pid"]


CASES = [
    pytest.param(signal.SIGINT, False, id="sigint-process"),
    pytest.param(signal.SIGINT, True, id="sigint-group"),
    pytest.param(signal.SIGTERM, False, id="sigterm-process"),
    pytest.param(signal.SIGTERM, True, id="sigterm-group"),
]


@pytest.mark.parametrize("sig, to_group", CASES)
def test_an_interrupted_managed_bench_stops_its_server_and_records_what_it_measured(tmp_path, sig, to_group):
    """bench (managed): exit 128+signal, one line naming the requests done, the server's group gone,
    result.json `interrupted` with the partial metrics, no task noise."""
    (tmp_path / "long.yaml").write_text(LONG_WORKLOAD)
    run_dir = tmp_path / "run"
    args = ["bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", "long.yaml", "--sglang-cmd", STANDIN]
    proc = _spawn([*args, "--run-dir", str(run_dir)], tmp_path)
    _wait_for(lambda: _prefills(run_dir / "server.log") >= 30, "the measured requests", proc)
    pid = _server_pid(run_dir)
    _send(proc, sig, to_group)
    line = _finish(proc, tmp_path, sig)
    assert "bench stopped after" in line and "of 100000 requests completed" in line
    assert "run the same command again" in line
    assert group_gone(pid)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["interrupted"]["signal"] == signal.Signals(sig).name
    assert result["interrupted"]["exit_code"] == 128 + sig
    assert result["metrics"]["stopped_early"] is True and result["metrics"]["requests"] == 100000
    assert json.loads((run_dir / "metrics.json").read_text())["completed"] == result["metrics"]["completed"]
    sent = (run_dir / "requests.jsonl").read_text().splitlines()
    assert len(sent) >= result["metrics"]["completed"]


def test_an_interrupt_during_start_up_stops_the_starting_server(tmp_path):
    """SIGINT while the server loads: exit 130, the server's group gone, result.json says `start`."""
    run_dir = tmp_path / "run"
    args = ["bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", "text-chat", "--sglang-cmd", STANDIN]
    proc = _spawn([*args, "--run-dir", str(run_dir)], tmp_path, env={"SERVETUNE_STANDIN_START_DELAY_S": "30"})
    _wait_for(lambda: (run_dir / "server.json").is_file(), "the server's start", proc)
    pid = _server_pid(run_dir)
    _send(proc, signal.SIGINT, False)
    line = _finish(proc, tmp_path, signal.SIGINT)
    assert "before any request was measured" in line
    assert group_gone(pid)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["interrupted"]["stage"] == "start" and result["metrics"] is None


@pytest.mark.parametrize("sig, to_group", [CASES[0], CASES[3]])
def test_an_interrupted_bench_against_a_url_leaves_the_server_and_records_the_partial_run(tmp_path, sig, to_group):
    """bench --url: the client's tasks are cancelled and awaited (no noise), the server keeps serving."""
    from servetune.launch import LaunchOptions, start_server

    (tmp_path / "long.yaml").write_text(LONG_WORKLOAD)
    opts = LaunchOptions(sglang_cmd=STANDIN, run_dir=tmp_path / "server", wait_gpu_release=False)
    with start_server(["--model-path", "m"], {}, {}, opts) as server:
        run_dir = tmp_path / "run"
        proc = _spawn(["bench", "--url", server.url, "-w", "long.yaml", "--run-dir", str(run_dir)], tmp_path)
        _wait_for(lambda: _prefills(server.log_path) >= 30, "the measured requests", proc)
        _send(proc, sig, to_group)
        line = _finish(proc, tmp_path, sig)
        assert f"the server at {server.url} keeps running" in line
        assert server.alive and server.get_json("/health") == {"status": "ok"}
        result = json.loads((run_dir / "result.json").read_text())
        assert result["interrupted"]["signal"] == signal.Signals(sig).name and result["metrics"]["stopped_early"]


@pytest.mark.parametrize("sig, to_group", [CASES[0], CASES[3]])
def test_an_interrupted_study_queues_its_trial_again_and_resumes(tmp_path, sig, to_group):
    """tune: exit 128+signal, one line with the resume and report commands, interrupted.json in the
    study's directory, no server left; the same command then resumes the study to its end."""
    run_dir = tmp_path / "study"
    args = ["tune", "-m", "qwen3-8b", "--gpu", "h200", "-w", "text-chat", "--trials", "4", "--requests", "64",
            "--sglang-cmd", STANDIN, "--run-dir", str(run_dir), "--study", "s", "--confirm", "0"]  # fmt: skip
    proc = _spawn(args, tmp_path)
    second = run_dir / "trial-0002"
    _wait_for(lambda: _prefills(second / "server.log") >= 10, "the third trial's benchmark", proc)
    pid = _server_pid(second)
    _send(proc, sig, to_group)
    line = _finish(proc, tmp_path, sig)
    assert "tune stopped" in line and "resume with the same command" in line and "servetune tune report" in line
    assert "the running trial is queued again" in line
    assert group_gone(pid)
    record = json.loads((run_dir / "interrupted.json").read_text())
    assert record["interrupted"]["signal"] == signal.Signals(sig).name and record["study"] == "s"
    resumed = subprocess.run(
        [sys.executable, "-m", "servetune", *args, "--json", "--quiet"], capture_output=True, text=True, cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    trials = json.loads(resumed.stdout)["trials"]
    assert any((t.get("failure") or {}).get("class") == "interrupted" for t in trials)


@pytest.mark.parametrize("sig, to_group", [CASES[0], CASES[3]])
def test_an_interrupted_comparison_records_the_rounds_so_far(tmp_path, sig, to_group):
    """compare: exit 128+signal, one line, interrupted.json with the measurements so far, no server left."""
    run_dir = tmp_path / "cmp"
    args = ["compare", "-m", "qwen3-8b", "--gpu", "h200", "-w", "text-chat", "--a-no-rules",
            "--b-set", "max_running_requests=48", "--rounds", "3", "--requests", "64", "--sglang-cmd", STANDIN,
            "--run-dir", str(run_dir)]  # fmt: skip
    proc = _spawn(args, tmp_path)
    b = run_dir / "r1-B"
    _wait_for(lambda: _prefills(b / "server.log") >= 10, "B's first benchmark", proc)
    pid = _server_pid(b)
    _send(proc, sig, to_group)
    line = _finish(proc, tmp_path, sig)
    assert "compare stopped after 1 of 6 measurements" in line
    assert group_gone(pid)
    record = json.loads((run_dir / "interrupted.json").read_text())
    assert [m["config"] for m in record["measured"]] == ["A"] and record["measured"][0]["value"] > 0


@pytest.mark.parametrize("sig, to_group", [CASES[0], CASES[3]])
def test_an_interrupted_launch_stops_its_server(tmp_path, sig, to_group):
    """launch: exit 128+signal, one `interrupted by` line, then `server stopped`; result.json records it."""
    from servetune.launch import reserve_free_port

    reservation = reserve_free_port("127.0.0.1")
    port = reservation.port
    reservation.release()
    run_dir = tmp_path / "launch"
    args = ["launch", "-m", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", STANDIN, "--port", str(port),
            "--run-dir", str(run_dir), "--quiet"]  # fmt: skip
    proc = _spawn(args, tmp_path, env={"SERVETUNE_STANDIN_CHILDREN": "2"})
    _wait_for(lambda: "serving; Ctrl-C" in (tmp_path / "stdout").read_text(), "serving", proc)
    pid = _server_pid(run_dir)
    _send(proc, sig, to_group)
    line = _finish(proc, tmp_path, sig)
    assert "stopping the server" in line and "serve it again with the same command" in line
    assert "server stopped" in (tmp_path / "stderr").read_text()
    assert group_gone(pid)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["ended"] == "interrupted" and result["interrupted"]["signal"] == signal.Signals(sig).name


def test_a_second_ctrl_c_kills_the_server_at_once(tmp_path):
    """A server that ignores SIGTERM holds a launch in its 60 s grace; a second SIGINT kills its group
    and exits 130 at once."""
    from servetune.launch import reserve_free_port

    reservation = reserve_free_port("127.0.0.1")
    port = reservation.port
    reservation.release()
    run_dir = tmp_path / "launch"
    args = ["launch", "-m", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", STANDIN, "--port", str(port),
            "--run-dir", str(run_dir), "--quiet", "--stop-grace", "60"]  # fmt: skip
    proc = _spawn(args, tmp_path, env={"SERVETUNE_STANDIN_IGNORE_SIGTERM": "1", "SERVETUNE_STANDIN_CHILDREN": "2"})
    _wait_for(lambda: "serving; Ctrl-C" in (tmp_path / "stdout").read_text(), "serving", proc)
    pid = _server_pid(run_dir)
    proc.send_signal(signal.SIGINT)
    _wait_for(lambda: "stopping the server" in (tmp_path / "stderr").read_text(), "the first stop", proc)
    assert proc.poll() is None  # still in the grace: the server ignores SIGTERM
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert proc.returncode == 130
    assert "second SIGINT: killing" in (tmp_path / "stderr").read_text()
    assert group_gone(pid)


def test_a_signal_outside_any_benchmark_raises_interrupted_once_and_restores_the_handlers():
    """In-process: the first SIGTERM raises `Interrupted` (exit status 143) in the main thread; a
    shielded block defers it to its end; the handlers before `installed()` come back after it."""
    from servetune import interrupts

    before = signal.getsignal(signal.SIGTERM)
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted) as caught, interrupts.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler ran here and did not raise
            assert interrupts.requested() == signal.SIGTERM
        assert caught.value.exit_code == 143 and caught.value.signum == signal.SIGTERM
        interrupts.check()  # delivered once: nothing more is raised
    assert signal.getsignal(signal.SIGTERM) is before and interrupts.requested() is None


def test_an_interrupted_study_with_two_slots_leaves_no_trial_running(tmp_path):
    """tune --gpus 0,1 (two slot threads): SIGINT while both trials measure fails both as `interrupted`
    with retries queued and leaves none RUNNING (a signal inside Thread.join once let the process exit
    under a live slot thread)."""
    import optuna

    run_dir = tmp_path / "study"
    args = ["tune", "-m", "qwen3-8b", "--gpu", "h200:2", "-w", "text-chat", "--trials", "6", "--requests", "200",
            "--gpus", "0,1", "--sglang-cmd", STANDIN, "--run-dir", str(run_dir), "--study", "s2",
            "--confirm", "0"]  # fmt: skip
    proc = _spawn(args, tmp_path)
    both = (run_dir / "trial-0000" / "server.log", run_dir / "trial-0001" / "server.log")
    _wait_for(lambda: all(_prefills(log) >= 10 for log in both), "both slots' benchmarks", proc)
    _send(proc, signal.SIGINT, True)
    _finish(proc, tmp_path, signal.SIGINT)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="s2", storage=f"sqlite:///{run_dir / 'study.db'}")
    states = {t.number: t.state.name for t in study.trials}
    assert "RUNNING" not in states.values(), states
    interrupted = [t for t in study.trials if (t.user_attrs.get("failure") or {}).get("class") == "interrupted"]
    assert interrupted and "WAITING" in states.values(), states
