"""A stand-in for an SGLang server, for tests and for exercising the launcher and the tuner.

    python -m servetune.testing.standin --model-path any/model [SGLang flags...] --host 127.0.0.1 --port 30000

**What it stands for.** The process boundary and HTTP surface of `python -m
sglang.launch_server`: it takes the same argv (the flags it models are parsed, every other flag
is accepted and ignored), prints a log, binds `--host/--port` only once "loaded", answers the
endpoints the launcher and the benchmark clients use, streams OpenAI chat completions over a
real socket, shuts down on SIGTERM, and reports its resolved configuration on `/server_info`.
Its latency and throughput depend on its flags (the landscape below), so a tuner has something
real to climb, in seconds instead of GPU-minutes.

**What it does not stand for.** No model, no tokenizer, no GPU: output text is filler words,
token counts are word counts (each image counts 1000 tokens), the landscape is a documented
toy model and not a prediction of SGLang's performance, and its resolution of unset fields
imitates SGLang's shape, not its values. Passing a test against it shows that orchestration,
failure handling and the search loop work; it shows nothing about SGLang's speed.

Endpoints: `GET /health`, `/health_generate`, `/ready` (503 until ready or while hanging),
`/model_info` (+ deprecated `/get_model_info`), `/server_info` (+ `/get_server_info`),
`/v1/models`, `GET|POST /flush_cache`; `POST /v1/chat/completions` (OpenAI chat, `stream`
with SSE chunks, `[DONE]` and usage, `image_url` content parts), `POST /v1/completions`,
`POST /generate` (SGLang native, text only).

`/server_info` holds SGLang-like `resolved_dict()` fields plus `launch_command`, `version`
(`"standin-<servetune version>"`), `pid`, `startup_time` and a `standin` block (knobs in
effect, KV capacity, start-up delay). Resolution of unset fields:

| field | when unset | deliberate change (so a requested-vs-effective diff finds it) |
|---|---|---|
| `mem_fraction_static` | 0.80 | |
| `chunked_prefill_size` | 8192 | |
| `cuda_graph_max_bs_decode` | 32 | capped to `max_running_requests` |
| `max_running_requests` | KV capacity // 512, at most 4096 | |
| `mm_feature_transport` | `"cpu"` | |
| `prefill_decode_interval` | 0 | |
| `stream_interval` | 1 | |

**Behaviour knobs** (environment variables; all optional):

| variable | effect |
|---|---|
| `SERVETUNE_STANDIN_START_DELAY_S` | seconds to "load the model" before binding the port (default 0) |
| `SERVETUNE_STANDIN_WARMUP_S` | seconds the port is bound but health answers 503 (default 0) |
| `SERVETUNE_STANDIN_OOM_AT_START=1` | after the delay, log a CUDA OOM traceback and exit 1 |
| `SERVETUNE_STANDIN_CRASH_AFTER=N` | after N generation requests, log a scheduler crash and exit 1 |
| `SERVETUNE_STANDIN_OOM_AFTER=N` | after N generation requests, log a CUDA OOM and exit 1 |
| `SERVETUNE_STANDIN_HANG=1` | bind the port but never become healthy |
| `SERVETUNE_STANDIN_IGNORE_SIGTERM=1` | ignore SIGTERM (it and its children need SIGKILL) |
| `SERVETUNE_STANDIN_CHILDREN=N` | start N idle child processes (as SGLang starts schedulers) |
| `SERVETUNE_STANDIN_TIME_SCALE` | real seconds per simulated second (default 0.25) |
| `SERVETUNE_STANDIN_NOISE` | relative sigma of log-normal noise on service times (default 0) |
| `SERVETUNE_STANDIN_SEED` | seed of that noise (default 0) |
| `SERVETUNE_STANDIN_MAX_CHUNKS` | most SSE chunks per response; tokens are grouped (default 16) |
| `SERVETUNE_STANDIN_LOG_INTERVAL_S` | real seconds between `Decode batch` log lines at most (default 0.5; 0 = none) |
| `SERVETUNE_STANDIN_FRONTEND_PAUSE` | `EVERY_S:SECONDS`: hold new requests SECONDS, once every EVERY_S real s (off) |

**Front-end pauses.** With `SERVETUNE_STANDIN_FRONTEND_PAUSE`, a new request waits out the pause before the
engine admits it (no prefill line, no queue count), while the running batch decodes on: what a pause of SGLang's
HTTP/tokenizer process does to its scheduler (`servetune.bench.stalls`, which reads them back).

**Scheduler log lines.** Like SGLang's scheduler, the engine logs its batches, in SGLang 0.5.17's
format (what `servetune.launch.parse_scheduler_line` reads), one line per request's prefill as it
starts and, while requests decode, a decode line at most every `LOG_INTERVAL_S`, written when a
decoded chunk finds the interval passed (so not during a long idle or a single slow chunk):

    [2026-12-01 22:40:15] Prefill batch, #new-seq: 1, #new-token: N, #cached-token: 0, token usage: U,
        #running-req: R, #queue-req: Q, #pending-token: 0, cuda graph: False, input throughput (token/s): X
    [2026-12-01 22:40:15] Decode batch, #running-req: R, #token: T, token usage: U, cuda graph: B,
        gen throughput (token/s): G, #queue-req: Q

(one line each; stamped to the millisecond, `[... 22:40:15.120]`, with `SGLANG_LOG_MS` as SGLang does, which
`servetune launch` sets), where N is the request's prompt tokens (images included), T the KV tokens in use
(reserved at admission: input + `max_tokens` of each running request), U = T / KV capacity (2
decimals), R the requests decoding, Q the requests queued for admission, X = N per simulated second
of its prefill, B = R <= `cuda_graph_max_bs_decode`, and G the output tokens emitted since the
previous decode line (or since decoding began after an idle spell) per real second. Unlike SGLang
there are no batched prefills (`#new-seq` is always 1), no prefix cache hits and no
`decode_log_interval`: the interval is in seconds, not decode steps.

**The landscape** (simulated milliseconds; real time = simulated × TIME_SCALE):

- *Admission.* FCFS queue; a request runs when fewer than `max_running_requests` run and its
  tokens (input + output) fit the KV pool: `(mem_fraction_static - 0.45) * 400000 -
  100 * cuda_graph_max_bs_decode` tokens (a wider decode graph costs memory).
- *Memory.* `mem_fraction_static > 0.92` dies at start with CUDA OOM; `>= 0.90` dies with CUDA
  OOM under load once 128 requests run at once.
- *Prefill.* `1.5 * ceil(tokens / chunked_prefill_size) + 0.01 * tokens`. Images first pass
  one at a time through a single feature-transport lane (serialized, as the tokenizer-to-
  scheduler hand-off is): `cpu` 20 + 4 per 100 KB of payload, `cuda_ipc` 5 + 1 per 100 KB (5
  more while 48+ requests run unless `SGLANG_MM_FEATURE_CACHE_MB` >= 1024), `cuda_vmm` 8 + 1 per
  100 KB. With `cpu` transport a repeated image costs 1 (media cache; off when
  `SGLANG_VLM_CACHE_SIZE_MB=0`).
- *Prefill/decode interval.* With interval k > 0, a prefill waits until k decode steps have
  passed since the previous prefill started (higher TTFT, fewer interrupted decode steps).
- *Decode step* for a running batch b: `8 + 0.1 * b`, plus 8 when b exceeds
  `cuda_graph_max_bs_decode` (eager launch), plus `3 + 0.002 * min(chunked_prefill_size,
  prefill tokens)` while a prefill runs.
- *A planted slow config.* `--mm-attention-backend sdpa` multiplies prefill and decode times by
  20 (`_rules.SLOW_MM_ATTENTION`), as that flag made SGLang 18x slower on the H200: the case
  the runaway guard (`too_slow`) exists for.

The defaults are therefore not the optimum: at 64 concurrent requests the decode graph (32)
is too narrow, single-use images prefer `cuda_ipc`, repeated images prefer `cpu` with the
media cache, and a prefill/decode interval trades TTFT for throughput.

**The landscape as a function.** `expected_throughput(argv, concurrency=, input_tokens=,
output_tokens=)` replays these rules (the engine's own constants and resolution) in simulated
time, deterministically, for a closed-loop text load, and returns the steady-window req/s a
launch with `SERVETUNE_STANDIN_NOISE=0` serves, less the HTTP/CPU overhead of a real run
(`servetune.testing.standin._model`). Benchmarks use it to judge a search without launch noise.
"""

from __future__ import annotations

from servetune.testing.standin._model import Expected, expected_throughput

__all__ = ["Expected", "expected_throughput"]
