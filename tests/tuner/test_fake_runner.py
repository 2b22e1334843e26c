"""`FakeRunner` calls the builtin client's progress points, stops where `should_stop` says, and
returns a function's failure as the measurement's."""

from __future__ import annotations

import pytest

from servetune.context import Context
from servetune.runner import Failure
from servetune.schema.workload import Workload
from servetune.testing import FakeRunner


@pytest.fixture(scope="module")
def resolution():
    return Context.build("qwen3-8b", gpu="h200").resolve({"max_running_requests": 32})


WORKLOAD = Workload(
    name="w", summary="A test load.", kind="text", requests=384, max_concurrency=64, input_tokens=8, output_tokens=8
)


def test_should_stop_is_asked_where_the_builtin_client_asks(resolution, tmp_path):
    seen = []
    runner = FakeRunner(lambda call: {"completed": call.total, "request_throughput": 9.0}, progress=True)
    m = runner.measure(
        resolution, WORKLOAD, run_dir=tmp_path, requests=384, should_stop=lambda done, p: seen.append(done) or False
    )
    # every 384 // 50 = 7 completions and the end of the first wave (64); never at the last one
    assert seen == sorted({*range(7, 384, 7), 64})
    assert m.ok and m.metrics == {"completed": 384, "request_throughput": 9.0} and not m.stopped_early
    assert [c.values["max_running_requests"] for c in runner.calls] == [32]


def test_a_true_should_stop_ends_the_run_with_partial_metrics(resolution, tmp_path):
    runner = FakeRunner(
        lambda call: {"completed": call.total},
        progress=lambda call, done: {"completed": done, "steady_completed": max(0, done - 64)},
    )
    m = runner.measure(
        resolution, WORKLOAD, run_dir=tmp_path, should_stop=lambda done, p: p.metrics()["steady_completed"] > 0
    )
    assert m.stopped_early and m.metrics == {"completed": 70, "steady_completed": 6, "stopped_early": True}


def test_without_progress_should_stop_is_never_called_and_a_failure_is_returned(resolution, tmp_path):
    def never(done, partial):
        raise AssertionError("called")

    ok = FakeRunner(lambda call: {"completed": 1})
    assert ok.measure(resolution, WORKLOAD, run_dir=tmp_path, should_stop=never).ok
    oom = Failure(cls="oom", stage="start", message="CUDA out of memory")
    m = FakeRunner(lambda call: oom).measure(resolution, WORKLOAD, run_dir=tmp_path, gpus=["0", "1"])
    assert m.failure == oom and m.metrics is None and not m.ok


def test_start_gives_a_server_that_benchmarks_with_the_function(resolution, tmp_path):
    runner = FakeRunner(lambda call: {"completed": call.total}, server_info=lambda call: {"tp_size": 1})
    with runner.start(resolution, run_dir=tmp_path) as server:
        assert server.alive and server.server_info == {"tp_size": 1}
        assert server.bench(WORKLOAD, requests=12) == {"completed": 12}
    assert not server.alive and len(runner.calls) == 1 and runner.calls[0].requests == 12
