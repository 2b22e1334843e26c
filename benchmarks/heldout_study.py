"""Held-out study check: servetune's capacity tuner against a simulated VLM server it has never seen.

What the server stands for
--------------------------
`HeldoutServer` is a continuous-batching engine in the manner of SGLang serving a ~3B vision-language
model (Qwen2.5-VL-3B-like: 36 layers, 2 KV heads of 128, bf16) on one H200, in simulated time: no
process, no HTTP, no GPU. Each request carries one 720p JPEG (the prompt is 1000-1300 tokens, mostly
image tokens) and streams 128 output tokens, one chunk per token. Its mechanics:

- **Host preprocessing.** Every image is decoded, resized and patchified on the host by a pool of
  `PREP_WORKERS` workers (FCFS, ~9 ms an image, lognormal spread) before the scheduler sees it.
- **One GPU stream, prefill first.** As SGLang's scheduler does by default (no mixed chunk), each
  loop iteration runs either a prefill batch or one decode step, and a prefill batch runs whenever
  a request waits, a running slot is free and the KV pool has room. Prefill batches stall every
  running request's stream, which is what makes TPOT grow with the arrival rate.
- **Chunked prefill.** A prefill batch takes waiting requests FCFS up to `--chunked-prefill-size`
  tokens; the last one is cut to fill the budget and continues in the next batch (it holds a slot).
  A batch costs a fixed launch/scheduling overhead, the vision encoder for each image whose first
  chunk it holds, a per-token cost and a small attention term (tokens x prefix). The request's first
  token is emitted at the end of the batch that finishes its prompt.
- **Decode.** One step gives every running request one token. On the GPU a step costs a fixed part
  (weights read), a per-sequence part and a per-KV-token part (attention reads). Batches up to
  `--cuda-graph-max-bs-decode` replay a captured CUDA graph, padded to the next captured batch size
  (1, 2, 4, 8, 12, 16, 24, ... by 8 to 256, then by 16); larger batches run eagerly, where the
  step is bound by the host launching kernels (~11 ms) rather than by the GPU. A small per-sequence
  host cost (output processing, streaming) is paid in both modes.
- **Admission.** `--max-running-requests` caps decoding + prefilling requests (default: what the KV
  pool holds, capped at 4096, as SGLang's req-to-token pool). The KV pool is sized from
  `--mem-fraction-static` of 141 GB less weights and captured graphs, at 36 KiB a token; a request
  is admitted only if its prompt plus all its output fits (no preemption, no retraction). For this
  model on an H200 the pool holds millions of tokens, so the pool never binds at these loads and
  `--mem-fraction-static` barely matters, as on the real thing.
- `--num-continuous-decode-steps K` (decode steps between prefill checks) and
  `--enable-mixed-chunk` (a prefill batch also advances the running requests, run eagerly) are
  modelled too; other flags are ignored.
- Each launch has a performance factor (lognormal, sigma `LAUNCH_SIGMA`, multiplying every GPU and
  host time) seeded by its trial directory's name and the study's seed, and each step a smaller one
  (`STEP_SIGMA`): launches and steps differ, runs of the same study do not.

What it does not model: the radix/prefix cache (every image is unique), KV preemption or retraction,
speculative decoding, network time, tokenizer-manager contention beyond the preprocessing pool,
variable output lengths (every request streams exactly 128 tokens), start-up cost of capturing
graphs, out-of-memory at start, and the overlap scheduler's finer CPU/GPU overlap.

How it was written
------------------
Held out: from first principles about LLM serving and the interfaces in the brief
(`servetune.testing.simulated.arrivals` / `SimulatedRun`, `servetune.bench.schema.RequestRecord`,
`servetune.testing.fake.FakeRunner`, `servetune.tuner`), without reading servetune's own
simulators, stand-in server or server model. The constants were chosen so the defaults sustain a
few tens of requests per second at the SLOs below and a larger decode graph or a running limit
beats them; nothing was adjusted to make the tuner look better or worse.

Run
---
    python benchmarks/heldout_study.py                   # seeds 0 1 2, 10 launches a study
    python benchmarks/heldout_study.py --seeds 0 --trials 12

It prints (1) the server's long-run truth for the defaults and a coarse grid over running limit x
decode graph size, (2) per seed a study with and without the model's seed trial: best-so-far per
launch as a multiple of the baseline, launches to 1.3x, the model's seed prediction against what
the seed trial measured, and the long-run truth of the study's best config, (3) a summary.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import heapq
import math
import random
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from servetune.bench.schema import RequestRecord  # noqa: E402
from servetune.testing.fake import FakeRunner  # noqa: E402
from servetune.testing.simulated import SimulatedRun, arrivals  # noqa: E402

# --- the server's constants (seconds, tokens) ---------------------------------------------------
PREP_WORKERS = 2
PREP_S = 0.009
"""Host preprocessing of one 720p image (decode, resize, normalize, patchify), median."""
PREP_SIGMA = 0.25
PROMPT_TOKENS = (1000, 1300)
OUTPUT_TOKENS = 128

PF_FIXED_S = 0.0035
"""A prefill batch's fixed cost: scheduling, eager launch of the forward, sampling."""
PF_TOKEN_S = 6.0e-6
"""Per prompt token (~165k tokens/s for a 3B dense model)."""
PF_ATTN_S = 1.0e-10
"""Per (token x prefix token) of prefill attention."""
VIT_IMAGE_S = 0.0045
"""Vision encoder, per 720p image (~4.8k patches, windowed attention)."""
VIT_FIXED_S = 0.0012
"""Vision encoder launch per batch that holds an image."""

DEC_FIXED_S = 0.0036
"""Decode step: weights read (~7 GB at ~4.8 TB/s) plus sampling, on the GPU."""
DEC_SEQ_S = 2.4e-5
"""Decode step: per sequence in the (padded) batch."""
DEC_KV_S = 1.3e-8
"""Decode step: per KV token read by attention."""
GRAPH_REPLAY_S = 0.0003
EAGER_CPU_S = 0.011
"""Eager decode: the host launching ~36 layers' kernels one by one."""
EAGER_CPU_SEQ_S = 8.0e-6
HOST_SEQ_S = 1.0e-5
"""Per running request per step: output processing and streaming not hidden by overlap."""

GPU_BYTES = 141e9
WEIGHT_BYTES = 7.5e9
KV_BYTES_PER_TOKEN = 36 * 2 * 2 * 128 * 2
GRAPH_BYTES_PER_BS = 12e6
REQ_POOL_MAX = 4096

DEFAULT_GRAPH_BS = 48
"""`--cuda-graph-max-bs-decode` when not given (this engine's multimodal path captures few sizes)."""
DEFAULT_CHUNK = 8192
DEFAULT_MEM_FRACTION = 0.85

LAUNCH_SIGMA = 0.02
STEP_SIGMA = 0.01
LOG_EVERY_S = 0.5

# --- the study's setting ------------------------------------------------------------------------
TTFT_MS = 800.0
TPOT_MS = 30.0
SLOS = (f"p99_ttft_ms<={TTFT_MS:g}", f"p99_tpot_ms<={TPOT_MS:g}")
MODEL = "qwen2.5-vl-3b-instruct"
WORKLOAD_YAML = """\
name: heldout-vlm
summary: one image per request
kind: multimodal
requests: 384
max_concurrency: 64
input_tokens: 128
output_tokens: 128
images: {per_request: 1, resolution: 720p, format: jpeg, reuse: unique}
"""
SPACE_YAML = """\
tune:
  max_running_requests: {int: [8, 512], log: true}
  cuda_graph_max_bs_decode: {choice: [16, 32, 64, 128, 256]}
  chunked_prefill_size: {choice: [2048, 4096, 8192]}
  mem_fraction_static: {float: [0.70, 0.88], step: 0.02}
"""


@dataclass(frozen=True)
class Launch:
    """The launch flags the server reads."""

    max_running_requests: int | None = None
    graph_bs: int = DEFAULT_GRAPH_BS
    chunk: int = DEFAULT_CHUNK
    mem_fraction: float = DEFAULT_MEM_FRACTION
    continuous_decode: int = 1
    mixed_chunk: bool = False

    @classmethod
    def from_argv(cls, argv: list[str]) -> Launch:
        """The flags this server models, from an SGLang argument list (others are ignored)."""
        flags: dict[str, str | None] = {}
        i = 0
        while i < len(argv):
            arg = argv[i]
            if arg.startswith("--"):
                if "=" in arg:
                    key, value = arg.split("=", 1)
                    flags[key] = value
                elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    flags[arg] = argv[i + 1]
                    i += 1
                else:
                    flags[arg] = None
            i += 1
        out = cls()
        if flags.get("--max-running-requests") not in (None, "None"):
            out = replace(out, max_running_requests=int(flags["--max-running-requests"]))
        if flags.get("--cuda-graph-max-bs-decode") not in (None, "None"):
            out = replace(out, graph_bs=int(flags["--cuda-graph-max-bs-decode"]))
        if flags.get("--chunked-prefill-size") not in (None, "None"):
            chunk = int(flags["--chunked-prefill-size"])
            out = replace(out, chunk=chunk if chunk > 0 else 1 << 30)
        if flags.get("--mem-fraction-static") not in (None, "None"):
            out = replace(out, mem_fraction=float(flags["--mem-fraction-static"]))
        if flags.get("--num-continuous-decode-steps") not in (None, "None"):
            out = replace(out, continuous_decode=max(1, int(flags["--num-continuous-decode-steps"])))
        if "--enable-mixed-chunk" in flags:
            out = replace(out, mixed_chunk=True)
        return out

    @property
    def kv_pool_tokens(self) -> int:
        graphs = GRAPH_BYTES_PER_BS * len(captured_sizes(self.graph_bs))
        return max(0, int((self.mem_fraction * GPU_BYTES - WEIGHT_BYTES - graphs) / KV_BYTES_PER_TOKEN))

    @property
    def running_limit(self) -> int:
        """The effective `max_running_requests` (what /server_info reports)."""
        default = max(1, min(REQ_POOL_MAX, self.kv_pool_tokens // 2))
        return default if self.max_running_requests is None else max(1, min(self.max_running_requests, default))

    def label(self) -> str:
        n = "def" if self.max_running_requests is None else str(self.max_running_requests)
        return f"N={n} G={self.graph_bs} C={self.chunk} F={self.mem_fraction:.2f}"


def captured_sizes(graph_bs: int) -> list[int]:
    """Batch sizes captured as decode graphs: 1, 2, 4, 8, 12, then by 8 to 256, then by 16, up to the max."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 4097, 16)]
    out = [s for s in sizes if s < graph_bs]
    return [*out, graph_bs] if graph_bs >= 1 else []


def launch_factor(name: str, salt: int | str = 0) -> float:
    """A launch's performance factor (multiplies GPU and host times), seeded by its trial directory's
    name and the server's salt (a study's seed: trial-0000 of two studies are different launches)."""
    rng = random.Random(int.from_bytes(hashlib.sha256(f"launch:{salt}:{name}".encode()).digest()[:8], "big"))
    return math.exp(rng.gauss(0.0, LAUNCH_SIGMA))


@dataclass
class Outcome:
    """What `simulate` returns: per request times (s, from the first arrival) and the scheduler's log."""

    arrival: list[float]
    prompt: list[int]
    output: list[int]
    first: list[float]
    end: list[float]
    step_ends: list[float]
    join: list[int]
    telemetry: list[dict[str, Any]]

    def tpot(self, i: int) -> float:
        n = self.output[i]
        return (self.end[i] - self.first[i]) / (n - 1) if n > 1 else 0.0

    def itl(self, i: int) -> list[float]:
        j, n = self.join[i], self.output[i]
        times = [self.first[i], *self.step_ends[j : j + n - 1]]
        return [b - a for a, b in zip(times, times[1:])]

    def records(self) -> list[RequestRecord]:
        return [
            RequestRecord(
                success=True,
                start=a,
                scheduled=a,
                ttft=self.first[i] - a,
                latency=self.end[i] - a,
                itl=self.itl(i),
                output_len=self.output[i],
                prompt_len=self.prompt[i],
                images=1,
                finished=True,
            )  # fmt: skip
            for i, a in enumerate(self.arrival)
        ]


def simulate(launch: Launch, times: list[float], seed: int, perf: float = 1.0, log: bool = True) -> Outcome:
    """Serves requests arriving at `times` (s) on `launch`; `seed` draws their prompts and preprocessing."""
    n = len(times)
    t0 = times[0] if times else 0.0
    arrival = [t - t0 for t in times]
    rng = random.Random(f"heldout-requests:{seed}")
    prompt = [rng.randint(*PROMPT_TOKENS) for _ in range(n)]
    output = [OUTPUT_TOKENS] * n
    prep = [PREP_S * math.exp(rng.gauss(0.0, PREP_SIGMA)) for _ in range(n)]
    workers = [0.0] * PREP_WORKERS
    ready: list[tuple[float, int]] = []
    for i in range(n):
        free = heapq.heappop(workers)
        done_at = max(arrival[i], free) + prep[i] * perf
        heapq.heappush(workers, done_at)
        ready.append((done_at, i))
    ready.sort()

    cap = launch.running_limit
    pool = launch.kv_pool_tokens
    graph_bs = launch.graph_bs
    sizes = captured_sizes(graph_bs)
    chunk = launch.chunk
    first = [0.0] * n
    end = [0.0] * n
    join = [0] * n
    step_ends: list[float] = []
    finish_at: dict[int, list[int]] = {}
    telemetry: list[dict[str, Any]] = []
    waiting: deque[int] = deque()
    chunked: list[int] | None = None  # [request, tokens done]
    now = 0.0
    rp = 0
    running = 0
    kv = 0
    reserved = 0
    finished = 0
    streak = 0
    log_t = -1.0
    log_tokens = 0

    def decode_cost(r: int) -> float:
        if r <= graph_bs:
            b = sizes[bisect.bisect_left(sizes, r)]
            t = DEC_FIXED_S + DEC_SEQ_S * b + DEC_KV_S * kv + GRAPH_REPLAY_S
        else:
            gpu = DEC_FIXED_S + DEC_SEQ_S * r + DEC_KV_S * kv
            t = max(EAGER_CPU_S + EAGER_CPU_SEQ_S * r, gpu)
        return (t + HOST_SEQ_S * r) * perf

    def finish_step(k: int) -> None:
        nonlocal running, kv, reserved, finished
        for i in finish_at.pop(k, ()):
            end[i] = now
            kv -= prompt[i] + output[i]
            reserved -= prompt[i] + output[i]
            running -= 1
            finished += 1

    while finished < n:
        while rp < n and ready[rp][0] <= now:
            waiting.append(ready[rp][1])
            rp += 1
        held = running + (chunked is not None)
        can_admit = waiting and held < cap and reserved + prompt[waiting[0]] + output[waiting[0]] <= pool
        if (chunked is not None or can_admit) and (streak == 0 or running == 0):
            budget = chunk
            parts: list[tuple[int, int, int]] = []  # (request, tokens, prefix)
            if chunked is not None:
                i, done_tokens = chunked
                take = min(prompt[i] - done_tokens, budget)
                parts.append((i, take, done_tokens))
                budget -= take
                chunked = None if done_tokens + take >= prompt[i] else [i, done_tokens + take]
            while (
                budget > 0
                and chunked is None
                and waiting
                and running + len(parts) < cap
                and reserved + prompt[waiting[0]] + output[waiting[0]] <= pool
            ):
                i = waiting.popleft()
                reserved += prompt[i] + output[i]
                take = min(prompt[i], budget)
                parts.append((i, take, 0))
                budget -= take
                if take < prompt[i]:
                    chunked = [i, take]
            tokens = sum(p[1] for p in parts)
            images = sum(1 for p in parts if p[2] == 0)
            cost = PF_FIXED_S + PF_TOKEN_S * tokens + sum(PF_ATTN_S * p[1] * (p[2] + p[1] / 2) for p in parts)
            if images:
                cost += VIT_FIXED_S + VIT_IMAGE_S * images
            mixed = launch.mixed_chunk and running > 0
            if mixed:
                gpu = DEC_FIXED_S * 0.3 + DEC_SEQ_S * running + DEC_KV_S * kv
                cost += max(EAGER_CPU_S * 0.3, gpu) + HOST_SEQ_S * running
            now += cost * perf
            if mixed:
                step_ends.append(now)
                kv += running
                log_tokens += running
                finish_step(len(step_ends))
            done_now = 0
            for i, take, prefix in parts:
                kv += take
                if prefix + take >= prompt[i]:
                    first[i] = now
                    kv += 1
                    log_tokens += 1
                    done_now += 1
                    if output[i] <= 1:
                        end[i] = now
                        kv -= prompt[i] + output[i]
                        reserved -= prompt[i] + output[i]
                        finished += 1
                        continue
                    join[i] = len(step_ends)
                    finish_at.setdefault(join[i] + output[i] - 1, []).append(i)
                    running += 1
            if log:
                telemetry.append(
                    {"t": now, "kind": "prefill", "running_req": running, "queue_req": len(waiting),
                     "token_usage": round(kv / pool, 2) if pool else 0.0, "cuda_graph": False}
                )  # fmt: skip
            streak = 0
        elif running > 0:
            now += decode_cost(running)
            step_ends.append(now)
            kv += running
            log_tokens += running
            r_step = running
            finish_step(len(step_ends))
            streak = launch.continuous_decode - 1 if streak == 0 else streak - 1
            if log and now - log_t >= LOG_EVERY_S:
                span = now - log_t if log_t >= 0 else now
                telemetry.append(
                    {"t": now, "kind": "decode", "running_req": r_step, "queue_req": len(waiting),
                     "token_usage": round(kv / pool, 2) if pool else 0.0, "tokens": kv,
                     "cuda_graph": r_step <= graph_bs, "gen_throughput": round(log_tokens / span, 1) if span else 0.0}
                )  # fmt: skip
                log_t, log_tokens = now, 0
        else:
            streak = 0
            if rp < n:
                now = max(now, ready[rp][0])
            else:  # nothing admissible will ever be (a request larger than the pool)
                raise RuntimeError("the server cannot serve a waiting request")
    return Outcome(arrival, prompt, output, first, end, step_ends, join, telemetry)


# --- long-run truth -----------------------------------------------------------------------------
TRUTH_REQUESTS = 7000
TRUTH_WARMUP = 1000
TRUTH_SEED = 90_001
TRUTH_STEP = 1.02


def long_run(launch: Launch, rate: float, perf: float = 1.0, requests: int = TRUTH_REQUESTS) -> dict[str, float]:
    """A long run at `rate`: the share of judged requests (after `TRUTH_WARMUP`) over each bound, and the
    backlog trend (mean TTFT of the last fifth over the first fifth of the judged requests)."""
    out = simulate(launch, arrivals(rate, requests, TRUTH_SEED), TRUTH_SEED, perf, log=False)
    judged = range(TRUTH_WARMUP, requests)
    ttft = [out.first[i] - out.arrival[i] for i in judged]
    tpot = [out.tpot(i) for i in judged]
    fifth = len(ttft) // 5
    head, tail = sum(ttft[:fifth]) / fifth, sum(ttft[-fifth:]) / fifth
    return {
        "ttft_over": sum(t * 1000 > TTFT_MS for t in ttft) / len(ttft),
        "tpot_over": sum(t * 1000 > TPOT_MS for t in tpot) / len(tpot),
        "growth": tail / head if head > 0 else 1.0,
        "p99_ttft_ms": sorted(ttft)[int(0.99 * len(ttft))] * 1000,
        "p99_tpot_ms": sorted(tpot)[int(0.99 * len(tpot))] * 1000,
    }


def sustains(launch: Launch, rate: float, perf: float = 1.0) -> bool:
    r = long_run(launch, rate, perf)
    return r["ttft_over"] <= 0.01 and r["tpot_over"] <= 0.01 and r["growth"] < 1.5


def truth(launch: Launch, perf: float = 1.0, lo: float = 2.0, hi: float = 200.0) -> float:
    """The highest rate of the grid `lo * TRUTH_STEP**k` that a long run sustains (bisection on the grid)."""
    grid = [lo * TRUTH_STEP**k for k in range(int(math.log(hi / lo) / math.log(TRUTH_STEP)) + 1)]
    a, b = -1, len(grid)  # grid[a] sustained (or none), grid[b] not (or none)
    while b - a > 1:
        m = (a + b) // 2
        if sustains(launch, grid[m], perf):
            a = m
        else:
            b = m
    return grid[a] if a >= 0 else 0.0


# --- the server behind servetune's FakeRunner ---------------------------------------------------
def trial_name(run_dir: Path) -> str:
    """The launch's name: the `trial-NNNN` directory above a step's run directory (else the directory)."""
    for part in reversed(Path(run_dir).parts):
        if part.startswith("trial-"):
            return part
    return Path(run_dir).name


class HeldoutServer:
    """`measure_fn` and `server_info` for `FakeRunner`; `launches` maps each trial directory's name
    to its `(Launch, performance factor)`."""

    def __init__(self, salt: int | str = 0) -> None:
        self.salt = salt
        self.launches: dict[str, tuple[Launch, float]] = {}
        self.steps = 0

    def launch_of(self, call: Any) -> tuple[Launch, float]:
        name = trial_name(call.run_dir)
        launch = Launch.from_argv(call.argv)
        perf = launch_factor(name, self.salt)
        self.launches[name] = (launch, perf)
        return launch, perf

    def measure(self, call: Any) -> Any:
        rate = call.workload.request_rate if call.workload is not None else None
        if rate is None:  # the warm-up wave: judged by nothing
            return {"completed": call.total, "comparable_request_throughput": 1.0}
        launch, perf = self.launch_of(call)
        seed = int(call.workload.seed or 0)
        rng = random.Random(f"step:{trial_name(call.run_dir)}:{Path(call.run_dir).name}:{seed}")
        step = math.exp(rng.gauss(0.0, STEP_SIGMA))
        out = simulate(launch, arrivals(rate, call.total, seed), seed, perf * step)
        self.steps += 1
        return SimulatedRun(out.records(), out.telemetry)

    def server_info(self, call: Any) -> dict[str, Any]:
        launch, _ = self.launch_of(call)
        return {
            "max_running_requests": launch.running_limit,
            "cuda_graph_max_bs_decode": launch.graph_bs,
            "chunked_prefill_size": launch.chunk,
            "mem_fraction_static": launch.mem_fraction,
            "num_continuous_decode_steps": launch.continuous_decode,
            "enable_mixed_chunk": launch.mixed_chunk,
            "max_total_num_tokens": launch.kv_pool_tokens,
        }

    def runner(self) -> FakeRunner:
        return FakeRunner(self.measure, server_info=self.server_info)


def launch_of_params(params: dict[str, Any]) -> Launch:
    """The `Launch` a trial's params (`user_attrs["params"]`) stand for (missing fields: the defaults)."""
    argv: list[str] = []
    for key, value in params.items():
        if value is not None and key in ("max_running_requests", "cuda_graph_max_bs_decode", "chunked_prefill_size",
                                         "mem_fraction_static"):  # fmt: skip
            argv += ["--" + key.replace("_", "-"), str(value)]
    return Launch.from_argv(argv)


def run_study(
    seed: int, *, model_seed: bool, trials: int, workdir: Path, start_rate: float = 16.0, space: str = SPACE_YAML
) -> Study:
    """One capacity study on a fresh `HeldoutServer`. A study that raises is returned with its error
    and the trials it had told (the error is the finding, not hidden)."""
    from servetune.tuner import TuneOptions, Tuner

    workdir.mkdir(parents=True, exist_ok=True)
    workload = workdir / "heldout-vlm.yaml"
    workload.write_text(WORKLOAD_YAML)
    space_file = workdir / "space.yaml"
    space_file.write_text(space)
    server = HeldoutServer(salt=seed)
    options = TuneOptions(
        model=MODEL, gpu="h200", workload=str(workload), space_file=str(space_file), objective="capacity",
        slos=SLOS, start_rate=start_rate, trials=trials, seed=seed, confirm_rounds=0, confirm_soak_seconds=0,
        run_dir=workdir / "study", client="builtin", no_rules=True, model_seed=model_seed,
    )  # fmt: skip
    tuner = Tuner(options, runner=server.runner())
    error = None
    try:
        tuner.run()
    except Exception as exc:  # reported, not hidden: the error is a finding
        error = f"{type(exc).__name__}: {exc}"
    return Study(tuner.study, server, error)


@dataclass
class Study:
    """A finished (or crashed) study on the held-out server, read back."""

    study: Any
    server: HeldoutServer
    error: str | None

    @property
    def trials(self) -> list[Any]:
        return sorted(self.study.get_trials(), key=lambda t: t.number)

    @property
    def record(self) -> dict[str, Any] | None:
        return self.study.user_attrs.get("server_model")

    def launched(self) -> list[Any]:
        """The trials that were launched (not duplicates), in order."""
        return [t for t in self.trials if "duplicate_of" not in t.user_attrs and self.launch(t) is not None]

    def launch(self, trial: Any) -> tuple[Launch, float] | None:
        """`(Launch, performance factor)` of a trial's launch (None: never launched)."""
        return self.server.launches.get(f"trial-{trial.number:04d}")

    @staticmethod
    def capacity(trial: Any) -> float | None:
        from optuna.trial import TrialState

        return float(trial.values[0]) if trial.state == TrialState.COMPLETE and trial.values else None

    def baseline(self) -> float | None:
        """The baselines' certified capacity (the defaults, else the rules trial)."""
        caps = [self.capacity(t) for t in self.trials if t.user_attrs.get("source") in ("rules", "defaults")]
        caps = [c for c in caps if c is not None]
        return max(caps) if caps else None

    def best(self) -> Any | None:
        done = [t for t in self.trials if self.capacity(t) is not None]
        return max(done, key=self.capacity) if done else None

    def best_so_far(self) -> list[float | None]:
        """Per launch, the best certified capacity so far (req/s)."""
        out: list[float | None] = []
        best = None
        for t in self.launched():
            cap = self.capacity(t)
            if cap is not None and (best is None or cap > best):
                best = cap
            out.append(best)
        return out

    def launches_to(self, ratio: float) -> int | None:
        base = self.baseline()
        if not base:
            return None
        for k, best in enumerate(self.best_so_far(), 1):
            if best is not None and best >= ratio * base:
                return k
        return None

    def model_seed_trial(self) -> Any | None:
        return next((t for t in self.trials if t.user_attrs.get("source") == "model"), None)


# --- the report ---------------------------------------------------------------------------------
GRID_N: tuple[int | None, ...] = (None, 32, 64, 96, 128, 160, 192, 256)
GRID_G = (16, 32, 48, 64, 128, 256)
RATIO = 1.3
_TRUTHS: dict[tuple[Launch, float], float] = {}


def truth_of(launch: Launch, perf: float = 1.0) -> float:
    """`truth`, cached."""
    key = (launch, round(perf, 6))
    if key not in _TRUTHS:
        _TRUTHS[key] = truth(launch, perf, lo=4.0, hi=120.0)
    return _TRUTHS[key]


def landscape() -> tuple[float, Launch, float]:
    """Prints the long-run truth over running limit x graph size; `(defaults, best launch, its truth)`."""
    print(f"(1) long-run truth (req/s): the highest rate on a {TRUTH_STEP:g}x grid whose {TRUTH_REQUESTS} arrivals")
    print(f"    (the first {TRUTH_WARMUP} not judged) keep each SLO's share over its bound within 1% and the TTFT")
    print(f"    not growing; SLOs {', '.join(SLOS)}; C={DEFAULT_CHUNK}, F={DEFAULT_MEM_FRACTION}, nominal launch")
    print("    N \\ G " + "".join(f"{g:>8}" + ("*" if g == DEFAULT_GRAPH_BS else " ") for g in GRID_G))
    best: tuple[float, Launch] = (0.0, Launch())
    for n in GRID_N:
        cells = []
        for g in GRID_G:
            launch = Launch(max_running_requests=n, graph_bs=g)
            value = truth_of(launch)
            best = max(best, (value, launch), key=lambda b: b[0])
            cells.append(f"{value:>8.1f} ")
        print(f"    {('def*' if n is None else str(n)):>5} " + "".join(cells))
    default = truth_of(Launch())
    print(f"    defaults ({Launch().label()}, N_eff={Launch().running_limit}): {default:.1f} req/s")
    print(f"    best of the grid: {best[1].label()}: {best[0]:.1f} req/s = {best[0] / default:.2f}x the defaults")
    for other in (Launch(chunk=2048), Launch(chunk=4096), Launch(mem_fraction=0.70), Launch(mem_fraction=0.88)):
        print(f"    {other.label()}: {truth_of(other):.1f}")
    best_c = max((replace(best[1], chunk=c) for c in (2048, 4096, 8192)), key=truth_of)
    print("    the grid's best with each chunk: "
          + ", ".join(f"C={c}: {truth_of(replace(best[1], chunk=c)):.1f}" for c in (2048, 4096, 8192)))  # fmt: skip
    return default, best_c, truth_of(best_c)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def report_study(label: str, st: Study, default_truth: float, best_truth: float) -> dict[str, Any]:
    """Prints one study: per launch, the model, the best config's truth; returns its summary row."""
    base = st.baseline()
    launched = st.launched()
    print(f"\n  {label}: {len(launched)} launches" + (f"; the study RAISED {st.error}" if st.error else ""))
    print(f"    {'#':>2} {'trial':>5} {'source':<8} {'config (launch factor)':<42} {'state':<8} {'cap':>6} "
          f"{'pred':>6} {'best/base':>9}")  # fmt: skip
    for k, (t, best) in enumerate(zip(launched, st.best_so_far()), 1):
        launch, perf = st.launch(t)  # type: ignore[misc]
        pred = (t.user_attrs.get("predicted") or {}).get("capacity")
        ratio = best / base if best is not None and base else None
        config = f"{launch.label()} (x{perf:.3f})"
        print(f"    {k:>2} {t.number:>5} {t.user_attrs.get('source', '?'):<8} {config:<42} {t.state.name:<8} "
              f" {_fmt(st.capacity(t), '6.2f'):>6} {_fmt(pred, '6.2f'):>6} {_fmt(ratio):>9}")  # fmt: skip
    reach = st.launches_to(RATIO)
    print(f"    launches to {RATIO}x the baseline ({_fmt(base)} req/s): {reach if reach else 'not reached'}")
    record = st.record
    seed_trial = st.model_seed_trial()
    if record is None:
        print("    server model: no record")
    else:
        seed = record.get("seed")
        evidence = "; ".join(
            f"{e.get('field')} {e.get('action')}" + (f" to {e['to']:g}" if isinstance(e.get("to"), float) else "")
            for e in record.get("evidence") or []
        )
        if seed and seed_trial is not None:
            measured = st.capacity(seed_trial)
            note = f" ({measured / seed['predicted']:.2f} of it)" if measured else ""
            print(f"    server model: seed {seed.get('values')} predicted {seed['predicted']:.2f}, measured "
                  f"{_fmt(measured)} ({seed_trial.state.name}){note}")  # fmt: skip
        else:
            keys = {k: v for k, v in record.items() if k not in ("model", "evidence")}
            print(f"    server model: no seed trial; record {keys}")
        bp, bm = record.get("baseline_predicted"), record.get("baseline_measured")
        print(f"    server model: baseline predicted {_fmt(bp)} vs measured {_fmt(bm)}; evidence: {evidence or 'none'}")
        pairs = [
            (p, c)
            for t in launched
            if (p := (t.user_attrs.get("predicted") or {}).get("capacity")) is not None
            and (c := st.capacity(t)) is not None
        ]
        if pairs:
            err = [abs(p / c - 1) for p, c in pairs]
            print(f"    predictions of completed trials: {len(pairs)}, mean |pred/cap - 1| = {sum(err) / len(err):.2f}")
    best = st.best()
    row: dict[str, Any] = {"label": label, "error": st.error, "reach": reach, "launches": len(launched)}
    if best is None or base is None:
        print("    no certified capacity")
        return row
    launch, perf = st.launch(best)  # type: ignore[misc]
    cap = st.capacity(best)
    nominal, own = truth_of(launch), truth_of(launch, perf)
    verdict = "ok" if cap <= own * 1.05 else "ABOVE truth x 1.05"
    print(
        f"    best: trial {best.number} {launch.label()}: certified {cap:.2f} req/s = {cap / base:.2f}x the baseline;"
    )
    print(f"      long-run truth {own:.1f} for this launch (x{perf:.3f}), {nominal:.1f} nominal "
          f"= {nominal / default_truth:.2f}x the defaults' truth, {nominal / best_truth:.2f} of the grid's best; "
          f"certified / truth = {cap / own:.2f} ({verdict})")  # fmt: skip
    row.update(ratio=cap / base, truth_ratio=nominal / default_truth, of_best=nominal / best_truth, cert=cap / own)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--no-workaround", action="store_true",
                        help="do not rerun a crashed model-seeded study without mem_fraction_static")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.time()
    default_truth, best_launch, best_truth = landscape()
    print(f"    ({time.time() - started:.0f} s)")
    print(
        f"\n(2) studies: {args.trials} trials, start rate 16 req/s, SLOs {', '.join(SLOS)}, no rules, no confirmation"
    )
    rows = []
    no_mem = SPACE_YAML.replace("  mem_fraction_static: {float: [0.70, 0.88], step: 0.02}\n", "")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for model_seed in (True, False):
                label = f"seed {seed}, model_seed={model_seed}"
                st = run_study(
                    seed, model_seed=model_seed, trials=args.trials, workdir=Path(tmp) / f"{seed}-{model_seed}"
                )
                rows.append(report_study(label, st, default_truth, best_truth))
                if st.error and model_seed and not args.no_workaround:
                    label += ", space without mem_fraction_static"
                    st = run_study(
                        seed, model_seed=True, trials=args.trials, workdir=Path(tmp) / f"{seed}-no-mem", space=no_mem
                    )
                    rows.append(report_study(label, st, default_truth, best_truth))
    print(f"\n(3) summary (landscape: defaults {default_truth:.1f} req/s, best {best_launch.label()} "
          f"{best_truth:.1f} = {best_truth / default_truth:.2f}x)")  # fmt: skip
    print(f"    {'study':<62} {'launches':>8} {'best/base':>9} {'to ' + str(RATIO) + 'x':>7} {'truth/def':>9} "
          f"{'of best':>7} {'cert/truth':>10}  error")  # fmt: skip
    for r in rows:
        print(f"    {r['label']:<62} {r['launches']:>8} {_fmt(r.get('ratio')):>9} {_fmt(r['reach'], 'd'):>7} "
              f"{_fmt(r.get('truth_ratio')):>9} {_fmt(r.get('of_best')):>7} {_fmt(r.get('cert')):>10}  "
              f"{r['error'] or ''}")  # fmt: skip
    print(f"    ({time.time() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
