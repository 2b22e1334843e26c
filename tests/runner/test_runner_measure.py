"""`BaseRunner.measure` through the stand-in runner: start, benchmark, record, stop; failures (OOM under
load, crash, start failures, benchmark errors) come back as data, Ctrl-C stops the server and propagates."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

import pytest

from servetune.errors import BenchError
from servetune.hardware import machine_id
from servetune.launch import PortReservation
from servetune.runner import WATCHED_FIELDS, SglangRunner, SglangServer
from servetune.testing import standin_command
from tests.launch.launch_helpers import group_gone

RUN_FILES = (
    "facts.yaml",
    "resolved.yaml",
    "argv.txt",
    "env.json",
    "server.log",
    "server.pid",
    "server_info.json",
    "server_info_diff.json",
    "machine.json",
    "metrics.json",
    "result.json",
)


def _pid(run_dir) -> int:
    return int((run_dir / "server.pid").read_text())


def test_a_measurement_returns_metrics_diff_timings_and_every_run_file(make_runner, resolution, workload, tmp_path):
    """Success: the builtin client's metrics, the server_info diff (requested and watched fields),
    timings, every file of the run directory; the server's group is gone afterwards."""
    m = make_runner().measure(resolution, workload, run_dir=tmp_path, requests=12)
    assert m.ok and m.failure is None, m.failure
    assert m.metrics.completed == 12 and m.metrics.request_throughput > 0
    diff = m.diff.by_field()
    assert diff["cuda_graph_max_bs_decode"].status == "same"
    left_to_server = [f for f in WATCHED_FIELDS if f not in resolution.requested() and f in m.server_info]
    assert left_to_server and all(diff[f].status == "resolved" for f in left_to_server)
    t = m.timings
    assert t.startup_s > 0 and t.bench_s > 0 and t.stop_s is not None and t.total_s >= t.startup_s + t.bench_s
    assert [name for name in RUN_FILES if not (tmp_path / name).is_file()] == []
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["ok"] is True and result["metrics"]["completed"] == 12
    assert json.loads((tmp_path / "metrics.json").read_text())["completed"] == 12
    assert "gpu:" in (tmp_path / "facts.yaml").read_text()
    assert "--cuda-graph-max-bs-decode 64" in (tmp_path / "argv.txt").read_text()
    assert json.loads((tmp_path / "machine.json").read_text()) == {"machine": machine_id()}  # None without NVML
    assert m.url is not None and group_gone(_pid(tmp_path))


def test_oom_under_load_is_a_recorded_failure(make_runner, resolution, workload, tmp_path):
    """The server dies with CUDA OOM during the benchmark: failure `oom` at stage `bench`, not an exception."""
    m = make_runner({"OOM_AFTER": 3, "CHILDREN": 1}).measure(resolution, workload, run_dir=tmp_path, requests=12)
    f = m.failure
    assert (m.ok, f.cls, f.stage, f.exit_code) == (False, "oom", "bench", 1)
    assert "CUDA out of memory" in f.log_tail and "under load" in f.message
    assert json.loads((tmp_path / "metrics.json").read_text())["failure"] == "oom"
    assert json.loads((tmp_path / "result.json").read_text())["failure"] == "oom"
    assert group_gone(_pid(tmp_path))


def test_a_crash_under_load_is_a_recorded_failure(make_runner, resolution, workload, tmp_path):
    """A crash during the benchmark (no OOM marker) is `crash`."""
    m = make_runner({"CRASH_AFTER": 2}).measure(resolution, workload, run_dir=tmp_path, requests=12)
    assert (m.ok, m.failure.cls, m.failure.stage) == (False, "crash", "bench")


class _FailingBench(SglangServer):
    """The client fails at once; the server's group is killed half a second later (a dying server
    closes its connections before it exits)."""

    def bench(self, workload, **_):
        def kill_group() -> None:
            with contextlib.suppress(ProcessLookupError):  # already stopped by the runner
                os.killpg(self.handle.pgid, signal.SIGKILL)  # the group this runner started: ours, by id

        threading.Timer(0.5, kill_group).start()
        raise BenchError("peer closed connection without sending complete message body")


def test_a_server_that_exits_just_after_the_benchmark_fails_is_a_crash(make_runner, resolution, workload, tmp_path):
    """The client's error can come before the dying server's exit status (in CI a crash was once
    filed as bench_error): the runner waits for the exit status and the measurement reads `crash`."""
    m = make_runner(server_class=_FailingBench).measure(resolution, workload, run_dir=tmp_path, requests=4)
    assert (m.ok, m.failure.cls, m.failure.stage) == (False, "crash", "bench")


class _BenchErrorOnly(SglangServer):
    def bench(self, workload, **_):
        raise BenchError("every request failed: 404 Not Found")


def test_a_benchmark_error_with_the_server_alive_is_bench_error(make_runner, resolution, workload, tmp_path):
    """The benchmark fails but the server keeps running: `bench_error` with the client's message, after
    the exit grace; the server is then stopped."""
    from servetune.runner._base import BENCH_ERROR_EXIT_GRACE_S

    m = make_runner(server_class=_BenchErrorOnly).measure(resolution, workload, run_dir=tmp_path, requests=4)
    f = m.failure
    assert (m.ok, f.cls, f.stage, f.exit_code) == (False, "bench_error", "bench", None)
    assert f.message == "every request failed: 404 Not Found"
    assert m.timings.total_s >= m.timings.startup_s + BENCH_ERROR_EXIT_GRACE_S
    assert group_gone(_pid(tmp_path))


def test_a_bad_benchmark_option_is_an_error_not_a_property_of_the_config(make_runner, resolution, workload, tmp_path):
    """A `ServetuneError` from the benchmark that is not about the server (an unknown client) is `error`."""
    runner = make_runner()
    runner.client = "no-such-client"
    m = runner.measure(resolution, workload, run_dir=tmp_path, requests=4)
    assert (m.failure.cls, m.failure.stage) == ("error", "bench")
    assert "unknown benchmark client 'no-such-client'" in m.failure.message
    assert group_gone(_pid(tmp_path))


class _MustNotBench(SglangServer):
    def bench(self, workload, **_):
        raise AssertionError("bench called")


@pytest.mark.parametrize(("knobs", "failure"), [({"OOM_AT_START": 1}, "oom"), ({"HANG": 1}, "startup_timeout")])
def test_start_failures_are_recorded_not_raised(make_runner, resolution, workload, tmp_path, knobs, failure):
    """A server that never serves gives a failed measurement at stage `start`; the benchmark is not run."""
    runner = make_runner(knobs, server_class=_MustNotBench, startup_timeout_s=3.0)
    m = runner.measure(resolution, workload, run_dir=tmp_path)
    assert (m.ok, m.failure.cls, m.failure.stage) == (False, failure, "start")
    assert m.timings.bench_s is None and m.timings.total_s > 0
    assert json.loads((tmp_path / "result.json").read_text())["stage"] == "start"
    assert group_gone(_pid(tmp_path))


class _Interrupted(SglangServer):
    def bench(self, workload, **_):
        raise KeyboardInterrupt


def test_ctrl_c_during_the_benchmark_stops_the_server_and_propagates(make_runner, resolution, workload, tmp_path):
    """Ctrl-C is not a failure of the config: the server is stopped, its port released, and it propagates."""
    with pytest.raises(KeyboardInterrupt):
        make_runner(server_class=_Interrupted).measure(resolution, workload, run_dir=tmp_path, requests=4)
    assert group_gone(_pid(tmp_path))
    port = int((tmp_path / "argv.txt").read_text().split("--port ")[1].split()[0])
    reservation = PortReservation.try_acquire(port)
    assert reservation is not None
    reservation.release()


def test_one_start_serves_several_benchmarks(make_runner, resolution, workload, tmp_path):
    """`runner.start` gives a server that can be benchmarked more than once, and stops on leaving the block."""
    with make_runner().start(resolution, run_dir=tmp_path) as server:
        first = server.bench(workload, requests=4)
        second = server.bench(workload, requests=6)
        assert server.alive
    assert (first.completed, second.completed) == (4, 6)
    assert not server.alive and server.stop_s is not None and group_gone(_pid(tmp_path))


def test_the_runner_names_the_watched_fields_unless_the_caller_did():
    """The launcher knows no tuning fields: the runner passes `WATCHED_FIELDS`, or the caller's own."""
    from servetune.launch import LaunchOptions

    assert SglangRunner().options.watched_fields == WATCHED_FIELDS
    own = SglangRunner(LaunchOptions(watched_fields=("page_size",)))
    assert own.options.watched_fields == ("page_size",)
    assert LaunchOptions().watched_fields == ()
    assert SglangRunner(LaunchOptions(sglang_cmd=standin_command())).options.sglang_cmd == standin_command()


def test_a_measured_server_gets_the_short_stop_grace(make_runner, resolution, workload, tmp_path):
    """A measured server that ignores SIGTERM (as SGLang 0.5.17 did for over 15 s) is SIGKILLed after
    MANAGED_STOP_GRACE_S: with the options' 30 s grace its stop would take at least 30 s."""
    from servetune.runner import MANAGED_STOP_GRACE_S

    runner = make_runner({"IGNORE_SIGTERM": 1, "CHILDREN": 1}, stop_grace_s=30.0)
    m = runner.measure(resolution, workload, run_dir=tmp_path, requests=4)
    assert m.ok, m.failure
    # an ordering: after the short grace, and before the options' 30 s grace could have run out
    assert MANAGED_STOP_GRACE_S <= m.timings.stop_s < 30.0
    assert group_gone(_pid(tmp_path))
