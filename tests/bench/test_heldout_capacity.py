"""A held-out check of the capacity search: `benchmarks/heldout_capacity.py`, reduced: never above the
server's throughput ceiling by more than the resolution, never far below its truth, and in the median
within the resolution of it.

Its server stands for a continuous-batching LLM server bounded by KV-cache memory, with preemption (recompute), in
simulated time; it is not SGLang. It was written without reading the project's own simulated servers, against the
search's interface only, so the search was not shaped to it. The ground truth is brute force: long runs on a grid of
rates around the capacity, the highest rate whose share of requests over each SLO bound is at most 1% and whose queue
does not grow.
"""

from __future__ import annotations

import statistics

from benchmarks.heldout_capacity import SLOS, Server, grid_row, rates_between, saturation, search, truth_of
from servetune.bench.slo import parse_slos

GRID = (11.0, 13.0, 0.25)
"""The truth grid (lo, hi, step; req/s) around the capacity (about 12 req/s with the default constants)."""
REQUESTS = 8000
"""Requests of one truth run (the script's default is 20000)."""
SEEDS = 2
"""Truth runs per rate."""


def test_capacity_search_on_a_held_out_kv_limited_server():
    server, slos = Server(), parse_slos(SLOS)
    lo, hi, step = GRID
    rows = [grid_row(server, rate, slos, requests=REQUESTS, seeds=range(SEEDS)) for rate in rates_between(lo, hi, step)]
    truth, _ = truth_of(rows)
    assert truth is not None and lo < truth < hi, f"the truth grid does not bracket the capacity: {truth}"
    ceiling = saturation(server)
    wrong, rates = [], []
    for start in (2.0, 10.0, 50.0):
        for seed in (0, 1):
            cap = search(server, start, seed, slos)
            rate = cap.request_rate
            steps = [(round(s.rate, 3), s.state) for s in cap.steps]
            if rate is None or not cap.certified:
                wrong.append(
                    f"start {start} seed {seed}: capacity {rate}, certified {cap.certified} ({cap.note}); {steps}"
                )
                continue
            rates.append(rate)
            if rate > ceiling * (1 + cap.resolution):
                wrong.append(f"start {start} seed {seed}: {rate:.3f} req/s is over the ceiling {ceiling:.3f}; {steps}")
            elif rate < truth * 0.6:
                wrong.append(f"start {start} seed {seed}: {rate:.3f} req/s is far below the truth {truth}; {steps}")
    assert not wrong, "\n".join(wrong)
    # single searches may overstate the share-based truth (benchmarks/heldout_capacity.py measured one of
    # nine 7.6% over it: a p99 step can be met between two bursts of slow requests); their median may not
    assert statistics.median(rates) <= truth * 1.05 + step, (rates, truth)
