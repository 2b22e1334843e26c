"""The stand-in's landscape rules, in one place: the engine (`_engine.Engine`, real threads that
sleep) and the model (`_model.expected_throughput`, simulated time) both call these, so the
landscape a benchmark judges is the one the server serves. Times are simulated milliseconds.
Memory rules (KV capacity, OOM thresholds) live with the flags in `_config`.
"""

from __future__ import annotations

import math
from typing import Any

from servetune.testing.standin._config import OOM_UNDER_LOAD_BATCH, OOM_UNDER_LOAD_FRACTION

DECODE_BASE_MS = 8.0
DECODE_PER_RUNNING_MS = 0.1
EAGER_PENALTY_MS = 8.0
"""Added to a decode step when the running batch is wider than `cuda_graph_max_bs_decode`."""
MIXED_PREFILL_BASE_MS = 3.0
MIXED_PREFILL_PER_TOKEN_MS = 0.002
PREFILL_PER_CHUNK_MS = 1.5
PREFILL_PER_TOKEN_MS = 0.01
SLOW_MM_ATTENTION = {"sdpa": 20.0}
"""`mm_attention_backend` values that multiply prefill and decode times: on the H200, SGLang with
`--mm-attention-backend sdpa` served 18x fewer requests per second (1.05 against 19.5 req/s), so
the stand-in has a planted config about 20x slower than the rest (the runaway guard's test case)."""


def slowdown(resolved: dict[str, Any]) -> float:
    """How many times slower than its landscape this config runs (`SLOW_MM_ATTENTION`, else 1)."""
    return SLOW_MM_ATTENTION.get(str(resolved.get("mm_attention_backend")), 1.0)


def effective_chunk(resolved: dict[str, Any]) -> int:
    """`chunked_prefill_size`, with <= 0 (chunking off) as one unbounded chunk."""
    chunk = int(resolved["chunked_prefill_size"])
    return chunk if chunk > 0 else 1 << 30


def decode_step_ms(batch: int, graph_bs: int, chunk: int, prefill_tokens: int) -> float:
    """One decode step of a running batch of `batch`, while `prefill_tokens` are being prefilled."""
    step = DECODE_BASE_MS + DECODE_PER_RUNNING_MS * batch
    if batch > graph_bs:
        step += EAGER_PENALTY_MS
    if prefill_tokens:
        step += MIXED_PREFILL_BASE_MS + MIXED_PREFILL_PER_TOKEN_MS * min(chunk, prefill_tokens)
    return step


def prefill_ms(tokens: int, chunk: int) -> float:
    """Prefill of `tokens` prompt tokens in chunks of `chunk`."""
    return PREFILL_PER_CHUNK_MS * math.ceil(tokens / chunk) + PREFILL_PER_TOKEN_MS * tokens


def admits(*, kv_used: int, need: int, capacity: int, running: int, max_running: int) -> bool:
    """The head of the FCFS queue runs when a slot is free and its tokens fit the KV pool (a
    lone request always fits)."""
    fits = kv_used + need <= capacity or running == 0
    return running < max_running and fits


def ooms_under_load(resolved: dict[str, Any]) -> bool:
    """`mem_fraction_static` high enough that a full batch (`OOM_UNDER_LOAD_BATCH`) runs out of memory."""
    return float(resolved["mem_fraction_static"]) >= OOM_UNDER_LOAD_FRACTION


def oom_now(oom_under_load: bool, running: int) -> bool:
    """True when a server that `ooms_under_load` reaches the fatal batch."""
    return oom_under_load and running >= OOM_UNDER_LOAD_BATCH


def prefill_must_wait(*, interval: int, last_prefill_step: int | None, decoding: int, steps: int) -> bool:
    """With a prefill/decode interval k > 0, a prefill waits until k decode steps have passed
    since the previous prefill started (while anything decodes)."""
    return interval > 0 and last_prefill_step is not None and decoding > 0 and steps - last_prefill_step < interval


def tokens_per_chunk(stream_interval: int, max_tokens: int, max_chunks: int) -> int:
    """Decode tokens per streamed chunk: `stream_interval`, grouped to at most `max_chunks` chunks."""
    return max(int(stream_interval), math.ceil(max_tokens / max_chunks))
