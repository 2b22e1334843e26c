"""managed_run: start, benchmark, stop; failures (OOM under load, crash, start failures) come back as data."""

from __future__ import annotations

import json

import pytest
from launch_helpers import MODEL, group_gone

from servetune.launch import managed_run

ARGV = ["--model-path", MODEL, "--cuda-graph-max-bs-decode", "64"]
REQUESTED = {"model_path": MODEL, "cuda_graph_max_bs_decode": 64}


def tiny_bench(
    url, workload, *, requests=None, run_dir=None, client="auto", model=None, on_progress=None, should_stop=None
):
    """A minimal client (stands in for run_benchmark's contract): n streamed chat requests, 4 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from servetune.errors import BenchError

    def one(_):
        body = {"messages": [{"role": "user", "content": "a b c"}], "max_tokens": 8, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as resp:
            return sum(1 for line in resp.iter_lines() if line.startswith("data: "))

    try:
        with ThreadPoolExecutor(4) as pool:
            chunks = list(pool.map(one, range(requests or 8)))
    except httpx.HTTPError as exc:
        raise BenchError(f"request failed: {exc}") from exc
    return {"completed": len(chunks), "chunks": sum(chunks)}


def test_a_managed_run_returns_metrics_diff_and_timings(make_options):
    """Success: metrics from the bench, the server_info diff, timings; the server is gone afterwards."""
    opts = make_options()
    result = managed_run(ARGV, {}, REQUESTED, "text-chat", opts, requests=12, bench=tiny_bench, facts={"gpu": "none"})
    assert result.ok and result.failure is None
    assert result.metrics["completed"] == 12
    assert result.diff.by_field()["cuda_graph_max_bs_decode"].status == "same"
    t = result.timings
    assert t.startup_s > 0 and t.bench_s > 0 and t.stop_s is not None and t.total_s >= t.startup_s + t.bench_s
    assert json.loads((opts.run_dir / "result.json").read_text())["ok"] is True
    assert (opts.run_dir / "facts.yaml").read_text().strip() == "gpu: none"
    assert group_gone(int((opts.run_dir / "server.pid").read_text()))


def test_oom_under_load_is_a_recorded_failure(make_options):
    """The server dies with CUDA OOM during the benchmark: failure `oom` at stage `bench`, not an exception."""
    opts = make_options({"OOM_AFTER": 3, "CHILDREN": 1})
    result = managed_run(ARGV, {}, REQUESTED, "text-chat", opts, requests=12, bench=tiny_bench)
    assert (result.ok, result.failure, result.stage, result.exit_code) == (False, "oom", "bench", 1)
    assert "CUDA out of memory" in result.log_tail and "under load" in result.message
    assert json.loads((opts.run_dir / "metrics.json").read_text())["failure"] == "oom"
    assert group_gone(int((opts.run_dir / "server.pid").read_text()))


def test_a_crash_under_load_is_a_recorded_failure(make_options):
    """A crash during the benchmark (no OOM marker) is `crash`."""
    result = managed_run(
        ARGV, {}, REQUESTED, "text-chat", make_options({"CRASH_AFTER": 2}), requests=12, bench=tiny_bench
    )
    assert (result.ok, result.failure, result.stage) == (False, "crash", "bench")


def test_a_server_that_exits_just_after_the_benchmark_fails_is_a_crash(make_options):
    """The client's error can come before the dying server's exit status (in CI a crash was once
    filed as bench_error): the benchmark fails at once and our server's process group is killed
    half a second later; the run still reads `crash`."""
    import contextlib
    import os
    import signal
    import threading

    from servetune.errors import BenchError

    def kill_group(pgid: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # already stopped by the run
            os.killpg(pgid, signal.SIGKILL)

    def failing_bench(url, workload, *, run_dir=None, **_):
        pid = int((run_dir / "server.pid").read_text())  # the server this run started (its own group): ours, by id
        threading.Timer(0.5, kill_group, args=(pid,)).start()
        raise BenchError("peer closed connection without sending complete message body")

    result = managed_run(ARGV, {}, REQUESTED, "text-chat", make_options(), requests=4, bench=failing_bench)
    assert (result.ok, result.failure, result.stage) == (False, "crash", "bench")


@pytest.mark.parametrize(("knobs", "failure"), [({"OOM_AT_START": 1}, "oom"), ({"HANG": 1}, "startup_timeout")])
def test_start_failures_are_recorded_not_raised(make_options, knobs, failure):
    """A server that never serves gives a failed result with stage `start`; the bench is not called."""

    def must_not_run(*a, **k):
        raise AssertionError("bench called")

    result = managed_run(
        ARGV, {}, REQUESTED, "text-chat", make_options(knobs, startup_timeout_s=0.8), bench=must_not_run
    )
    assert (result.ok, result.failure, result.stage) == (False, failure, "start")
    assert result.timings.bench_s is None


def test_a_managed_run_with_the_real_benchmark_client(make_options):
    """The bench helper's run_benchmark (builtin client) against the stand-in gives real Metrics."""
    bench = pytest.importorskip("servetune.bench")
    result = managed_run(
        ARGV, {}, REQUESTED, bench.load_workload("text-chat"), make_options(), requests=24, client="builtin"
    )
    assert result.ok, result.message
    assert result.metrics.completed == 24 and result.metrics.request_throughput > 0
