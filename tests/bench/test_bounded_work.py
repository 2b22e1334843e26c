"""Bounded work: requests are built as they are sent (memory flat in the request count), a stated
maximum per run and per workload file is refused with a clear error, and long runs show progress."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from fakeserver import FakeServer

from servetune.bench import run_benchmark
from servetune.bench._bodies import Bodies
from servetune.limits import MAX_REQUESTS, MAX_WARMUP_REQUESTS
from servetune.schema.workload import Workload

TEXT = Workload(
    name="endless", summary="s", requests=MAX_REQUESTS, max_concurrency=8, input_tokens=64, output_tokens=16,
    range_ratio=0.5, warmup_requests=4,
)  # fmt: skip


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servetune", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_bodies_for_the_largest_run_cost_nothing_up_front():
    """Bodies for MAX_REQUESTS requests: building them keeps nothing per request (under 64 KiB traced,
    where a list of a million lengths is 8 MiB), and each request's lengths are drawn on demand, the
    same every time, inside the range."""
    Bodies(TEXT, "m", 1, 0, None)  # imports done outside the trace
    tracemalloc.start()
    try:
        bodies = Bodies(TEXT, "m", MAX_REQUESTS, TEXT.warmup_requests, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    lengths = [bodies.input_len(i) for i in (0, 1, MAX_REQUESTS - 1)]
    assert lengths == [bodies.input_len(i) for i in (0, 1, MAX_REQUESTS - 1)]
    assert all(32 <= n <= 64 for n in lengths) and all(8 <= bodies.output_len(i) <= 16 for i in range(100))
    assert len({bodies.input_len(i) for i in range(200)}) > 10  # drawn, not one value


class _Enough(Exception):
    pass


def test_a_closed_loop_run_holds_no_more_tasks_than_its_concurrency():
    """A run of MAX_REQUESTS requests at 8 in flight never holds more than the 8 request tasks (and the
    sender, producer and run itself): nothing waits in memory for a slot, whatever the count. A failure
    in the middle still cancels and awaits every task (the error propagates, nothing is left running)."""
    seen: list[int] = []

    def on_progress(done, total, partial):
        seen.append(len(asyncio.all_tasks()))
        if len(seen) >= 3:
            raise _Enough

    with FakeServer(ttft_s=0.002, itl_s=0.0) as server, pytest.raises(_Enough):
        run_benchmark(server.url, TEXT, client="builtin", on_progress=on_progress)
    assert seen and max(seen) <= TEXT.max_concurrency + 4


@pytest.mark.parametrize(
    "args",
    [["bench", "--url", "http://127.0.0.1:9", "-w", "text-chat", "-n", "1000000000"],
     ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--requests", "1000000000"],
     ["tune", "-m", "qwen3-8b", "--gpu", "h200", "--requests", "0"],
     ["compare", "-m", "qwen3-8b", "--gpu", "h200", "--a-no-rules", "--requests", "1000001"]],
    ids=["bench", "tune", "tune-zero", "compare"],
)  # fmt: skip
def test_a_request_count_over_the_maximum_is_refused_before_anything_starts(tmp_path, args):
    """-n/--requests above MAX_REQUESTS (or below 1): a usage error naming the range, exit 2, no run directory."""
    out = _cli(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    bound = "greater than or equal to 1" if args[-1] == "0" else f"less than or equal to {MAX_REQUESTS}"
    assert "'--requests'" in out.stderr and bound in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "key, value, limit",
    [("requests", 1_000_000_000, MAX_REQUESTS), ("tune_requests", 2_000_000, MAX_REQUESTS),
     ("warmup_requests", 10**9, MAX_WARMUP_REQUESTS)],
)  # fmt: skip
def test_a_workload_file_over_the_maximum_is_an_error_at_its_line(tmp_path, key, value, limit):
    """A workload file asking for more than the maximum: exit 1, the file:line of the key and the limit."""
    (tmp_path / "big.yaml").write_text(f"name: big\nsummary: s\nkind: text\n{key}: {value}\n")
    out = _cli("bench", "--url", "http://127.0.0.1:9", "-w", "big.yaml", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "error[invalid-spec]" in out.stderr and f"less than or equal to {limit}" in out.stderr
    assert "big.yaml:4:1" in out.stderr and f"at key: {key}" in out.stderr


def test_run_benchmark_refuses_a_count_over_the_maximum():
    """The library call refuses it too, naming the limit."""
    from servetune.errors import SpecError

    with pytest.raises(SpecError, match=f"{MAX_REQUESTS:,} must hold"):
        run_benchmark("http://127.0.0.1:9", TEXT, requests=MAX_REQUESTS + 1)


def test_a_long_run_in_a_pipe_prints_progress(tmp_path):
    """A managed bench of 100,000 requests with stderr a pipe: a progress line (done/total, req/s) comes
    every 10 s; SIGINT then stops it as usual."""
    (tmp_path / "long.yaml").write_text(
        "name: long\nsummary: s\nkind: text\nrequests: 100000\nmax_concurrency: 8\ninput_tokens: 32\n"
        "output_tokens: 16\nwarmup_requests: 2\n"
    )
    standin = f"{sys.executable} -m servetune.testing.standin"
    proc = subprocess.Popen(
        [sys.executable, "-m", "servetune", "bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", "long.yaml",
         "--sglang-cmd", standin, "--run-dir", str(tmp_path / "run")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert line.startswith("bench  ") and "/100,000 requests completed" in line, line
        os.kill(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted by SIGINT: bench stopped after" in rest


def test_progress_ticks_between_snapshots():
    """Between its snapshots (every 1/50 of the run) the client still calls on_progress every second,
    with no metrics: a run of a million requests does not wait 20,000 completions to say anything."""
    calls: list[tuple[int, object]] = []
    started = time.monotonic()

    def on_progress(done, total, partial):
        calls.append((done, partial))
        if time.monotonic() - started > 3.5:
            raise _Enough

    with FakeServer(ttft_s=0.01, itl_s=0.0) as server, pytest.raises(_Enough):
        run_benchmark(server.url, TEXT, client="builtin", on_progress=on_progress)
    ticks = [done for done, partial in calls if partial is None]
    assert len(ticks) >= 2 and ticks == sorted(ticks) and ticks[-1] > 0
