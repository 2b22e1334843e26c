"""One managed run: start the server, benchmark it, stop it; failures come back as data."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from servetune.errors import BenchError, LaunchError
from servetune.launch._diff import ServerInfoDiff
from servetune.launch._failures import FailureClass, classify_failure, read_tail
from servetune.launch._rundir import new_run_dir, write_facts, write_json, write_metrics, write_resolved
from servetune.launch._server import RUNS_DIR_ENV, LaunchOptions, ServerHandle, start_server

# Nothing a managed run sent is still in flight when it stops the server, so SGLang's drain has
# nothing to wait for; SGLang 0.5.17 on the H200 still took over 15 s to exit after SIGTERM.
MANAGED_STOP_GRACE_S = 8.0
BENCH_ERROR_EXIT_GRACE_S = 3.0
"""After a benchmark error, how long to wait for the server's exit status before calling it `bench_error`."""


class RunTimings(BaseModel):
    """Where a managed run's wall time went, in seconds."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    startup_s: float | None = None
    """Process start until ready and verified (None if it never got there)."""
    bench_s: float | None = None
    """The benchmark call, as seen by the launcher."""
    stop_s: float | None = None
    """SIGTERM until the process group was gone."""
    total_s: float = 0.0
    """The whole `managed_run` call."""


class RunResult(BaseModel):
    """The outcome of `managed_run`: metrics, or a classified failure with the log tail."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, arbitrary_types_allowed=True)

    ok: bool
    """True when the benchmark produced metrics and the server stayed up throughout."""
    failure: FailureClass | None = None
    """oom, crash, startup_timeout, port_in_use, bad_command, wrong_server or bench_error."""
    stage: str | None = None
    """Where it failed: `start` or `bench`."""
    message: str | None = None
    """The error message (what went wrong, what to do)."""
    log_tail: str = ""
    """Last lines of the server log when it failed."""
    exit_code: int | None = None
    """The server's exit status when it died."""
    metrics: Any = None
    """The benchmark's `Metrics` (None on failure)."""
    diff: ServerInfoDiff | None = None
    """Requested vs effective fields from `/server_info`."""
    server_info: dict[str, Any] = {}
    """The raw `/server_info` answer."""
    timings: RunTimings = RunTimings()
    """Start-up, benchmark, stop and total seconds."""
    run_dir: Path
    """The run directory (server.log, argv.txt, env.json, metrics.json, ...)."""
    url: str | None = None
    """The server's base URL while it ran."""


def _failure_from_launch(exc: LaunchError) -> dict[str, Any]:
    return {"failure": exc.failure, "message": exc.message, "log_tail": exc.log_tail, "exit_code": exc.exit_code}


def managed_run(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    requested: Mapping[str, Any] | None,
    workload: Any,
    options: LaunchOptions | None = None,
    *,
    requests: int | None = None,
    client: str = "auto",
    model: str | None = None,
    on_progress: Callable[..., Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    facts: Any = None,
    resolved: Any = None,
    bench: Callable[..., Any] | None = None,
) -> RunResult:
    """Start a server, run `servetune.bench.run_benchmark` against it, stop it.

    Launch and benchmark failures are returned as data (`RunResult.failure`), never raised: a
    server that dies during the benchmark is `oom` when its log shows an out-of-memory marker
    (OOM under load), else `crash`; a benchmark error with the server alive is `bench_error`.
    Ctrl-C stops the server and propagates.

    Args:
        argv, env, requested: As for `start_server` (`Resolution.argv()`, `.env()`, `.requested()`).
        workload: A `Workload` for the benchmark.
        options: Launch options; `run_dir` None makes a new one (kind `run`).
        requests, client, model, on_progress, should_stop: Passed to `run_benchmark`;
            a given `should_stop` is wrapped to also turn true as soon as the server dies
            (left None, the bench client may be SGLang's own, which cannot stop early).
        facts, resolved: Written to `facts.yaml` / `resolved.yaml` when given.
        bench: A function with `run_benchmark`'s signature (tests); default the real one.

    Returns:
        A `RunResult`, also written to `result.json` (and metrics to `metrics.json`).
    """
    t0 = time.monotonic()
    options = options or LaunchOptions()
    run_dir = (
        Path(options.run_dir) if options.run_dir else new_run_dir(Path(os.environ.get(RUNS_DIR_ENV, "runs")), "run")
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    options = options.model_copy(update={"run_dir": run_dir})
    if facts is not None:
        write_facts(run_dir, facts)
    if resolved is not None:
        write_resolved(run_dir, resolved)
    if bench is None:
        from servetune.bench import run_benchmark as bench

    timings = RunTimings()
    try:
        handle = start_server(argv, env, requested, options)
    except LaunchError as exc:
        timings.total_s = time.monotonic() - t0
        result = RunResult(ok=False, stage="start", run_dir=run_dir, timings=timings, **_failure_from_launch(exc))
        return _record(result)
    timings.startup_s = handle.startup_s
    fields: dict[str, Any] = {}
    try:
        fields = _bench(handle, bench, workload, requests, run_dir, client, model, on_progress, should_stop, timings)
    finally:
        handle.stop(grace_s=min(options.stop_grace_s, MANAGED_STOP_GRACE_S))
        timings.stop_s = handle.stop_s
        timings.total_s = time.monotonic() - t0
    result = RunResult(
        run_dir=run_dir, url=handle.url, diff=handle.diff, server_info=handle.server_info, timings=timings, **fields
    )
    return _record(result)


def _bench(
    handle: ServerHandle,
    bench: Callable[..., Any],
    workload: Any,
    requests: int | None,
    run_dir: Path,
    client: str,
    model: str | None,
    on_progress: Any,
    should_stop: Any,
    timings: RunTimings,
) -> dict[str, Any]:
    def stop_now(*args: Any) -> bool:
        return not handle.alive or bool(should_stop(*args))

    t = time.monotonic()
    metrics = None
    bench_error: BenchError | None = None
    try:
        metrics = bench(
            handle.url,
            workload,
            requests=requests,
            run_dir=run_dir,
            client=client,
            model=model,
            on_progress=on_progress,
            should_stop=stop_now if should_stop is not None else None,
        )
    except BenchError as exc:
        bench_error = exc
    finally:
        timings.bench_s = time.monotonic() - t
    code = handle.exit_code
    if code is None and bench_error is not None:
        # a server that dies closes its connections first and exits a moment later: the client's
        # error can come before the exit status (in CI a crash was once filed as bench_error)
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = handle.proc.wait(timeout=BENCH_ERROR_EXIT_GRACE_S)
    if code is not None:
        failure = classify_failure(code, read_tail(handle.log_path, 400))
        what = "ran out of memory under load" if failure == "oom" else "died"
        return {
            "ok": False,
            "stage": "bench",
            "failure": failure,
            "exit_code": code,
            "log_tail": handle.log_tail(),
            "message": f"the server {what} during the benchmark (exit status {code})",
            "metrics": metrics,
        }
    if bench_error is not None:
        return {
            "ok": False,
            "stage": "bench",
            "failure": "bench_error",
            "message": bench_error.message,
            "log_tail": handle.log_tail(),
        }
    return {"ok": True, "metrics": metrics}


def _record(result: RunResult) -> RunResult:
    if result.ok:
        write_metrics(result.run_dir, result.metrics)
    else:
        write_metrics(
            result.run_dir,
            {
                "failure": result.failure,
                "stage": result.stage,
                "message": result.message,
                "exit_code": result.exit_code,
            },
        )
    write_json(result.run_dir, "result.json", result.model_dump(mode="json", exclude={"server_info"}))
    return result
