"""The capacity search against a brute-force sweep, on one launched stand-in server (prints figures; not a test).

    python benchmarks/capacity_search.py [--slo p99_ttft_ms<=400] [--set max_running_requests=4]
        [--lo 1] [--hi 16] [--points 16] [--start-rate 8] [--resolution 0.1] [--step-seconds 2]
        [--step-requests 32] [--time-scale 0.25]

One stand-in server (`StandinRunner.start`: a real process and HTTP), then on it:
- the sweep: every rate of a fine grid from --lo to --hi (--points + 1 rates), each a step judged as
  the search judges one (`bench.capacity._judge`: every SLO, keep-up, failures); its capacity is the
  highest met rate;
- the search: `find_capacity` (bracket, bisect to --resolution, re-run near a bound, certain-miss stop).
Printed: both capacities, whether they agree within the resolution (the sweep's capacity inside the
search's bracket, widened by one grid step), and the cost of each (bench seconds and steps).
Goal: the search costs at most a quarter of the sweep's time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slo", action="append", help="latency SLO (repeatable; default p99_ttft_ms<=400)")
    parser.add_argument("--set", dest="sets", action="append", help="pin FIELD=VALUE (default max_running_requests=4)")
    parser.add_argument("--workload", default="text-chat")
    parser.add_argument("--lo", type=float, default=1.0)
    parser.add_argument("--hi", type=float, default=16.0)
    parser.add_argument("--points", type=int, default=30)
    parser.add_argument("--start-rate", type=float, default=8.0)
    parser.add_argument("--resolution", type=float, default=0.1)
    parser.add_argument("--step-seconds", type=float, default=2.0)
    parser.add_argument("--step-requests", type=int, default=32)
    parser.add_argument("--time-scale", type=float, default=0.25, help="the stand-in's SERVETUNE_STANDIN_TIME_SCALE")
    args = parser.parse_args()
    os.environ["SERVETUNE_STANDIN_TIME_SCALE"] = str(args.time_scale)

    from servetune.bench import load_workload, run_benchmark
    from servetune.bench.capacity import _judge, find_capacity, step_requests
    from servetune.bench.slo import parse_slos
    from servetune.context import Context
    from servetune.runner import CapacitySearch, step_workload
    from servetune.testing import StandinRunner

    slos = parse_slos(args.slo or ["p99_ttft_ms<=400"])
    workload = load_workload(args.workload)
    ctx = Context.build("qwen3-8b", gpu="h200", workload=workload, sets=args.sets or ["max_running_requests=4"])
    search = CapacitySearch(
        start_rate=args.start_rate,
        resolution=args.resolution,
        step_s=args.step_seconds,
        min_requests=args.step_requests,
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        StandinRunner(client="builtin").start(ctx.resolve(), run_dir=Path(tmp) / "server") as server,
    ):

        def step(rate: float, requests: int, should_stop):
            wl = step_workload(workload, rate, requests, search.warmup_requests)
            return run_benchmark(
                server.url, wl, requests=requests, client="builtin", slos=slos, should_stop=should_stop
            )

        t0 = time.monotonic()
        swept, sweep_steps = None, 0
        grid = [args.lo + (args.hi - args.lo) * i / args.points for i in range(args.points + 1)]
        for rate in grid:
            requests = step_requests(rate, search.step_s, search.min_requests)
            met, _, _ = _judge(rate, step(rate, requests, lambda *_: False), 0.9, 0.01)
            sweep_steps += 1
            print(f"  sweep {rate:7.3f} req/s  {'met' if met else 'missed'}", file=sys.stderr)
            if met:
                swept = rate
        sweep_s = time.monotonic() - t0
        t1 = time.monotonic()
        cap = find_capacity(step, slos, **search.settings())
        search_s = time.monotonic() - t1
    grid_step = (args.hi - args.lo) / args.points
    lo, hi = cap.request_rate or 0.0, cap.lowest_missed or float("inf")
    agree = swept is not None and lo - grid_step <= swept <= hi + grid_step
    print(f"SLOs {', '.join(str(s) for s in slos)}; pins {', '.join(args.sets or ['max_running_requests=4'])}")
    print(f"sweep:  capacity {swept} req/s  ({sweep_steps} steps, {sweep_s:.1f} s; grid {grid_step:.3g} req/s)")
    print(
        f"search: capacity {cap.request_rate and round(cap.request_rate, 3)} req/s, bracket [{lo:.3f}, {hi:.3f}] "
        f"({len(cap.steps)} steps, {search_s:.1f} s; resolution {args.resolution:.0%})"
    )
    print(f"agree within the resolution (one grid step of slack): {'yes' if agree else 'NO'}")
    print(f"cost: the search took {search_s / sweep_s:.0%} of the sweep's time (goal: at most 25%)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
