"""No server outlives the process that started it; nothing is left by a refused launch; lock files go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from launch_helpers import STANDIN_CMD, group_gone

from servetune.errors import LaunchError

THREAD_PARENT = textwrap.dedent(
    """
    import sys, threading, time
    from servetune.launch import LaunchOptions, start_server
    opts = LaunchOptions(sglang_cmd=sys.argv[2:], run_dir=sys.argv[1], stop_grace_s=2, wait_gpu_release=False,
                         extra_env={"SERVETUNE_STANDIN_CHILDREN": "1"})
    box = []
    worker = threading.Thread(target=lambda: box.append(start_server(["--model-path", "m"], {}, {}, opts)))
    worker.start()
    worker.join()
    print("ready", box[0].pid, flush=True)
    time.sleep(120)
    """
)


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _health(port: int) -> bool:
    from servetune.launch._http import http_get

    got = http_get("127.0.0.1", port, "/health", timeout=2.0)
    return got is not None and got[0] == 200


def test_a_server_started_by_a_thread_that_exited_serves_until_its_process_is_killed(tmp_path):
    """The launching thread exits (PDEATHSIG would fire there), the server keeps serving; kill -9 of the
    process that started it ends the server's whole group within seconds."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", THREAD_PARENT, str(run_dir), *STANDIN_CMD], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready"), line
        record = json.loads((run_dir / "server.json").read_text())
        time.sleep(1.5)
        assert _health(record["port"]), "the server died with the thread that started it"
        assert not group_gone(record["pgid"], timeout=0)
        proc.kill()
        proc.wait(10)
        assert group_gone(record["pgid"], timeout=8.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_server_json_record_names_the_running_server_and_its_starter(make_options):
    """server.json: the leader's pid, group and start time, the port, the model and this process."""
    from servetune.launch import start_server
    from servetune.launch._proc import start_ticks

    with start_server(["--model-path", "standin/m"], {}, {}, make_options()) as server:
        rec = json.loads((server.run_dir / "server.json").read_text())
        assert rec["pid"] == rec["pgid"] == server.pid == server.server_info["pid"]
        assert rec["start_ticks"] == start_ticks(server.pid)
        assert rec["port"] == server.port and rec["model"] == "standin/m"
        assert rec["servetune_pid"] == os.getpid() and rec["servetune_start_ticks"] == start_ticks(os.getpid())
        assert rec["guard_pid"] == server.proc.pid != server.pid
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        assert f"SERVETUNE_SERVER_ID={rec['server_id']}".encode() in environ


@pytest.mark.parametrize("knobs", [{}, {"IGNORE_SIGTERM": 1}], ids=["exits-on-sigterm", "ignores-sigterm"])
def test_a_guard_told_to_stop_stops_its_server_and_reports_its_exit(make_options, knobs):
    """SIGTERM to the guard alone: the server's group gets SIGTERM (SIGKILL after the grace), and the
    guard exits as the server did, so the handle reads the server's own exit status."""
    from servetune.launch import start_server

    server = start_server(["--model-path", "m"], {}, {}, make_options({**knobs, "CHILDREN": 1}))
    try:
        os.kill(server.proc.pid, signal.SIGTERM)
        assert group_gone(server.pgid, timeout=10.0)
        server.proc.wait(10)
        if knobs:
            assert server.exit_code == -signal.SIGKILL
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("code", "expected"),
    [("sys.exit(3)", 3), ("os.kill(os.getpid(), signal.SIGUSR1)", -signal.SIGUSR1)],
    ids=["exit-3", "killed-by-sigusr1"],
)
def test_the_servers_exit_status_reaches_the_handle_through_the_guard(make_options, code, expected):
    """The guard exits as its server did: the same exit code, or death by the same signal."""
    from servetune.launch import start_server

    cmd = [sys.executable, "-c", f"import os, signal, sys; {code}"]
    with pytest.raises(LaunchError) as err:
        start_server(["--model-path", "m"], {}, {}, make_options(sglang_cmd=cmd))
    assert err.value.failure == "crash" and err.value.exit_code == expected


def test_a_command_that_cannot_be_executed_is_a_bad_command_and_leaves_nothing(make_options, tmp_path):
    """An executable file with a missing interpreter passes the up-front check but fails at exec: the
    guard reports the error, the launch is `bad_command`, no server record is written."""
    from servetune.launch import start_server

    script = tmp_path / "sglang-wrapper"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    opts = make_options(sglang_cmd=[str(script)])
    with pytest.raises(LaunchError) as err:
        start_server(["--model-path", "m"], {}, {}, opts)
    assert err.value.failure == "bad_command" and "cannot run" in err.value.message
    assert not (opts.run_dir / "server.json").exists() and not (opts.run_dir / "server.pid").exists()


def test_a_launch_refused_by_validation_creates_no_run_directory(make_options, tmp_path):
    """A missing program or an explicit port in use is refused before the run directory exists."""
    import socket

    from servetune.launch import start_server

    opts = make_options(sglang_cmd=["/nonexistent/python", "-m", "sglang.launch_server"])
    with pytest.raises(LaunchError) as err:
        start_server(["--model-path", "m"], {}, {}, opts)
    assert err.value.failure == "bad_command" and not opts.run_dir.exists()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        opts = make_options(port=sock.getsockname()[1])
        with pytest.raises(LaunchError) as err:
            start_server(["--model-path", "m"], {}, {}, opts)
    assert err.value.failure == "port_in_use" and not opts.run_dir.exists()


def test_a_stopped_server_leaves_no_lock_file(make_options):
    """The port's lock file exists while the server runs and is removed when it stops."""
    from servetune.launch import start_server
    from servetune.launch._ports import _lock_dir

    with start_server(["--model-path", "m"], {}, {}, make_options()) as server:
        lock = _lock_dir() / f"{server.port}.lock"
        assert lock.exists()
    assert not lock.exists()


def test_port_reservations_stay_exclusive_while_lock_files_are_removed():
    """Threads that take and give back one port (each release removes the file) never hold it together."""
    from servetune.launch._ports import PortReservation, _lock_dir

    port = 9  # discard: never served here; only its lock file is used
    holders = []
    overlaps = []
    guard = threading.Lock()

    def hammer():
        for _ in range(300):
            res = PortReservation.try_acquire(port)
            if res is None:
                continue
            with guard:
                holders.append(1)
                if len(holders) > 1:
                    overlaps.append(1)
            time.sleep(0)
            with guard:
                holders.pop()
            res.release()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    assert not (_lock_dir() / f"{port}.lock").exists()


def test_an_unheld_lock_file_is_reused_and_then_removed():
    """A lock file left by a launcher killed while holding it is taken over and removed on release."""
    from servetune.launch._ports import PortReservation, _lock_dir

    stale = _lock_dir() / "7.lock"
    stale.write_text("")
    res = PortReservation.try_acquire(7)
    assert res is not None and PortReservation.try_acquire(7) is None
    res.release()
    assert not stale.exists()
