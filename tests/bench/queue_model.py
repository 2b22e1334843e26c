"""A deterministic model of a batching server under Poisson load, for capacity tests: it stands in
for a server's latency-versus-rate curve (no process, no HTTP), so a capacity search can be
checked against a brute-force sweep of the same curve.

`slots` requests run at once (FCFS queue before them); a request's TTFT is its queueing wait plus
`prefill_s`, and it decodes `output_len` tokens at `tpot_s(running)` each, where the step time
grows with the number running (as a batched decode does). Arrivals for rate r are one fixed
sequence of exponential gaps scaled by 1/r, so the curve is monotone in the rate.
"""

from __future__ import annotations

import heapq
import random

from servetune.bench.metrics import Metrics, RequestRecord, compute_metrics


def simulate(
    rate: float,
    requests: int,
    *,
    slots: int = 8,
    prefill_s: float = 0.02,
    output_len: int = 32,
    base_tpot_s: float = 0.004,
    per_running_s: float = 0.0005,
    seed: int = 7,
) -> list[RequestRecord]:
    """Per-request records of `requests` Poisson arrivals at `rate` (times from the first arrival)."""
    rng = random.Random(seed)
    gaps = [rng.expovariate(1.0) for _ in range(requests)]
    t = 0.0
    arrivals = []
    for g in gaps:
        arrivals.append(t)
        t += g / rate
    # a slot's step time depends on the load when the request starts (a coarse batching model)
    free_at = [0.0] * slots
    heapq.heapify(free_at)
    records = []
    for start in arrivals:
        slot_free = heapq.heappop(free_at)
        begin = max(start, slot_free)
        running = sum(1 for f in free_at if f > begin) + 1
        tpot = base_tpot_s + per_running_s * running
        ttft = begin - start + prefill_s
        latency = ttft + tpot * (output_len - 1)
        heapq.heappush(free_at, start + latency)
        records.append(
            RequestRecord(
                success=True,
                start=start,
                ttft=ttft,
                latency=latency,
                itl=[tpot] * (output_len - 1),
                output_len=output_len,
                prompt_len=64,
            )
        )
    return records


def model_step(slos, **model):
    """A `find_capacity` step function over `simulate` (it ignores `should_stop`)."""

    def run(rate: float, requests: int, should_stop) -> Metrics:
        records = simulate(rate, requests, **model)
        duration = max(r.end for r in records)
        return compute_metrics(records, duration, requests=requests, slos=slos, request_rate=rate, max_concurrency=None)

    return run
