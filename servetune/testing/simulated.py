"""Servers in simulated time, for the capacity protocol's tests and benchmarks: no process, no HTTP.

**What they stand for.** A server's latency under Poisson load: a request stream goes in
(`arrivals`), every request's record comes out (`RequestRecord`: arrival, TTFT, latency, gaps), and
the capacity search judges those records exactly as it judges a real client's (`simulated_step`
replays them through the step's judge at the client's look cadence). They let a test put a known
truth under the search (a FIFO queue that serves 5 req/s, a batch whose throughput tops out, a
server with a known share of slow requests, a warm-up stall) and check what the search reports.

**What they do not stand for.** HTTP, the client's own CPU, SGLang. The stand-in server process
(`servetune.testing.standin`) covers the process and protocol side.

    run_step = simulated_step(BatchingServer(slots=8))
    cap = find_capacity(run_step, slos, start_rate=8.0)
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servetune.bench.capacity import RunStep, StepOutcome, StepPlan
from servetune.bench.metrics import RequestRecord, compute_metrics
from servetune.bench.slo import LatencySlo
from servetune.bench.verdict import replay

__all__ = ["BatchingServer", "CoinServer", "FifoServer", "SimulatedServer", "arrivals", "simulated_step"]


def arrivals(rate: float, count: int, seed: int) -> list[float]:
    """`count` Poisson arrival times at `rate` from `seed`: one sequence of exponential gaps scaled by
    1/rate, so two rates with one seed are common random numbers (as the builtin client draws them)."""
    rng = random.Random(seed + 1)
    out, t = [], 0.0
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out


class SimulatedServer:
    """A server in simulated time: `serve(arrivals, seed)` → one finished record per arrival."""

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        raise NotImplementedError


def _record(arrival: float, first: float, end: float, gaps: list[float], output_len: int) -> RequestRecord:
    return RequestRecord(
        success=True, start=arrival, scheduled=arrival, ttft=first - arrival, latency=end - arrival, itl=gaps,
        output_len=output_len, prompt_len=64, finished=True,
    )  # fmt: skip


@dataclass
class BatchingServer(SimulatedServer):
    """Continuous batching: at most `slots` requests decode at once (FCFS queue before them); each
    admission prefills for `prefill_s` while decode waits; each decode step gives every running request
    one token and lasts `base_step_s + per_running_s * running`, so throughput tops out at
    `1 / (per_running_s * output_len)` req/s as the batch grows. `stall` = (from, to): nothing runs then
    (a warm-up stall, seconds from the first arrival)."""

    slots: int = 8
    prefill_s: float = 0.02
    base_step_s: float = 0.004
    per_running_s: float = 0.0005
    output_len: int = 32
    stall: tuple[float, float] | None = None

    @property
    def ceiling(self) -> float:
        """The most requests per second the batch can complete (unbounded slots)."""
        return 1.0 / (self.per_running_s * self.output_len)

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        out: list[RequestRecord | None] = [None] * len(times)
        waiting: deque[int] = deque()
        running: list[list] = []  # [index, tokens left, first token time, last token time, gaps]
        t, i, n = 0.0, 0, len(times)
        while i < n or waiting or running:
            if self.stall and self.stall[0] <= t < self.stall[1]:
                t = self.stall[1]
            while i < n and times[i] <= t:
                waiting.append(i)
                i += 1
            if not running and not waiting:
                t = times[i]
                continue
            while waiting and len(running) < self.slots:
                k = waiting.popleft()
                t += self.prefill_s
                running.append([k, self.output_len - 1, t, t, []])
            step = self.base_step_s + self.per_running_s * len(running)
            t += step
            still = []
            for job in running:
                if job[1] <= 0:
                    out[job[0]] = _record(times[job[0]], job[2], job[3], job[4], self.output_len)
                    continue
                job[4].append(t - job[3])
                job[3] = t
                job[1] -= 1
                if job[1] <= 0:
                    out[job[0]] = _record(times[job[0]], job[2], t, job[4], self.output_len)
                else:
                    still.append(job)
            running = still
        return [r for r in out if r is not None]


@dataclass
class FifoServer(SimulatedServer):
    """One request at a time, first come first served, `service_s` each, its `output_len` tokens
    evenly spaced: it serves 1 / service_s req/s at a constant TPOT, whatever queues before it."""

    service_s: float = 0.2
    output_len: int = 16

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        free, out = 0.0, []
        gap = self.service_s / self.output_len
        for a in times:
            begin = max(a, free)
            free = begin + self.service_s
            out.append(_record(a, begin + gap, free, [gap] * (self.output_len - 1), self.output_len))
        return out


@dataclass
class CoinServer(SimulatedServer):
    """No queue; each request's TTFT is `slow_s` with probability `share` (independently), else
    `fast_s`: a server with a known share of requests over a TTFT bound between the two."""

    share: float = 0.01
    fast_s: float = 0.05
    slow_s: float = 0.5
    decode_s: float = 0.1
    output_len: int = 8

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        rng = random.Random(seed * 7919 + 3)
        gap = self.decode_s / (self.output_len - 1)
        out = []
        for a in times:
            ttft = self.slow_s if rng.random() < self.share else self.fast_s
            out.append(_record(a, a + ttft, a + ttft + self.decode_s, [gap] * (self.output_len - 1), self.output_len))
        return out


def simulated_step(server: SimulatedServer | Callable[[StepPlan], SimulatedServer], *, look_s: float = 0.5) -> RunStep:
    """A `find_capacity` step function over a simulated server (or one per plan, e.g. to vary it by
    step): the plan's arrivals, served, replayed through the plan's judge."""

    def run(plan: StepPlan) -> StepOutcome:
        srv = server(plan) if callable(server) and not isinstance(server, SimulatedServer) else server
        records = srv.serve(arrivals(plan.rate, plan.requests, plan.seed), plan.seed)
        verdict, seen = replay(records, plan.judge, look_s=look_s)
        return StepOutcome(verdict=verdict, metrics=measure(seen, plan.judge.slos, plan.rate))

    return run


def measure(records: Sequence[RequestRecord], slos: Sequence[LatencySlo], rate: float):
    """The metrics of what finished among `records` (as the builtin client reports a stopped step)."""
    done = [r for r in records if r.finished]
    if not done:
        return None
    duration = max(r.end for r in done) - min(r.start for r in records)
    return compute_metrics(done, duration, requests=len(records), slos=slos, request_rate=rate, max_concurrency=None)
