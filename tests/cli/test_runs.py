"""`servetune runs` lists the servers servetune started that still run; `servetune stop` ends only those."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servetune.cli import app
from servetune.cli._run import run_app
from servetune.launch import LaunchOptions, start_server
from servetune.launch._proc import start_ticks

STANDIN = [sys.executable, "-m", "servetune.testing.standin"]
PARENT = textwrap.dedent(
    """
    import sys, time
    from servetune.launch import LaunchOptions, start_server
    opts = LaunchOptions(sglang_cmd=sys.argv[2:], run_dir=sys.argv[1], wait_gpu_release=False,
                         extra_env={"SERVETUNE_STANDIN_CHILDREN": "1"})
    server = start_server(["--model-path", "standin/orphan"], {}, {}, opts)
    print("ready", flush=True)
    time.sleep(120)
    """
)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = run_app(app, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _options(run_dir: Path) -> LaunchOptions:
    return LaunchOptions(sglang_cmd=STANDIN, run_dir=run_dir, stop_grace_s=3, wait_gpu_release=False)


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process of group `pgid` remains."""
    import psutil

    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.05)
    return predicate()


def test_runs_lists_a_live_server_and_stop_by_name_ends_it(tmp_path, capsys):
    """A running server is listed (pid, port, model, its servetune); `stop NAME` under --runs-dir stops
    it, after which nothing is listed."""
    root = tmp_path / "runs"
    with start_server(["--model-path", "standin/listed"], {}, {}, _options(root / "launch-a")) as server:
        code, out, err = _cli(capsys, "runs", "--runs-dir", str(root), "--json")
        assert code == 0, err
        [row] = json.loads(out)
        assert row["run_dir"] == str(root / "launch-a") and row["state"] == "running"
        assert (row["pid"], row["pgid"], row["port"]) == (server.pid, server.pgid, server.port)
        assert row["model"] == "standin/listed" and row["servetune_pid"] == os.getpid()
        code, out, _ = _cli(capsys, "runs", "--runs-dir", str(root))
        assert code == 0 and str(server.pid) in out and str(server.port) in out and "running" in out
        code, out, err = _cli(capsys, "stop", "launch-a", "--runs-dir", str(root), "--grace", "3")
        assert code == 0, err
        assert f"pid {server.pid}" in out
        assert _wait(lambda: server.exit_code is not None, 5)
    code, out, _ = _cli(capsys, "runs", "--runs-dir", str(root), "--json")
    assert code == 0 and json.loads(out) == []


def test_stop_all_orphans_stops_only_servers_whose_servetune_is_gone(tmp_path, capsys):
    """With its guard paused, a killed servetune's server runs on as an orphan: `runs` marks it, `stop
    --all-orphans` ends its group and leaves a server whose servetune lives."""
    root = tmp_path / "runs"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(root / "orphan"), *STANDIN], stdout=subprocess.PIPE, text=True
    )
    guard_pid = None
    try:
        assert parent.stdout.readline().startswith("ready")
        record = json.loads((root / "orphan" / "server.json").read_text())
        guard_pid = record["guard_pid"]
        assert _group_alive(record["pgid"])
        os.kill(guard_pid, signal.SIGSTOP)
        parent.kill()
        parent.wait(10)
        with start_server(["--model-path", "standin/kept"], {}, {}, _options(root / "kept")) as kept:
            code, out, err = _cli(capsys, "runs", "--runs-dir", str(root), "--json")
            assert code == 0, err
            states = {Path(r["run_dir"]).name: r["state"] for r in json.loads(out)}
            assert states == {"orphan": "orphan", "kept": "running"}
            code, out, err = _cli(capsys, "stop", "--all-orphans", "--runs-dir", str(root), "--grace", "3")
            assert code == 0, err
            assert str(root / "orphan") in out and "kept" not in out
            assert _wait(lambda: not _group_alive(record["pgid"]), 8)
            assert kept.alive and kept.get_json("/health") == {"status": "ok"}
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if guard_pid is not None:
            os.kill(guard_pid, signal.SIGKILL)


def test_stop_leaves_a_process_that_took_a_recorded_pid(tmp_path, capsys):
    """A recorded pid now held by another process (another start time) is not signalled: exit 1."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert _wait(lambda: start_ticks(other.pid) is not None, 5)
        run_dir = tmp_path / "runs" / "launch-old"
        run_dir.mkdir(parents=True)
        record = {
            "server_id": "0" * 32,
            "pid": other.pid,
            "pgid": other.pid,
            "start_ticks": start_ticks(other.pid) - 1,
            "create_time": time.time() - 60,
            "host": "127.0.0.1",
            "port": 31999,
            "argv_sha256": "0" * 64,
            "servetune_pid": 1,
            "servetune_start_ticks": 0,
            "started_at": time.time() - 60,
        }
        (run_dir / "server.json").write_text(json.dumps(record))
        code, out, _ = _cli(capsys, "runs", "--runs-dir", str(tmp_path / "runs"), "--json")
        assert code == 0 and json.loads(out) == []
        code, _, err = _cli(capsys, "stop", str(run_dir), "--grace", "0")
        assert code == 1 and "nothing was signalled" in err
        code, _, err = _cli(capsys, "stop", "--all-orphans", "--runs-dir", str(tmp_path / "runs"))
        assert code == 0
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("args", [[], ["launch-x", "--all-orphans"]], ids=["neither", "both"])
def test_stop_needs_exactly_one_of_a_run_or_all_orphans(tmp_path, capsys, args):
    """`servetune stop` with neither or both targets is a user error that names the choice."""
    code, _, err = _cli(capsys, "stop", *args, "--runs-dir", str(tmp_path))
    assert code == 1 and "exactly one of RUN or --all-orphans" in err


def test_stop_of_a_directory_without_a_record_says_where_to_look(tmp_path, capsys):
    """A name that is no recorded run directory: exit 1, pointing at `servetune runs`."""
    code, _, err = _cli(capsys, "stop", "nope", "--runs-dir", str(tmp_path))
    assert code == 1 and "servetune runs" in err and "server.json" in err


LONG_NAME = "tune/qwen3-vl-30b-a3b-instruct-h200x8-single-image-stream-with-a-long-study-name/trial-0001"


@pytest.mark.parametrize("columns", ["80", "40"])
def test_runs_shows_every_run_name_whole_in_a_pipe_at_any_width(tmp_path, columns):
    """At 80 or 40 columns and in a pipe the run column is never cut: the other columns wrap first, and
    the name printed is one `servetune stop` takes."""
    root = tmp_path / "runs"
    with start_server(["--model-path", "standin/long-name"], {}, {}, _options(root / LONG_NAME)) as server:
        env = {**os.environ, "COLUMNS": columns}
        out = subprocess.run(
            [sys.executable, "-m", "servetune", "runs", "--runs-dir", str(root)],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert any(LONG_NAME in line for line in out.stdout.splitlines()), out.stdout
        assert str(server.port) in out.stdout
        stop = subprocess.run(
            [sys.executable, "-m", "servetune", "stop", LONG_NAME, "--runs-dir", str(root), "--grace", "3"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert stop.returncode == 0, stop.stderr
        assert _wait(lambda: server.exit_code is not None, 5)


def _launch(tmp_path: Path, run_dir: Path, knobs: dict[str, str] | None = None) -> subprocess.Popen:
    from servetune.launch import reserve_free_port

    reservation = reserve_free_port("127.0.0.1")
    port = reservation.port
    reservation.release()
    env = {**os.environ, **{f"SERVETUNE_STANDIN_{k}": v for k, v in (knobs or {}).items()}}
    args = ["launch", "-m", "qwen3-8b", "--gpu", "h200", "--sglang-cmd", " ".join(STANDIN), "--port", str(port),
            "--run-dir", str(run_dir), "--quiet"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "servetune", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if "serving; Ctrl-C" in line:
            return proc


def test_servetune_stop_is_a_stop_for_the_launch_that_owns_the_server(tmp_path):
    """`servetune stop RUN` on a foreground launch: the launch says who stopped it and exits 0 (no
    `crash`), and its result.json says `stopped`."""
    root = tmp_path / "runs"
    proc = _launch(tmp_path, root / "launch-demo", {"CHILDREN": "1"})
    pid = json.loads((root / "launch-demo" / "server.json").read_text())["pid"]
    stop = subprocess.run(
        [sys.executable, "-m", "servetune", "stop", "launch-demo", "--runs-dir", str(root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stop.returncode == 0, stop.stderr
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped by `servetune stop` (pid" in err and "crash" not in err and "error" not in err
    result = json.loads((root / "launch-demo" / "result.json").read_text())
    assert result["ended"] == "stopped"
    assert not _group_alive(pid)


def test_a_users_sigterm_to_the_server_is_a_stop_and_sigkill_is_a_crash(tmp_path):
    """The server ended by SIGTERM from outside: the launch reports a stop, exit 0. Killed by SIGKILL
    (as the kernel's OOM killer does): still a crash, exit 1."""
    run_dir = tmp_path / "term"
    proc = _launch(tmp_path, run_dir)
    os.killpg(json.loads((run_dir / "server.json").read_text())["pid"], signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped by a signal from outside servetune" in err and "crash" not in err
    run_dir = tmp_path / "kill"
    proc = _launch(tmp_path, run_dir)
    os.killpg(json.loads((run_dir / "server.json").read_text())["pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "error[launch]" in err and "crash" in err, err
