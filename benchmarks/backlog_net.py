"""The backlog test as it is against the same test net of the arrivals, on simulated servers of known ceiling
(prints figures; not a test).

    python benchmarks/backlog_net.py [--seeds 40] [--loads 0.85 0.95 1.02 1.05 1.1]

`benchmarks/replay_verdicts.py --net-arrivals` reads recorded steps with `NetArrivalsJudge`: the backlog test on
requests in flight less those the same arrivals would keep in flight at a constant latency. On the archive it opens
two misses where nothing was over (docs/h200-results.md section 36), but it also shows the backlog flat sooner. What
that costs is measured here, where the truth is known: each server is offered Poisson arrivals at `load` times its
ceiling for one step of up to 120 s, judged by today's `StepJudge` and by `NetArrivalsJudge` on the same records
(`servetune.testing.simulated`; seeds 0..N-1). A server under its ceiling should be met (a miss there is a false
miss); one over it by the search's resolution (5%) or more should not be (a met there is a false met).

Servers (`servetune.testing.simulated`):
- `fifo`: one request at a time, 0.1 s each (ceiling 10 req/s); SLO p99 TTFT <= 2000 ms, so its queue decides.
- `batch`: continuous batching, unbounded slots, no prefill time, a decode step of 4 ms + 2 ms per running request,
  32 tokens out (ceiling 16.1 req/s as the batch grows: 31 decode steps a request): past it the batch grows and
  every latency with it; SLO p99 TTFT <= 2000 ms and p99 TPOT <= 500 ms, loose enough that the backlog test, not
  the TPOT count, meets the growth.
- `batch48`: the same with 48 slots (a running limit; ceiling 15.5 req/s): past it the queue waits before the
  batch, and the TTFT grows.
Printed per server and load: the steps met / missed / undecided under each judge, and how many each judge decided
by its backlog test ("falls behind"). With `--seeds 200 --loads 0.9 1.05 1.1 --servers batch48 fifo` (session 39):
`batch48` at 1.1x met 12 of 200 today, 10 net (1.05x: 40 and 34; 0.9x: missed on the backlog 18 and 19), `fifo`
at 1.1x 2 and 2 (1.05x: 18 and 18): netting the arrivals is no looser here.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from replay_verdicts import NetArrivalsJudge  # noqa: E402

from servetune.bench.slo import parse_slos  # noqa: E402
from servetune.bench.verdict import StepJudge, StepRules, replay  # noqa: E402
from servetune.testing.simulated import BatchingServer, FifoServer, SimulatedServer, arrivals  # noqa: E402

STEP_S = 120.0


def _batch(slots: int) -> tuple[SimulatedServer, float, list[str]]:
    """A batching server without prefill time, its ceiling (the most a batch of `slots` completes per second: each
    request takes `output_len - 1` decode steps after its first token) and its SLOs."""
    server = BatchingServer(slots=slots, prefill_s=0.0, base_step_s=0.004, per_running_s=0.002, output_len=32)
    steps = server.output_len - 1
    ceiling = min(
        1.0 / (server.per_running_s * steps), slots / (steps * (server.base_step_s + server.per_running_s * slots))
    )
    return server, ceiling, ["p99_ttft_ms<=2000", "p99_tpot_ms<=500"]


SERVERS: dict[str, tuple[SimulatedServer, float, list[str]]] = {
    "fifo": (FifoServer(service_s=0.1), 10.0, ["p99_ttft_ms<=2000"]),
    "batch": _batch(10_000),
    "batch48": _batch(48),
}


def judge_step(server: SimulatedServer, rate: float, slos: list[str], seed: int) -> dict[str, tuple[str, bool]]:
    """One step's records at `rate`, judged by both judges: judge name -> (state, decided by the backlog)."""
    records = server.serve(arrivals(rate, int(rate * STEP_S) + 50, seed), seed)
    out = {}
    for name, judge in (("today", StepJudge), ("net", NetArrivalsJudge)):
        verdict, _ = replay(records, judge(parse_slos(slos), StepRules(), rate=rate, max_s=STEP_S))
        out[name] = (verdict.state, "falls behind" in verdict.why)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.85, 0.95, 1.02, 1.05, 1.1])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    args = parser.parse_args()
    print("server | load | today: met / missed / undecided (by backlog) | net: met / missed / undecided (by backlog)")
    for name in args.servers:
        server, ceiling, slos = SERVERS[name]
        for load in args.loads:
            counts = {j: collections.Counter() for j in ("today", "net")}
            for seed in range(args.seeds):
                for j, (state, backlog) in judge_step(server, load * ceiling, slos, seed).items():
                    counts[j][state] += 1
                    counts[j]["backlog"] += backlog
            cells = [f"{c['met']} / {c['missed']} / {c['undecided']} ({c['backlog']})" for c in counts.values()]
            print(f"{name} | {load:g} | {cells[0]} | {cells[1]}   (of {args.seeds})", flush=True)


if __name__ == "__main__":
    main()
