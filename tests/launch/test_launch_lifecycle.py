"""Start, readiness, server_info diff, run directory and stop, against the stand-in through `--sglang-cmd`."""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest
from launch_helpers import MODEL, group_gone

from servetune.launch import start_server

ARGV = [
    "--model-path",
    MODEL,
    "--max-running-requests",
    "16",
    "--cuda-graph-max-bs-decode",
    "64",
    "--api-key",
    "sk-secret",
]
REQUESTED = {
    "model_path": MODEL,
    "max_running_requests": 16,
    "cuda_graph_max_bs_decode": 64,
    "mm_feature_transport": None,
}


def test_launch_waits_for_readiness_and_records_the_server_info_diff(make_options):
    """The handle is ready on its own port and its diff shows what the server changed, and what it
    resolved for the requested-as-None and the watched fields; a field nobody named is not in it."""
    opts = make_options(watched_fields=("chunked_prefill_size",))
    with start_server(ARGV, {"SGLANG_VLM_CACHE_SIZE_MB": "0"}, REQUESTED, opts) as server:
        assert server.alive and server.startup_s is not None
        assert server.server_info["pid"] == server.pid
        assert server.server_info["port"] == server.port
        diff = server.diff.by_field()
        assert (diff["cuda_graph_max_bs_decode"].status, diff["cuda_graph_max_bs_decode"].effective) == ("changed", 16)
        assert (diff["mm_feature_transport"].status, diff["mm_feature_transport"].effective) == ("resolved", "cpu")
        assert diff["max_running_requests"].status == "same"
        assert (diff["chunked_prefill_size"].status, diff["chunked_prefill_size"].effective) == ("resolved", 8192)
        assert set(diff) == {*REQUESTED, "chunked_prefill_size"}
        assert [f.field for f in server.diff.changed] == ["cuda_graph_max_bs_decode"]
        recorded = json.loads((server.run_dir / "server_info_diff.json").read_text())
        assert {f["field"]: f["status"] for f in recorded["fields"]}["cuda_graph_max_bs_decode"] == "changed"
    assert server.exit_code == 0
    assert group_gone(server.pgid)


def test_run_directory_holds_redacted_argv_env_and_the_server_log(make_options):
    """argv.txt and env.json are written with secrets redacted; server.log is the server's output."""
    opts = make_options(extra_env={"HF_TOKEN": "hf_abc", "SERVETUNE_STANDIN_TIME_SCALE": "0.1"})
    with start_server(ARGV, {"SGLANG_VLM_CACHE_SIZE_MB": "0"}, REQUESTED, opts) as server:
        run_dir = server.run_dir
    argv_txt = (run_dir / "argv.txt").read_text()
    assert "sk-secret" not in argv_txt and "--api-key '<redacted>'" in argv_txt
    assert f"--port {server.port}" in argv_txt
    env = json.loads((run_dir / "env.json").read_text())
    assert env["HF_TOKEN"] == "<redacted>" and env["SGLANG_VLM_CACHE_SIZE_MB"] == "0"
    assert "fired up and ready to roll" in (run_dir / "server.log").read_text()
    assert int((run_dir / "server.pid").read_text()) == server.pid


def test_the_server_stamps_its_log_to_the_millisecond_unless_told_otherwise(make_options, monkeypatch):
    """`SGLANG_LOG_MS=1` goes to every server (and its env.json) unless the resolved env, `extra_env` or
    servetune's own environment sets it; the stand-in, like SGLang, then stamps `[... 22:40:15.120]`."""
    stamped = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})?\] ", re.MULTILINE)
    monkeypatch.delenv("SGLANG_LOG_MS", raising=False)
    cases = [({}, {}, "1"), ({"SGLANG_LOG_MS": "0"}, {}, "0"), ({}, {"SGLANG_LOG_MS": "0"}, "0")]
    for env, extra, expected in cases:
        with start_server(["--model-path", MODEL], env, {}, make_options(extra_env=extra)) as server:
            run_dir = server.run_dir
        assert json.loads((run_dir / "env.json").read_text())["SGLANG_LOG_MS"] == expected
        fractions = {m.group(1) is not None for m in stamped.finditer((run_dir / "server.log").read_text())}
        assert fractions == {expected == "1"}, (env, extra)
    monkeypatch.setenv("SGLANG_LOG_MS", "0")  # the caller's own environment: not overridden, not recorded
    with start_server(["--model-path", MODEL], {}, {}, make_options()) as server:
        run_dir = server.run_dir
    assert "SGLANG_LOG_MS" not in json.loads((run_dir / "env.json").read_text())
    assert {m.group(1) for m in stamped.finditer((run_dir / "server.log").read_text())} == {None}


def test_a_slow_start_is_waited_for(make_options):
    """A server that loads for a while before binding its port is still found ready."""
    with start_server(["--model-path", MODEL], {}, {}, make_options({"START_DELAY_S": 0.6, "WARMUP_S": 0.3})) as server:
        assert server.startup_s >= 0.9


def test_stop_is_idempotent_and_takes_the_children_with_it(make_options):
    """stop() twice is harmless; the server's child processes (its process group) are gone afterwards."""
    server = start_server(["--model-path", MODEL], {}, {}, make_options({"CHILDREN": 2}))
    import psutil

    children = psutil.Process(server.pid).children()
    assert len(children) == 2
    assert server.stop() == 0
    assert server.stop() == 0
    assert group_gone(server.pgid)
    assert not any(c.is_running() for c in children)


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(make_options):
    """SIGTERM is ignored by the server and its children; SIGKILL of the group follows the grace period."""
    server = start_server(
        ["--model-path", MODEL], {}, {}, make_options({"IGNORE_SIGTERM": 1, "CHILDREN": 2}, stop_grace_s=0.5)
    )
    t0 = time.monotonic()
    code = server.stop()
    assert code == -9  # killed: SIGTERM alone would never have ended it
    assert time.monotonic() - t0 >= 0.5  # ... and only after the grace period
    assert group_gone(server.pgid)


def test_the_env_reaches_the_server_process(make_options, tmp_path):
    """Resolved env vars and CUDA_VISIBLE_DEVICES are in the server's environment."""
    import psutil

    with start_server(
        ["--model-path", MODEL], {"SGLANG_MM_FEATURE_CACHE_MB": "3072"}, {}, make_options(cuda_visible_devices="3")
    ) as server:
        env = psutil.Process(server.pid).environ()
    assert env["SGLANG_MM_FEATURE_CACHE_MB"] == "3072" and env["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.parametrize("flag", ["--port", "--host"])
def test_host_and_port_in_the_argv_are_replaced_by_the_launchers(make_options, flag):
    """A stray --host/--port in the resolved argv never overrides the reserved port."""
    stray = "1" if flag == "--port" else "0.0.0.0"
    with start_server(["--model-path", MODEL, flag, stray], {}, {}, make_options()) as server:
        assert server.server_info["host"] == "127.0.0.1"
        assert server.server_info["port"] == server.port != 1
    assert os.path.exists(server.log_path)


WRAPPER = (
    "import subprocess, sys\n"
    "p = subprocess.Popen([sys.executable, '-m', 'servetune.testing.standin', *sys.argv[1:]], start_new_session=True)\n"
    "sys.exit(p.wait())\n"
)


def test_a_wrapper_whose_server_leaves_the_group_is_accepted_and_still_stopped(make_options):
    """Like a container or srun prefix: the listener is a newer process outside our group; it is ours,
    and stop kills it."""
    import psutil

    opts = make_options(sglang_cmd=[sys.executable, "-c", WRAPPER])
    with start_server(["--model-path", MODEL], {}, {"model_path": MODEL}, opts) as server:
        inner = psutil.Process(server.server_info["pid"])
        assert inner.pid != server.pid and os.getpgid(inner.pid) != server.pgid
    assert not inner.is_running() or inner.status() == psutil.STATUS_ZOMBIE
