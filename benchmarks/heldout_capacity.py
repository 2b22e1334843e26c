"""The capacity search against a held-out server: KV-limited batching with preemption (prints figures; not a test).

    python benchmarks/heldout_capacity.py [--lo 4] [--hi 20] [--step 0.25] [--requests 20000] [--seeds 3]
        [--starts 2,10,50] [--search-seeds 0,1,2]

**What this is.** A held-out check of `find_capacity`: its server was written without reading the project's own
simulated servers (`servetune.testing.simulated`, `tests/bench/queue_model.py`), against the search's interface only
(`StepPlan` -> `StepOutcome` through `bench.verdict.replay`). It stands for a continuous-batching LLM server whose
concurrency is bounded by KV-cache memory, not a slot count, and which preempts under memory pressure. It runs in
simulated time; it is not SGLang and its constants are not fitted to any GPU.

**The server** (`Server`, `simulate`), iteration by iteration:

- Requests arrive Poisson at the step's rate, each with a prompt of `prompt` tokens (uniform) and an output of
  `output` tokens (uniform), drawn from the step's sequence seed.
- The KV cache holds `kv_tokens` tokens. A running request holds its prompt plus the tokens it has generated.
- Admission is FCFS from the head of the queue: the head is admitted when its prompt plus its tokens so far fit in
  the free KV together with one more token for every running request (room for the next decode iteration, so a
  request just admitted is not preempted at once). One prefill batch takes at most `max_prefill_tokens` tokens
  (the first request always fits).
- Prefill has priority: while the head can be admitted, the server runs a prefill batch of P tokens in all, taking
  `c * P` seconds, during which nobody decodes. The prefill yields each admitted request's next token (its first
  token, for a new request: that is its TTFT).
- Otherwise the server runs one decode iteration: `a + b * (tokens resident in KV)` seconds (memory-bandwidth
  bound), one token for every running request. A request leaves when it has all its output tokens; its KV is freed.
- Before a decode iteration, while the running requests' next tokens do not fit, the newest running request is
  preempted: its KV is freed, it goes back to the head of the queue and on re-admission prefills again its prompt
  plus every token it had generated (recompute, as vLLM's default). Its TTFT is its first token's; its TPOT carries
  the wait and the recompute.

With the default constants the KV cache fits about 90 requests of mean size (700 prompt tokens and 80 generated):
near the capacity the batch is memory-bound (about 100 running) and preemption starts, so the limit is neither a
slot count nor compute alone; the TTFT SLO binds first (requests wait at the head of the queue for memory).

**The figures.**

1. The ground truth by brute force: every rate of a grid (--lo to --hi by --step), --seeds long runs of
   --requests requests each (arrivals of the first `WARMUP_S` seconds not judged); a rate holds when, over all its
   runs, the share of requests over each SLO bound is at most 1% and its queue does not grow (the mean TTFT of
   its runs' last thirds of arrivals is at most `GROWTH` times that of their middle thirds, or `GROWTH_FLOOR_S`).
   The truth is the highest rate below the lowest rate that does not hold (the highest holding rate is printed
   too, for a grid that is not monotone). Printed with it: the saturation throughput (completions per second
   under a queue that never empties), the most any rate could sustain, SLOs aside.
2. `find_capacity` from every --starts rate with every --search-seeds seed (default settings otherwise): the
   capacity, its bracket, `certified`, the steps and the simulated seconds they took (sum of `at_s`).
3. Whether every capacity is at most truth x (1 + resolution), and how far below the truth each is. The protocol
   is conservative by design: a p99 certified at 95% confidence needs at least 433 judged requests with none over.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from servetune.bench.capacity import Capacity, StepOutcome, StepPlan, find_capacity
from servetune.bench.schema import RequestRecord
from servetune.bench.slo import LatencySlo, parse_slos
from servetune.bench.verdict import replay

SLOS = ("p99_ttft_ms<=2000", "p99_tpot_ms<=50")
"""The SLOs of every figure."""
WARMUP_S = 5.0
"""Arrivals of a ground-truth run's first seconds are not judged (as a step's warm-up)."""
GROWTH = 1.5
"""A ground-truth rate's queue grows when its last thirds' mean TTFT exceeds this times its middle thirds'..."""
GROWTH_FLOOR_S = 0.25
"""... and this (s): below it a third's mean TTFT is prefill and noise (a burst doubles 60 ms), not a queue."""
SHARE = 0.01
"""The share of requests over a p99 bound a sustained rate allows."""


@dataclass(frozen=True)
class Server:
    """The held-out server's constants (module docstring): seconds and tokens."""

    a: float = 0.008
    """Fixed cost of one decode iteration (s)."""
    b: float = 2e-7
    """Decode cost per token resident in KV (s): memory-bandwidth bound."""
    c: float = 5e-5
    """Prefill cost per token (s)."""
    kv_tokens: int = 70_000
    """KV-cache capacity (tokens)."""
    max_prefill_tokens: int = 8192
    """Tokens of one prefill batch at most (its first request always fits)."""
    prompt: tuple[int, int] = (200, 1200)
    """Prompt length range (tokens, uniform, inclusive)."""
    output: tuple[int, int] = (64, 256)
    """Output length range (tokens, uniform, inclusive)."""


@dataclass
class Job:
    """One request through the server, with what it measured."""

    arrival: float
    prompt: int
    output: int
    generated: int = 0
    first: float = -1.0
    """Time of its first token (-1 before)."""
    last: float = 0.0
    """Time of its last token."""
    preempted: int = 0
    segments: list[tuple[float, int, int]] = field(default_factory=list)
    """Its residencies: (time of the token its prefill yielded, decode counter at admission, at leaving)."""

    def token_times(self, decode_times: Sequence[float]) -> list[float]:
        """Every token's time: per residency the prefill's token, then one per decode iteration it was in."""
        times: list[float] = []
        for at, c0, c1 in self.segments:
            times.append(at)
            times.extend(decode_times[c0:c1])
        return times


def workload(server: Server, rate: float, n: int, seed: int) -> list[Job]:
    """`n` Poisson arrivals at `rate` from `seed`, the first at 0, with random prompt and output lengths."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        jobs.append(Job(arrival=t, prompt=rng.randint(*server.prompt), output=rng.randint(*server.output)))
    return jobs


@dataclass
class Trace:
    """A simulated run: its jobs (measured) and the end time of every decode iteration."""

    jobs: list[Job]
    decode_times: list[float]
    prefill_batches: int = 0
    max_running: int = 0

    @property
    def preemptions(self) -> int:
        return sum(j.preempted for j in self.jobs)

    def records(self) -> list[RequestRecord]:
        """One `RequestRecord` per job, as a client would have measured it (times from the first arrival)."""
        out = []
        for j in self.jobs:
            times = j.token_times(self.decode_times)
            out.append(
                RequestRecord(
                    success=True, finished=True, scheduled=j.arrival, start=j.arrival, ttft=j.first - j.arrival,
                    latency=j.last - j.arrival, itl=[b - a for a, b in zip(times, times[1:])],
                    output_len=j.output, prompt_len=j.prompt,
                )
            )  # fmt: skip
        return out


def simulate(server: Server, jobs: list[Job]) -> Trace:
    """Run `jobs` (in arrival order) through the server to the last completion (module docstring).

    The running batch is kept by its decode counter: a job admitted at counter `c0` with `g0` tokens holds
    `prompt + g0 + (counter - c0)` tokens, so the KV in use is `base + running * counter` and an iteration costs
    O(1) plus the jobs that join or leave."""
    a, b, c, kv, budget = server.a, server.b, server.c, server.kv_tokens, server.max_prefill_tokens
    decode_times: list[float] = []
    trace = Trace(jobs=jobs, decode_times=decode_times)
    queue: deque[int] = deque()
    running: dict[int, int] = {}  # job index -> its residency's epoch; insertion order is admission order
    joined: dict[int, tuple[int, int]] = {}  # job index -> (decode counter, tokens generated) at admission
    ends: list[tuple[int, int, int]] = []  # heap of (decode counter it finishes at, job index, epoch)
    epoch = 0
    base = 0  # sum over running jobs of prompt + g0 - c0
    counter = 0
    t = 0.0
    nxt = 0
    n = len(jobs)
    done = 0
    while done < n:
        while nxt < n and jobs[nxt].arrival <= t:
            queue.append(nxt)
            nxt += 1
        if not running and not queue:
            t = jobs[nxt].arrival
            continue
        used = base + len(running) * counter
        # Prefill: admit FCFS while the head fits with room for the next decode iteration.
        batch: list[int] = []
        tokens = 0
        while queue:
            j = jobs[queue[0]]
            need = j.prompt + j.generated
            # its prefill, the token it yields, and the next decode iteration's token of every job running
            if used + tokens + len(batch) + need + 1 + len(running) + len(batch) + 1 > kv:
                break
            if batch and tokens + need > budget:
                break
            batch.append(queue.popleft())
            tokens += need
        if batch:
            t += c * tokens
            trace.prefill_batches += 1
            for i in batch:
                j = jobs[i]
                j.generated += 1
                if j.first < 0:
                    j.first = t
                j.last = t
                if j.generated >= j.output:
                    j.segments.append((t, counter, counter))
                    done += 1
                    continue
                epoch += 1
                running[i] = epoch
                joined[i] = (counter, j.generated)
                base += j.prompt + j.generated - counter
                heapq.heappush(ends, (counter + j.output - j.generated, i, epoch))
                j.segments.append((t, counter, -1))
            trace.max_running = max(trace.max_running, len(running))
            continue
        # Preempt the newest while the next decode iteration's tokens do not fit.
        while base + len(running) * (counter + 1) > kv:
            i, _ = running.popitem()
            j = jobs[i]
            c0, g0 = joined.pop(i)
            j.generated = g0 + counter - c0
            base -= j.prompt + g0 - c0
            at, _, _ = j.segments[-1]
            j.segments[-1] = (at, c0, counter)
            j.preempted += 1
            queue.appendleft(i)
        if not running:
            continue
        t += a + b * (base + len(running) * counter)
        counter += 1
        decode_times.append(t)
        while ends and ends[0][0] <= counter:
            _, i, ep = heapq.heappop(ends)
            if running.get(i) != ep:
                continue  # preempted since
            del running[i]
            c0, g0 = joined.pop(i)
            j = jobs[i]
            j.generated = j.output
            base -= j.prompt + g0 - c0
            at, _, _ = j.segments[-1]
            j.segments[-1] = (at, c0, counter)
            j.last = t
            done += 1
    return trace


# --- ground truth -------------------------------------------------------------------------------------------------


@dataclass
class GridRow:
    """One rate of the brute-force grid, over its runs."""

    rate: float
    over: dict[str, float]
    """Share of judged requests over each SLO's bound."""
    ttft_s: tuple[float, float]
    """Mean TTFT (s) of the middle and the last thirds of its runs' judged arrivals."""
    preempted: float
    """Preemptions per request."""
    max_running: int
    holds: bool


def _over(job: Job, slo: LatencySlo) -> bool:
    ttft = job.first - job.arrival
    if slo.metric == "ttft":
        return ttft * 1000.0 > slo.bound_ms
    if slo.metric == "tpot":
        return (job.last - job.first) / (job.output - 1) * 1000.0 > slo.bound_ms
    raise ValueError(f"the held-out check judges TTFT and TPOT only, not {slo}")


def grid_row(
    server: Server, rate: float, slos: Sequence[LatencySlo], *, requests: int, seeds: Sequence[int]
) -> GridRow:
    """Simulate long runs at `rate` (one per seed) and judge them as the ground truth does (module docstring)."""
    over = dict.fromkeys((str(s) for s in slos), 0)
    judged = 0
    middle = last = 0.0
    preempted = 0
    max_running = 0
    for seed in seeds:
        trace = simulate(server, workload(server, rate, requests, 1_000_003 * seed + round(rate * 1000)))
        jobs = [j for j in trace.jobs if j.arrival >= WARMUP_S]
        judged += len(jobs)
        for s in slos:
            over[str(s)] += sum(_over(j, s) for j in jobs)
        third = len(jobs) // 3
        middle += math.fsum(j.first - j.arrival for j in jobs[third : 2 * third]) / max(third, 1) / len(seeds)
        last += math.fsum(j.first - j.arrival for j in jobs[2 * third :]) / max(len(jobs) - 2 * third, 1) / len(seeds)
        preempted += trace.preemptions
        max_running = max(max_running, trace.max_running)
    shares = {k: v / max(judged, 1) for k, v in over.items()}
    holds = all(v <= SHARE for v in shares.values()) and last <= GROWTH * max(middle, GROWTH_FLOOR_S)
    return GridRow(rate, shares, (middle, last), preempted / (requests * len(seeds)), max_running, holds)


def saturation(server: Server, *, requests: int = 20_000, seed: int = 0) -> float:
    """Completions per second while a queue never empties (all arrivals at once), between the 20% and the 80%
    completion: the most any rate could sustain, SLOs aside."""
    jobs = workload(server, 1e6, requests, seed)
    ends = sorted(j.last for j in simulate(server, jobs).jobs)
    i, k = int(0.2 * requests), int(0.8 * requests)
    return (k - i) / (ends[k] - ends[i])


def rates_between(lo: float, hi: float, step: float) -> list[float]:
    """The grid lo, lo + step, ..., hi."""
    return [round(lo + k * step, 6) for k in range(int(round((hi - lo) / step)) + 1)]


def truth_of(rows: Sequence[GridRow]) -> tuple[float | None, float | None]:
    """(the highest rate below the lowest rate that does not hold, the highest rate that holds)."""
    failing = [r.rate for r in rows if not r.holds]
    first_fail = min(failing) if failing else math.inf
    below = [r.rate for r in rows if r.holds and r.rate < first_fail]
    held = [r.rate for r in rows if r.holds]
    return (max(below) if below else None), (max(held) if held else None)


# --- the search ---------------------------------------------------------------------------------------------------


def run_step_for(server: Server):
    """`run_step` for `find_capacity`: one step on a fresh server (its queue starts empty)."""

    def run_step(plan: StepPlan) -> StepOutcome:
        trace = simulate(server, workload(server, plan.rate, plan.requests, plan.seed))
        verdict, _ = replay(trace.records(), plan.judge)
        return StepOutcome(verdict=verdict, metrics=None)

    return run_step


def search(server: Server, start_rate: float, seed: int, slos: Sequence[LatencySlo]) -> Capacity:
    """`find_capacity` against the server from `start_rate` with sequence seed `seed`, default settings."""
    return find_capacity(run_step_for(server), slos, start_rate=start_rate, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lo", type=float, default=4.0, help="lowest rate of the truth grid (req/s)")
    parser.add_argument("--hi", type=float, default=20.0, help="highest rate of the truth grid (req/s)")
    parser.add_argument("--step", type=float, default=0.25, help="the truth grid's step (req/s)")
    parser.add_argument("--requests", type=int, default=20_000, help="requests of one truth run")
    parser.add_argument("--seeds", type=int, default=3, help="truth runs per rate")
    parser.add_argument("--starts", default="2,10,50", help="start rates of the searches (req/s)")
    parser.add_argument("--search-seeds", default="0,1,2", help="sequence seeds of the searches")
    args = parser.parse_args()
    server = Server()
    slos = parse_slos(SLOS)
    print(f"server: {server}")
    print(f"SLOs: {', '.join(SLOS)}")

    t0 = time.monotonic()
    rows = []
    print(f"\nground truth: {args.seeds} run(s) of {args.requests} requests per rate")
    print(
        f"{'rate':>7}  {'>ttft':>7}  {'>tpot':>7}  {'ttft mid/last s':>15}  {'preempt/req':>11}  {'max run':>7}  holds"
    )
    for rate in rates_between(args.lo, args.hi, args.step):
        row = grid_row(server, rate, slos, requests=args.requests, seeds=range(args.seeds))
        rows.append(row)
        ttft, tpot = (row.over[str(s)] for s in slos)
        print(
            f"{rate:7.2f}  {ttft:7.2%}  {tpot:7.2%}  {row.ttft_s[0]:7.3f}/{row.ttft_s[1]:7.3f}  {row.preempted:11.3f}  "
            f"{row.max_running:7d}  {'yes' if row.holds else 'no'}"
        )
    truth, highest = truth_of(rows)
    print(f"truth: {truth} req/s (highest holding rate {highest}); grid took {time.monotonic() - t0:.1f} s wall")
    print(f"saturation throughput: {saturation(server):.3f} req/s")
    if truth is None:
        print("no rate of the grid holds: lower --lo")
        return

    print("\nsearches (find_capacity, default settings)")
    print(f"{'start':>6} {'seed':>4}  {'capacity':>8}  {'missed':>8}  certified  steps  sim s   wall s  vs truth")
    results = []
    for start in (float(s) for s in args.starts.split(",")):
        for seed in (int(s) for s in args.search_seeds.split(",")):
            t = time.monotonic()
            cap = search(server, start, seed, slos)
            wall = time.monotonic() - t
            results.append((start, seed, cap))
            rate, missed = cap.bracket
            sim_s = math.fsum(s.at_s for s in cap.steps)
            rel = f"{rate / truth - 1.0:+.1%}" if rate is not None else "-"
            print(
                f"{start:6g} {seed:4d}  {rate or 0:8.3f}  {missed or 0:8.3f}  {cap.certified!s:>9}  "
                f"{len(cap.steps):5d}  {sim_s:6.0f}  {wall:6.1f}  {rel}" + (f"  ({cap.note})" if cap.note else "")
            )
    caps = [cap for _, _, cap in results]
    over = [
        (s, d, c.request_rate) for s, d, c in results if c.request_rate and c.request_rate > truth * (1 + c.resolution)
    ]
    print(f"\nevery capacity <= truth x (1 + resolution) = {truth * (1 + caps[0].resolution):.3f}: {not over}")
    for start, seed, rate in over:
        print(f"  OVERSTATED: start {start:g}, seed {seed}: {rate:.3f} req/s")
    below = [c.request_rate / truth - 1.0 for c in caps if c.request_rate is not None]
    if below:
        print(
            f"capacity vs truth: min {min(below):+.1%}, mean {math.fsum(below) / len(below):+.1%}, "
            f"max {max(below):+.1%}; certified {sum(c.certified for c in caps)}/{len(caps)}"
        )


if __name__ == "__main__":
    main()
