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
    cap = soak_down(simulated_soak(BatchingServer(slots=8), slos, seconds=300), cap, tries=3)
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servetune.bench.capacity import RunSoak, RunStep, SoakResult, StepOutcome, StepPlan, soak_plan, soak_seed
from servetune.bench.metrics import compute_metrics
from servetune.bench.schema import RequestRecord
from servetune.bench.servermodel import profile_step
from servetune.bench.slo import LatencySlo
from servetune.bench.verdict import StepRules, replay

__all__ = [
    "BatchingServer",
    "CoinServer",
    "FifoServer",
    "SimulatedRun",
    "SimulatedServer",
    "StandinServer",
    "arrivals",
    "simulated_soak",
    "simulated_step",
    "standin_runner",
]


def arrivals(rate: float, count: int, seed: int) -> list[float]:
    """`count` Poisson arrival times at `rate` from `seed`: one sequence of exponential gaps scaled by
    1/rate, so two rates with one seed are common random numbers (as the builtin client draws them)."""
    rng = random.Random(seed + 1)
    out, t = [], 0.0
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out


@dataclass
class SimulatedRun:
    """One simulated step: every arrival's record and the scheduler's log records (`telemetry`,
    as `servetune.launch.parse_scheduler_line` gives them, `t` in seconds from the first arrival)."""

    records: list[RequestRecord]
    telemetry: list[dict]
    failed_at: float | None = None
    """When the server died (out of memory under load), else None."""


class SimulatedServer:
    """A server in simulated time: `serve(arrivals, seed)` → one finished record per arrival."""

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        raise NotImplementedError

    def run(self, times: Sequence[float], seed: int) -> SimulatedRun:
        """`serve`, with the scheduler's log records where the server keeps them (none here)."""
        return SimulatedRun(self.serve(times, seed), [])


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
        out = srv.run(arrivals(plan.rate, plan.requests, plan.seed), plan.seed)
        verdict, seen = replay(out.records, plan.judge, look_s=look_s)
        telemetry = [t for t in out.telemetry if t["t"] <= verdict.at_s]
        graph = srv.resolved().get("cuda_graph_max_bs_decode") if isinstance(srv, StandinServer) else None
        profile = profile_step(seen, plan.rate, warmup_s=plan.judge.rules.warmup_s, telemetry=telemetry, graph_bs=graph)
        return StepOutcome(verdict=verdict, metrics=measure(seen, plan.judge.slos, plan.rate), profile=profile)

    return run


def simulated_soak(
    server: SimulatedServer,
    slos: Sequence[LatencySlo],
    *,
    seconds: float,
    rules: StepRules | None = None,
    seed: int = 0,
) -> RunSoak:
    """A `soak_down` soak function over a simulated server: `seconds` of arrivals at the rate (soak
    `index` draws `soak_seed(seed, index)`), judged as `Steps.soak` judges a real one (met only at its end)."""
    rules = rules or StepRules()

    def run(rate: float, index: int) -> SoakResult:
        plan = soak_plan(slos, rules, rate=rate, seconds=seconds, seed=soak_seed(seed, index), index=index + 1)
        out = simulated_step(server)(plan)
        return SoakResult.of(out, rate=rate, bench_s=out.verdict.at_s, index=plan.index, seconds=plan.max_s,
                             seed=plan.seed)  # fmt: skip

    return run


def measure(records: Sequence[RequestRecord], slos: Sequence[LatencySlo], rate: float):
    """The metrics of what finished among `records` (as the builtin client reports a stopped step)."""
    done = [r for r in records if r.finished]
    if not done:
        return None
    duration = max(r.end for r in done) - min(r.start for r in records)
    return compute_metrics(done, duration, requests=len(records), slos=slos, request_rate=rate, max_concurrency=None)


@dataclass
class StandinServer(SimulatedServer):
    """The stand-in server (`servetune.testing.standin`) in simulated time: the same admission (FCFS,
    running limit, KV pool), prefill/decode interval, serialized image lane, prefill and decode rules
    (`standin._rules`, its flags resolved by `standin._config`), served to Poisson arrivals. Times are
    real seconds (the stand-in's `TIME_SCALE`); `run` also gives the scheduler lines the stand-in logs
    (a decode line once `log_s` has passed when a chunk is emitted, a prefill line per request).

    **What it stands for**: the stand-in process's landscape without its HTTP, threads and sleeps, so
    a capacity study of ten launches runs in seconds; the process itself is tested elsewhere against
    the same rules. `noise` (relative sigma of log-normal noise on every service time) and
    `launch_seed` (a launch's own factor, as the stand-in's `SEED`) make launches differ.

        server = StandinServer(argv=["--max-running-requests", "48"], input_tokens=128, output_tokens=128, images=1)
        run = server.run(arrivals(12.0, 600, seed=1), seed=1)
    """

    argv: Sequence[str] = ()
    input_tokens: int = 128
    output_tokens: int = 128
    images: int = 0
    image_kb: float = 120.0
    image_pool: int = 0
    """Requests draw their image from a pool of this many (request i: image i mod pool), so the media
    cache (cpu transport) hits; 0: every image is unique."""
    time_scale: float = 0.25
    max_chunks: int = 16
    log_s: float = 0.5
    noise: float = 0.0
    launch_seed: int = 0

    def resolved(self) -> dict:
        """The stand-in's resolution of `argv` (its `/server_info` fields)."""
        from servetune.testing.standin._config import build_parser, resolve

        args = list(self.argv)
        if "--model-path" not in args:
            args = ["--model-path", "standin-model", *args]
        ns, _ = build_parser().parse_known_args(args)
        return resolve(ns)

    def serve(self, times: Sequence[float], seed: int) -> list[RequestRecord]:
        return self.run(times, seed).records

    def run(self, times: Sequence[float], seed: int) -> SimulatedRun:
        """Serve arrivals at `times` (s); the records, the scheduler lines, and when it died (if it did)."""
        return _StandinSim(self, self.resolved(), seed).serve(times)


class _StandinSim:
    """The event loop of one `StandinServer.run` (simulated ms inside, real seconds out)."""

    def __init__(self, spec: StandinServer, cfg: dict, seed: int) -> None:
        import heapq

        from servetune.testing.standin import _rules
        from servetune.testing.standin._config import OOM_AT_START_FRACTION, kv_capacity

        self.spec, self.cfg, self.rules, self.heapq = spec, cfg, _rules, heapq
        self.capacity = kv_capacity(cfg)
        self.max_running = int(cfg["max_running_requests"])
        self.graph_bs = int(cfg["cuda_graph_max_bs_decode"])
        self.chunk = _rules.effective_chunk(cfg)
        self.interval = int(cfg["prefill_decode_interval"] or 0)
        self.slowdown = _rules.slowdown(cfg)
        self.oom_under_load = _rules.ooms_under_load(cfg)
        self.dead_at_start = float(cfg["mem_fraction_static"]) > OOM_AT_START_FRACTION
        self.per_chunk = _rules.tokens_per_chunk(cfg["stream_interval"], spec.output_tokens, spec.max_chunks)
        self.ms = spec.time_scale / 1000.0  # real seconds per simulated ms
        launch = random.Random(spec.launch_seed)
        self.run_factor = launch.lognormvariate(0.0, spec.noise / 2) if spec.noise > 0 else 1.0
        self.rng = random.Random(seed * 7919 + 11)
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.queue: deque[int] = deque()
        self.waiting_prefill: deque[int] = deque()
        self.running = self.decoding = self.prefilling = self.kv_used = self.steps = 0
        self.last_prefill_step: int | None = None
        self.lane_free = 0.0
        self.media: OrderedDict[int, None] = OrderedDict()
        self.gen_tokens, self.gen_since = 0, 0.0
        self.telemetry: list[dict] = []
        self.failed_at: float | None = None

    def factor(self) -> float:
        noise = self.spec.noise
        return self.run_factor * (self.rng.lognormvariate(0.0, noise) if noise > 0 else 1.0)

    def at(self, t: float, fn, *args) -> None:
        self.seq += 1
        self.heapq.heappush(self.events, (t, self.seq, fn, args))

    def serve(self, times: Sequence[float]) -> SimulatedRun:
        spec = self.spec
        tokens = spec.input_tokens + 1000 * spec.images  # `_engine.IMAGE_TOKENS` per image
        self.need = tokens + spec.output_tokens
        self.tokens = tokens
        self.recs = [
            RequestRecord(start=t, scheduled=t, output_len=spec.output_tokens, prompt_len=tokens, images=spec.images)
            for t in times
        ]
        self.left = [spec.output_tokens] * len(times)
        self.last = [0.0] * len(times)
        if self.dead_at_start:
            self.failed_at = 0.0
        else:
            for i, t in enumerate(times):
                self.at(t, self.arrive, i)
            while self.events and self.failed_at is None:
                t, _, fn, args = self.heapq.heappop(self.events)
                self.now = t
                fn(*args)
                self.admit()
                self.start_prefills()
        if self.failed_at is not None:
            for r in self.recs:
                if not r.finished:
                    r.finished, r.success, r.error = True, False, "server died: CUDA out of memory"
                    r.latency = max(0.0, self.failed_at - r.start)
        return SimulatedRun(self.recs, self.telemetry, self.failed_at)

    def arrive(self, i: int) -> None:
        self.queue.append(i)

    def admit(self) -> None:  # `Engine._admit`: FCFS, head of line blocks
        while self.queue and self.failed_at is None:
            if not self.rules.admits(
                kv_used=self.kv_used, need=self.need, capacity=self.capacity, running=self.running,
                max_running=self.max_running,
            ):  # fmt: skip
                return
            i = self.queue.popleft()
            self.running += 1
            self.kv_used += self.need
            if self.rules.oom_now(self.oom_under_load, self.running):
                self.failed_at = self.now
                return
            self.waiting_prefill.append(i)

    def start_prefills(self) -> None:  # `Engine._wait_prefill_turn`, the image lane, then the prefill
        while self.waiting_prefill and self.failed_at is None:
            if self.rules.prefill_must_wait(
                interval=self.interval, last_prefill_step=self.last_prefill_step, decoding=self.decoding,
                steps=self.steps,
            ):  # fmt: skip
                return
            if self.interval > 0:
                self.last_prefill_step = self.steps
            i = self.waiting_prefill.popleft()
            t = self.now
            for k in range(self.spec.images):  # the host's image lane first: it does not stall decode
                image = (i * self.spec.images + k) % self.spec.image_pool if self.spec.image_pool else None
                self.lane_free = max(self.lane_free, t) + self.image_ms(image) * self.factor() * self.ms
                t = self.lane_free
            self.at(t, self.prefill, i)

    def prefill(self, i: int) -> None:
        self.prefilling += self.tokens
        self.log("prefill")
        prefill = self.rules.prefill_ms(self.tokens, self.chunk) * self.slowdown * self.factor() * self.ms
        self.at(self.now + prefill, self.prefilled, i)

    def image_ms(self, image: int | None) -> float:  # `Engine._image_ms` for an image of `image_kb`
        from servetune.testing.standin._engine import MEDIA_CACHE_ENTRIES

        transport, kb = self.cfg["mm_feature_transport"], self.spec.image_kb
        if transport == "cpu":
            if image is not None:  # the media cache (`_engine.MEDIA_CACHE_ENTRIES`, LRU)
                hit = image in self.media
                self.media[image] = None
                self.media.move_to_end(image)
                while len(self.media) > MEDIA_CACHE_ENTRIES:
                    self.media.popitem(last=False)
                if hit:
                    return 1.0
            return 20.0 + 4.0 * kb / 100.0
        if transport == "cuda_ipc":
            return 5.0 + kb / 100.0
        return 8.0 + kb / 100.0

    def prefilled(self, i: int) -> None:
        self.prefilling -= self.tokens
        if self.decoding == 0:
            self.gen_tokens, self.gen_since = 0, self.now
        self.decoding += 1
        r = self.recs[i]
        r.ttft = self.now - r.start
        self.last[i] = self.now
        self.left[i] -= 1  # the first token is sent at once
        self.emitted(1)
        self.next_chunk(i)

    def next_chunk(self, i: int) -> None:  # `Engine._decode`
        if self.left[i] <= 0:
            self.decoding -= 1
            self.running -= 1
            self.kv_used -= self.need
            r = self.recs[i]
            r.latency, r.success, r.finished = self.now - r.start, True, True
            return
        n = min(self.per_chunk, self.left[i])
        step = self.rules.decode_step_ms(self.decoding, self.graph_bs, self.chunk, self.prefilling) * self.slowdown
        self.steps += n
        self.left[i] -= n
        self.at(self.now + step * n * self.factor() * self.ms, self.chunk_done, i, n)

    def chunk_done(self, i: int, n: int) -> None:
        self.recs[i].itl.append(self.now - self.last[i])
        self.last[i] = self.now
        self.emitted(n)
        self.next_chunk(i)

    def emitted(self, n: int) -> None:  # `Engine._emitted`: a decode line once `log_s` has passed
        self.gen_tokens += n
        elapsed = self.now - self.gen_since
        if self.spec.log_s > 0 and elapsed >= self.spec.log_s:
            self.log("decode", self.gen_tokens / elapsed)
            self.gen_tokens, self.gen_since = 0, self.now

    def log(self, kind: str, gen_throughput: float = 0.0) -> None:
        usage = round(self.kv_used / self.capacity, 2) if self.capacity > 0 else 0.0
        record = {"t": round(self.now, 4), "kind": kind, "running_req": self.decoding, "queue_req": len(self.queue),
                  "token_usage": usage, "cuda_graph": kind == "decode" and self.decoding <= self.graph_bs}  # fmt: skip
        if kind == "decode":
            record.update(tokens=self.kv_used, gen_throughput=round(gen_throughput, 2))
        else:  # one line per request, as the stand-in logs `#new-seq: 1`
            record.update(new_seq=1)
        self.telemetry.append(record)


def standin_runner(*, noise: float = 0.05, salt: int = 0, files: bool = False, **server: Any):
    """A `FakeRunner` whose launches are `StandinServer`s of the trial's argv: a capacity study over
    the stand-in's landscape in simulated time (each capacity step served in simulation, its
    telemetry kept; each launch its own noise factor, from its run directory's name and `salt`).
    `files`: write each step's files as the real client does (`FakeRunner`'s `files`).
    `server`: the `StandinServer` fields of the traffic (input/output tokens, images, ...)."""
    import zlib

    from servetune.testing.fake import FakeRunner

    def spec(call) -> StandinServer:
        launch = call.run_dir.parent.parent if call.run_dir.parent.name == "steps" else call.run_dir
        seed = zlib.crc32(f"{salt}:{launch.name}".encode()) % 100_000  # trial-0003, r1-trial-0003: one per launch
        return StandinServer(argv=call.argv, noise=noise, launch_seed=seed, **server)

    def measure(call):
        rate = call.workload.request_rate
        if rate is None:  # the warm-up wave: closed loop, judged by nothing
            return {"completed": call.total, "comparable_request_throughput": 1.0}
        seed = call.workload.seed
        return spec(call).run(arrivals(rate, call.total, seed), seed)

    def server_info(call) -> dict[str, Any]:
        return spec(call).resolved()

    return FakeRunner(measure, server_info=server_info, files=files)
