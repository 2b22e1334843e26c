"""Orchestration overhead per measurement, against the stand-in server (prints figures; not a test).

    python benchmarks/orchestration_overhead.py [--runs 10] [--start-delay 0.5] [--workload text-chat]
        [--requests 64] [--warmup N] [--model qwen3-8b] [--gpu h200] [--set cuda_graph_max_bs_decode=64 ...]

Each run is `StandinRunner.measure` (`servetune.runner`: the real runner with the stand-in's
command) of the rules' launch for `--model` on `--gpu` with the `--set` pins, resolved once
before the runs. The stand-in's speed depends on its flags; the default pin is the one the
figures before the runner (`managed_run`, argv `--cuda-graph-max-bs-decode 64`) were taken with.
overhead = wall time of `measure` - the stand-in's own start-up delay - the benchmark's measured
duration (`Metrics.duration_s`) - the workload's warm-up traffic (`Metrics.warmup_s`, requests the
run sends on purpose, shown on its own line). It is what servetune adds around the traffic:
spawning the process, polling readiness, reading /server_info and checking identity, preparing
the client, stopping the process group and writing the run directory (facts.yaml, resolved.yaml, ...).
Goal: under 1 s per run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--start-delay", type=float, default=0.5, help="stand-in start-up delay (subtracted)")
    parser.add_argument("--workload", default="text-chat")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=None, help="override the workload's warmup requests")
    parser.add_argument("--model", default="qwen3-8b", help="the model whose rules' launch is measured")
    parser.add_argument("--gpu", default="h200", help="the named GPU profile it is resolved for")
    parser.add_argument("--set", dest="sets", action="append", help="pin FIELD=VALUE (repeatable)")
    args = parser.parse_args()

    from servetune.bench import load_workload
    from servetune.context import Context
    from servetune.launch import LaunchOptions
    from servetune.testing import StandinRunner

    workload = load_workload(args.workload)
    if args.warmup is not None:
        workload = workload.model_copy(update={"warmup_requests": args.warmup})
    sets = args.sets if args.sets is not None else ["cuda_graph_max_bs_decode=64"]
    resolution = Context.build(args.model, gpu=args.gpu, workload=workload, sets=sets).resolve()
    options = LaunchOptions(
        stop_grace_s=5,
        wait_gpu_release=True,
        extra_env={"SERVETUNE_STANDIN_START_DELAY_S": str(args.start_delay)},
    )
    runner = StandinRunner(options, client="builtin")
    rows = []
    with tempfile.TemporaryDirectory(prefix="servetune-overhead-") as tmp:
        for i in range(args.runs):
            t0 = time.perf_counter()
            result = runner.measure(resolution, workload, run_dir=Path(tmp) / f"run{i}", requests=args.requests)
            wall = time.perf_counter() - t0
            if not result.ok:
                print(f"run {i} failed: {result.failure.cls}: {result.failure.message}", file=sys.stderr)
                return 1
            measured = result.metrics.duration_s
            warm = result.metrics.warmup_s or 0.0
            t = result.timings
            rows.append(
                {
                    "wall": wall,
                    "measured": measured,
                    "warmup": warm,
                    "overhead": wall - args.start_delay - measured - warm,
                    "startup": t.startup_s - args.start_delay,
                    "bench_extra": t.bench_s - measured - warm,
                    "stop": t.stop_s,
                    "rest": wall - t.startup_s - t.bench_s - t.stop_s,
                }
            )

    def summary(key: str) -> str:
        values = [r[key] for r in rows]
        return f"median {statistics.median(values):.3f} s  max {max(values):.3f} s"

    print(
        f"{args.runs} measurements of '{workload.name}' ({args.requests} requests, warmup {workload.warmup_requests}, "
        f"concurrency {workload.max_concurrency}) against the stand-in (start-up delay {args.start_delay} s)"
    )
    print(f"  wall per run                      {summary('wall')}")
    print(f"  measured benchmark (duration_s)   {summary('measured')}")
    print(
        f"  warm-up traffic (the workload's)  {summary('warmup')}   (requests the run sends on purpose; not overhead)"
    )
    print(f"  orchestration overhead            {summary('overhead')}   (goal < 1 s)")
    print("  of which:")
    print(
        f"    start-up beyond the delay       {summary('startup')}   "
        "(spawn, import, readiness poll, /server_info, identity)"
    )
    print(
        f"    bench call beyond measured      {summary('bench_extra')}   (client preparation, token calibration, drain)"
    )
    print(f"    stop                            {summary('stop')}   (SIGTERM, group gone, port released)")
    print(f"    run directory and bookkeeping   {summary('rest')}")
    worst = max(r["overhead"] for r in rows)
    print("PASS" if statistics.median(r["overhead"] for r in rows) < 1.0 else "FAIL", f"(worst run {worst:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
