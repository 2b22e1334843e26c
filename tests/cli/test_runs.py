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
