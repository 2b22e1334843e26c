"""No process is left behind when the parent is interrupted: Ctrl-C of `servetune launch`, SIGTERM of a tuner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from launch_helpers import STANDIN_CMD, group_gone

PARENT = textwrap.dedent(
    """
    import sys, time
    from servetune.launch import LaunchOptions, start_server
    opts = LaunchOptions(sglang_cmd=sys.argv[2:], run_dir=sys.argv[1], stop_grace_s=2, wait_gpu_release=False,
                         extra_env={"SERVETUNE_STANDIN_CHILDREN": "2"})
    server = start_server(["--model-path", "m"], {}, {}, opts)
    print("ready", server.pid, flush=True)
    time.sleep(60)
    """
)


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    proc.kill()
    raise AssertionError(f"{needle!r} not seen; output:\n{''.join(seen)}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_library_user_interrupted_leaves_no_server_behind(tmp_path, sig):
    """A script that started a server and is then interrupted stops the server's whole group on its way out."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), *STANDIN_CMD], stdout=subprocess.PIPE, text=True
    )
    pid = int(_wait_for_line(proc, "ready").split()[1])
    proc.send_signal(sig)
    proc.wait(20)
    assert group_gone(pid)


def test_a_forked_child_never_stops_its_parents_servers(make_options):
    """After fork, the child's exit hooks see no live servers: only the process that started one stops it."""
    from servetune.launch import _registry, start_server

    with start_server(["--model-path", "m"], {}, {}, make_options()) as server:
        pid = os.fork()
        if pid == 0:
            _registry._stop_all_live()
            os._exit(0 if not _registry._LIVE else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert server.alive
        assert server.get_json("/health") == {"status": "ok"}


def _resolver_ready() -> None:
    try:
        from servetune.api import resolve_launch

        resolve_launch("qwen2.5-vl-3b-instruct", gpu="h200")
    except ImportError as exc:
        pytest.skip(f"the resolver is not complete in this checkout: {exc}")


def test_ctrl_c_of_servetune_launch_stops_the_server_and_exits_130(tmp_path):
    """`servetune launch` in the foreground: ready, then SIGINT → exit 130, server group gone, nothing left."""
    _resolver_ready()
    from servetune.launch import reserve_free_port

    res = reserve_free_port("127.0.0.1")
    port = res.port
    res.release()
    run_dir = tmp_path / "run"
    env = {**os.environ, "SERVETUNE_STANDIN_CHILDREN": "2"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune",
            "launch",
            "--model",
            "qwen2.5-vl-3b-instruct",
            "--gpu",
            "h200",
            "--sglang-cmd",
            " ".join(STANDIN_CMD),
            "--port",
            str(port),
            "--run-dir",
            str(run_dir),
            "--stop-grace",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    _wait_for_line(proc, "serving; Ctrl-C stops the server")
    pid = int((run_dir / "server.pid").read_text())
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=20)[0]
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest
    assert group_gone(pid)
    assert (Path(run_dir) / "resolved.yaml").exists() and (Path(run_dir) / "server_info_diff.json").exists()


def test_servetune_launch_on_a_busy_port_is_a_clear_error(tmp_path):
    """A port already in use: exit 1, an `error[launch]` message, no traceback, no run directory."""
    _resolver_ready()
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "servetune",
                "launch",
                "--model",
                "qwen2.5-vl-3b-instruct",
                "--gpu",
                "h200",
                "--quiet",
                "--sglang-cmd",
                " ".join(STANDIN_CMD),
                "--port",
                str(sock.getsockname()[1]),
                "--run-dir",
                str(tmp_path / "r"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 1 and "error[launch]" in out.stderr and "already in use" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()


def test_an_orphan_server_is_reaped_by_its_run_directory(make_options):
    """A server whose parent died by SIGKILL is found from its run directory (server.pid, argv.txt's
    port) and its group killed; the handle's own stop then finds nothing left."""
    from servetune.launch import reap_orphan_server, start_server

    with start_server(["--model-path", "m"], {}, {}, make_options({"CHILDREN": 1})) as server:
        assert reap_orphan_server(server.run_dir) == server.pid
        assert group_gone(server.pgid)


def test_reaping_leaves_a_process_that_is_not_the_recorded_server(tmp_path):
    """A pid in server.pid that runs with another --port than argv.txt's (a reused pid) is left alone."""
    from servetune.launch import reap_orphan_server

    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--port", "31998"], start_new_session=True
    )
    try:
        (tmp_path / "server.pid").write_text(f"{other.pid}\n")
        (tmp_path / "argv.txt").write_text("python -m sglang.launch_server --host 127.0.0.1 --port 31999\n")
        assert reap_orphan_server(tmp_path) is None
        assert other.poll() is None
        assert reap_orphan_server(tmp_path / "missing") is None
    finally:
        other.kill()
        other.wait()
