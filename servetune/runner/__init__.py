"""Runners: one measurement (launch, benchmark, run-directory record, stop) behind one seam.

    from servetune.runner import SglangRunner
    runner = SglangRunner(LaunchOptions(sglang_cmd="python -m sglang.launch_server"), client="builtin")
    m = runner.measure(ctx.resolve(), workload, run_dir=Path("runs/x"), requests=256)
    m.ok, m.failure, m.metrics, m.timings, m.diff

    with runner.start(ctx.resolve(), run_dir=Path("runs/y")) as server:   # several benchmarks, one launch
        first = server.bench(workload, requests=128)

`servetune bench`, `servetune launch` and the tuner use this seam; tests use
`servetune.testing.FakeRunner` (no process) or the stand-in runner (a real process that stands
in for SGLang).
"""

from __future__ import annotations

from servetune.runner._base import BaseRunner, BaseServer, Failure, Measurement, OnProgress, RunTimings, ShouldStop
from servetune.runner._sglang import MANAGED_STOP_GRACE_S, WATCHED_FIELDS, SglangRunner, SglangServer

__all__ = [
    "MANAGED_STOP_GRACE_S",
    "WATCHED_FIELDS",
    "BaseRunner",
    "BaseServer",
    "Failure",
    "Measurement",
    "OnProgress",
    "RunTimings",
    "ShouldStop",
    "SglangRunner",
    "SglangServer",
]
