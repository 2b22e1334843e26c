"""Every launch failure class, classified, with its log tail, and nothing left running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from launch_helpers import MODEL, STANDIN_CMD, group_gone

from servetune.errors import LaunchError
from servetune.launch import classify_failure, reserve_free_port, start_server


def launch_error(argv, options, env=None) -> LaunchError:
    with pytest.raises(LaunchError) as info:
        start_server(argv, env or {}, {"model_path": MODEL}, options)
    return info.value


def test_oom_at_start_is_classified_with_the_log_tail_and_its_children_are_gone(make_options):
    """A server that dies with a CUDA OOM while starting gives failure `oom`; its orphaned children are killed."""
    opts = make_options({"OOM_AT_START": 1, "CHILDREN": 2})
    err = launch_error(["--model-path", MODEL], opts)
    assert err.failure == "oom" and err.exit_code == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in err.log_tail
    assert "log tail:" in err.render() and "mem-fraction-static" in err.render()
    pid = int((opts.run_dir / "server.pid").read_text())
    assert group_gone(pid)


def test_a_too_high_mem_fraction_is_an_oom_at_start(make_options):
    """The stand-in's landscape: --mem-fraction-static above 0.92 does not fit."""
    err = launch_error(["--model-path", MODEL, "--mem-fraction-static", "0.95"], make_options())
    assert err.failure == "oom"


def test_a_crash_under_load_is_seen_by_check_alive_and_cleaned_up(make_options):
    """After N requests the server crashes; check_alive raises `crash` with the trace, the group is gone."""
    import httpx

    server = start_server(["--model-path", MODEL], {}, {}, make_options({"CRASH_AFTER": 1, "CHILDREN": 1}))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert httpx.post(f"{server.url}/v1/chat/completions", json=body).status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{server.url}/v1/chat/completions", json=body)
    server.proc.wait(timeout=5)
    with pytest.raises(LaunchError) as info:
        server.check_alive()
    assert info.value.failure == "crash" and "CRASH_AFTER" in info.value.log_tail
    assert server.failure() == "crash"
    server.stop()
    assert group_gone(server.pgid)


@pytest.mark.parametrize("knobs", [{"START_DELAY_S": 30}, {"HANG": 1}], ids=["slow", "hang"])
def test_a_server_that_is_not_ready_in_time_is_a_startup_timeout(make_options, knobs):
    """Slow to bind, or bound but never healthy: `startup_timeout` at the timeout, without waiting for the
    server (its 30 s delay, or forever), group gone."""
    opts = make_options({**knobs, "CHILDREN": 1}, startup_timeout_s=0.8, stop_grace_s=1.0)
    t0 = time.monotonic()
    err = launch_error(["--model-path", MODEL], opts)
    assert err.failure == "startup_timeout"
    assert 0.8 <= time.monotonic() - t0 < 30  # an ordering: the timeout, not the server, ended the wait
    assert "did not become ready within 0.8 s" in err.message
    assert group_gone(int((opts.run_dir / "server.pid").read_text()))


def test_a_port_with_a_listener_is_refused(make_options):
    """An explicit port that something listens on: `port_in_use`, and nothing is started."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        opts = make_options(port=sock.getsockname()[1])
        err = launch_error(["--model-path", MODEL], opts)
    assert err.failure == "port_in_use" and "already in use" in err.message
    assert not (opts.run_dir / "server.pid").exists()


def test_a_port_served_by_a_server_we_did_not_start_is_refused(make_options, tmp_path):
    """A stand-in started by hand on a port: a launch asked to use that port refuses it and names what answers."""
    res = reserve_free_port("127.0.0.1")
    port = res.port
    res.release()
    with open(tmp_path / "other.log", "wb") as log:
        other = subprocess.Popen(
            [*STANDIN_CMD, "--model-path", "someone/else", "--port", str(port)],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            _wait_listening(port)
            err = launch_error(["--model-path", MODEL], make_options(port=port))
            assert err.failure == "port_in_use"
            assert "someone/else" in err.render()
            assert other.poll() is None, "the other server must not be touched"
        finally:
            other.terminate()
            other.wait(5)


def test_an_old_server_answering_on_our_port_is_a_wrong_server(make_options, tmp_path):
    """An old server, still loading when the port was checked, binds it while ours loads: `wrong_server`.

    This is what was seen on the GPU machine: a server left from an earlier call finished
    starting and answered the next run's health check.
    """
    res = reserve_free_port("127.0.0.1")
    port = res.port
    res.release()
    with open(tmp_path / "old.log", "wb") as log:
        old = subprocess.Popen(
            [*STANDIN_CMD, "--model-path", "old/run", "--port", str(port)],
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "SERVETUNE_STANDIN_START_DELAY_S": "1.0"},
        )
        opts = make_options({"START_DELAY_S": 8, "CHILDREN": 1}, port=port, stop_grace_s=1.0)
        try:
            t0 = time.monotonic()
            err = launch_error(["--model-path", MODEL], opts)
            assert err.failure == "wrong_server"
            assert "outside our process group" in err.message and "started no later than our server" in err.message
            assert time.monotonic() - t0 < 8  # found before our own server (8 s delay) could have bound
            assert old.poll() is None, "the old server is not ours to kill"
            assert group_gone(int((opts.run_dir / "server.pid").read_text()))
        finally:
            old.terminate()
            old.wait(5)


def test_a_missing_program_is_a_bad_command(make_options):
    """A command prefix that does not exist fails at once with a message naming it."""
    opts = make_options(sglang_cmd=["/nonexistent/python", "-m", "sglang.launch_server"])
    err = launch_error(["--model-path", MODEL], opts)
    assert err.failure == "bad_command" and "/nonexistent/python" in err.message and "--sglang-cmd" in err.render()


def test_a_missing_module_is_a_bad_command(make_options):
    """`python -m <module that is not installed>` is refused before starting anything."""
    err = launch_error(
        ["--model-path", MODEL], make_options(sglang_cmd=[sys.executable, "-m", "no_such_sglang.launch_server"])
    )
    assert err.failure == "bad_command" and "'no_such_sglang' is not installed" in err.message


def test_a_command_line_the_server_rejects_is_a_bad_command(make_options):
    """The server exits with a usage error (here: the stand-in without --model-path)."""
    err = launch_error(["--max-running-requests", "8"], make_options())
    assert err.failure == "bad_command" and err.exit_code == 2 and "--model-path" in err.log_tail


def test_sglang_cmd_from_the_environment(make_options, monkeypatch):
    """SERVETUNE_SGLANG_CMD is split with shlex and used when no prefix is given."""
    monkeypatch.setenv("SERVETUNE_SGLANG_CMD", " ".join(STANDIN_CMD))
    opts = make_options().model_copy(update={"sglang_cmd": None})
    with start_server(["--model-path", MODEL], {}, {}, opts) as server:
        assert server.server_info["version"].startswith("standin-")


@pytest.mark.parametrize(
    ("code", "log", "expected"),
    [
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        (-9, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom"),
        (
            1,
            "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
            "port_in_use",
        ),
        (1, "/usr/bin/python: No module named sglang", "bad_command"),
        (
            2,
            "usage: launch_server.py [-h]\nlaunch_server.py: error: ambiguous option: --cuda-graph-max-bs",
            "bad_command",
        ),
        (127, "", "bad_command"),
        (-11, "Segmentation fault", "crash"),
        (1, "RuntimeError: scheduler died", "crash"),
    ],
)
def test_classify_failure(code, log, expected):
    """Exit status and log markers map to one failure class."""
    assert classify_failure(code, log) == expected


def _wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError(f"nothing listens on {port}")
