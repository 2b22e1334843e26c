"""Runners: one measurement (launch, benchmark, run-directory record, stop) behind one seam.

    from servetune.runner import SglangRunner
    runner = SglangRunner(LaunchOptions(sglang_cmd="python -m sglang.launch_server"), client="builtin")
    m = runner.measure(ctx.resolve(), workload, run_dir=Path("runs/x"), requests=256)
    m.ok, m.failure, m.metrics, m.timings, m.diff

    with runner.start(ctx.resolve(), run_dir=Path("runs/y")) as server:   # several benchmarks, one launch
        first = server.bench(workload, requests=128)

`servetune bench` (managed: `measure`; `--cross-check`: `start`) and the tuner use this seam;
`servetune launch` serves in the foreground through `servetune.launch` with `WATCHED_FIELDS`.
Tests use `servetune.testing.FakeRunner` (no process) or `servetune.testing.StandinRunner` (real
processes, with the stand-in server in SGLang's place).

A measurement's run directory holds facts.yaml, resolved.yaml, argv.txt, env.json, server.log,
server.pid, server_info.json, server_info_diff.json, metrics.json and result.json.
`measure_capacity` launches once and runs a capacity search's steps against the server
(`servetune.bench.capacity`), `measure_soak` one long step; `search_server` runs the same search on
a server already started (a `RemoteServer` for one you started); a `RunawayGuard` stops a run that
misses its deadlines (`too_slow`).

`WATCHED_FIELDS` names the tuning fields whose `/server_info` value is recorded when servetune
left them to SGLang (the launcher itself knows no tuning fields).
"""

from __future__ import annotations

from servetune.runner._base import (
    BaseRunner,
    BaseServer,
    Failure,
    HttpServer,
    Measurement,
    OnProgress,
    RunTimings,
    ShouldStop,
)
from servetune.runner._capacity import (
    CapacitySearch,
    measure_capacity,
    measure_soak,
    search_server,
    soak_server,
    step_workload,
)
from servetune.runner._guard import RUNAWAY_FACTOR, RunawayGuard
from servetune.runner._remote import RemoteServer
from servetune.runner._sglang import MANAGED_STOP_GRACE_S, WATCHED_FIELDS, SglangRunner, SglangServer

__all__ = [
    "MANAGED_STOP_GRACE_S",
    "RUNAWAY_FACTOR",
    "WATCHED_FIELDS",
    "BaseRunner",
    "BaseServer",
    "CapacitySearch",
    "Failure",
    "HttpServer",
    "Measurement",
    "OnProgress",
    "RemoteServer",
    "RunTimings",
    "RunawayGuard",
    "ShouldStop",
    "SglangRunner",
    "SglangServer",
    "measure_capacity",
    "measure_soak",
    "search_server",
    "soak_server",
    "step_workload",
]
