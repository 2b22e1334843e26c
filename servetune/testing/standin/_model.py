"""The stand-in's landscape as a function: the engine's rules replayed in simulated time.

`expected_throughput` runs the same admission, prefill, prefill/decode-interval and decode
rules as `_engine.Engine` (both call `_rules`; the flags, their resolution and the memory
rules come from `_config`),
as a deterministic discrete-event simulation of a closed-loop text workload instead of real
threads that sleep. It is what the server serves with `SERVETUNE_STANDIN_NOISE=0` and an idle
CPU: a real launch measures this figure plus HTTP/CPU overhead and scheduling jitter.
It models text requests only (no images, so no feature transport or media cache).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servetune.bench.windows import window_rate
from servetune.testing.standin import _rules
from servetune.testing.standin._config import OOM_AT_START_FRACTION, build_parser, kv_capacity, resolve


@dataclass(frozen=True)
class Expected:
    """What the model predicts for one config under one closed-loop text load."""

    request_throughput: float | None
    """Steady-window completions per real second (None when the config fails)."""
    failure: str | None = None
    """`oom_at_start` or `oom_under_load` when the server would die, else None."""
    mean_latency_ms: float | None = None
    """Mean request latency in real milliseconds (queueing at the server included)."""


def expected_throughput(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    concurrency: int,
    input_tokens: int,
    output_tokens: int,
    requests: int = 384,
    trim: float = 0.1,
    time_scale: float = 0.25,
    max_chunks: int = 16,
) -> Expected:
    """Expected steady-state request throughput of the stand-in launched with `argv` (SGLang
    flags; `--model-path` may be left out) under `concurrency` clients that each send one text
    request of `input_tokens`/`output_tokens` after the previous one completes.

    The steady window is the builtin client's (`servetune.bench.windows.steady_window`): from
    the later of the `trim*n`-th and the `concurrency`-th completion to the earlier of the
    `(n-1-trim*n)`-th completion and the last send, its rate the builtin client's (`window_rate`: a
    fitted slope from three waves on). Deterministic; no noise, no overhead.
    """
    env = {} if env is None else env
    args = list(argv)
    if "--model-path" not in args and "--model" not in args:
        args = ["--model-path", "standin-model", *args]
    ns, _unknown = build_parser().parse_known_args(args)
    cfg = resolve(ns)
    if float(cfg["mem_fraction_static"]) > OOM_AT_START_FRACTION:
        return Expected(None, "oom_at_start")
    return _simulate(
        cfg,
        env,
        concurrency=concurrency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests=requests,
        trim=trim,
        time_scale=time_scale,
        max_chunks=max_chunks,
    )


class _Sim:
    def __init__(self, cfg, env, *, max_chunks: int) -> None:
        self.capacity = kv_capacity(cfg)
        self.max_running = int(cfg["max_running_requests"])
        self.graph_bs = int(cfg["cuda_graph_max_bs_decode"])
        self.chunk = _rules.effective_chunk(cfg)
        self.interval = int(cfg["prefill_decode_interval"] or 0)
        self.stream_interval = int(cfg["stream_interval"])
        self.oom_under_load = _rules.ooms_under_load(cfg)
        self.slowdown = _rules.slowdown(cfg)
        self.max_chunks = max_chunks
        self.now = 0.0
        self.events: list[tuple[float, int, object]] = []
        self.seq = 0
        self.queue: deque = deque()
        self.waiting_prefill: deque = deque()
        self.running = 0
        self.kv_used = 0
        self.decoding = 0
        self.prefilling = 0
        self.steps = 0
        self.last_prefill_step: int | None = None
        self.failed: str | None = None

    def at(self, t: float, fn) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn))

    def decode_step_ms(self) -> float:  # `Engine._decode_step_ms`
        return _rules.decode_step_ms(self.decoding, self.graph_bs, self.chunk, self.prefilling) * self.slowdown

    def admit(self) -> None:  # `Engine._admit`: FCFS, head of line blocks
        while self.queue and not self.failed:
            req = self.queue[0]
            if not _rules.admits(
                kv_used=self.kv_used,
                need=req["need"],
                capacity=self.capacity,
                running=self.running,
                max_running=self.max_running,
            ):
                return
            self.queue.popleft()
            self.running += 1
            self.kv_used += req["need"]
            if _rules.oom_now(self.oom_under_load, self.running):
                self.failed = "oom_under_load"
                return
            self.waiting_prefill.append(req)

    def start_prefills(self) -> None:  # `Engine._wait_prefill_turn`, then the prefill sleep
        while self.waiting_prefill:
            if _rules.prefill_must_wait(
                interval=self.interval,
                last_prefill_step=self.last_prefill_step,
                decoding=self.decoding,
                steps=self.steps,
            ):
                return
            if self.interval > 0:
                self.last_prefill_step = self.steps
            req = self.waiting_prefill.popleft()
            tokens = req["tokens"]
            self.prefilling += tokens
            prefill = _rules.prefill_ms(tokens, self.chunk) * self.slowdown
            self.at(self.now + prefill, lambda r=req: self.prefill_done(r))

    def prefill_done(self, req) -> None:
        self.prefilling -= req["tokens"]
        self.decoding += 1
        out = req["max_tokens"]
        req["per_chunk"] = _rules.tokens_per_chunk(self.stream_interval, out, self.max_chunks)
        req["left"] = out - min(1, out)  # the first token is sent at once
        self.next_chunk(req)

    def next_chunk(self, req) -> None:  # `Engine._decode`
        if req["left"] <= 0:
            self.decoding -= 1
            self.running -= 1
            self.kv_used -= req["need"]
            req["done"](self.now)
            return
        n = min(req["per_chunk"], req["left"])
        step = self.decode_step_ms()
        self.steps += n
        req["left"] -= n
        self.at(self.now + step * n, lambda r=req: self.next_chunk(r))

    def run(self) -> None:
        while self.events and not self.failed:
            t, _, fn = heapq.heappop(self.events)
            self.now = t
            fn()
            self.admit()
            self.start_prefills()


def _simulate(
    cfg, env, *, concurrency, input_tokens, output_tokens, requests, trim, time_scale, max_chunks
) -> Expected:
    sim = _Sim(cfg, env, max_chunks=max_chunks)
    need = input_tokens + output_tokens
    sent: list[float] = []
    done: list[tuple[float, float]] = []  # (end, start)

    def send() -> None:
        if len(sent) >= requests:
            return
        start = sim.now
        sent.append(start)

        def finished(end: float) -> None:
            done.append((end, start))
            send()

        sim.queue.append({"tokens": input_tokens, "max_tokens": output_tokens, "need": need, "done": finished})

    for _ in range(min(concurrency, requests)):
        send()
    sim.admit()
    sim.start_prefills()
    sim.run()
    if sim.failed:
        return Expected(None, sim.failed)
    done.sort()
    n = len(done)
    cut = int(n * trim)
    low, high = max(cut, concurrency - 1), n - 1 - cut
    if high - low < 3:
        raise ValueError(f"{requests} requests at concurrency {concurrency} leave no steady window; send more")
    start, end = done[low][0], min(done[high][0], max(sent))
    inside = sum(1 for e, _ in done if start < e <= end)
    if inside < 3 or end <= start:
        # no window (the run's last send came before it opened, or one burst fills it): like
        # `steady_window` -> None, the figure is the whole run's rate
        per_ms = n / (done[-1][0] - min(sent))
    else:
        per_ms = window_rate([e for e, _ in done if start <= e <= end], start, end, inside, concurrency)
    latency = sum(e - s for e, s in done) / n
    return Expected(per_ms / (time_scale / 1000.0), None, latency * time_scale)
