"""The stand-in's flags (a subset of SGLang's), its env knobs and its resolution of unset fields."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

KV_BASE_FRACTION = 0.45
KV_TOKENS_PER_FRACTION = 400_000
KV_TOKENS_PER_GRAPH_BS = 100
OOM_AT_START_FRACTION = 0.92
OOM_UNDER_LOAD_FRACTION = 0.90
OOM_UNDER_LOAD_BATCH = 128


def _bool_flag(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(name, action="store_true", default=False)


def build_parser() -> argparse.ArgumentParser:
    """SGLang's flags that the stand-in models; unknown flags are accepted and ignored."""
    p = argparse.ArgumentParser(
        prog="servetune.testing.standin", description="stand-in for sglang.launch_server", allow_abbrev=False
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--schedule-policy", default="fcfs")
    p.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
    p.add_argument("--mm-feature-transport", choices=["cpu", "cuda_ipc", "cuda_vmm"], default=None)
    p.add_argument("--prefill-decode-interval", type=int, default=None)
    p.add_argument("--radix-eviction-policy", default="lru")
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--decode-attention-backend", default=None)
    p.add_argument("--mm-attention-backend", default=None)
    p.add_argument("--mm-preprocess-cache-size-mb", type=int, default=None)
    p.add_argument("--load-format", default="auto")
    _bool_flag(p, "--disable-radix-cache")
    _bool_flag(p, "--skip-server-warmup")
    return p


@dataclass(frozen=True)
class Knobs:
    """Behaviour knobs read from `SERVETUNE_STANDIN_*` environment variables."""

    start_delay_s: float = 0.0
    warmup_s: float = 0.0
    oom_at_start: bool = False
    crash_after: int | None = None
    oom_after: int | None = None
    hang: bool = False
    ignore_sigterm: bool = False
    children: int = 0
    time_scale: float = 0.25
    noise: float = 0.0
    seed: int = 0
    max_chunks: int = 16
    frontend_pause: tuple[float, float] | None = None
    """(every, seconds), real seconds: the front end holds every new request for `seconds` once per `every`."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Knobs:
        """Read the knobs; a malformed value is a usage error naming the variable."""
        env = os.environ if env is None else env

        def get(name: str, conv, default):
            raw = env.get(f"SERVETUNE_STANDIN_{name}")
            if raw is None or raw == "":
                return default
            try:
                return conv(raw)
            except ValueError:
                raise SystemExit(f"standin: SERVETUNE_STANDIN_{name}={raw!r} is not a valid {conv.__name__}") from None

        def flag(raw: str) -> bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")

        def pause(raw: str) -> tuple[float, float]:
            every, _, seconds = raw.partition(":")
            if not seconds or not 0 < float(seconds) < float(every):
                raise ValueError(raw)
            return float(every), float(seconds)

        pause.__name__ = "EVERY_S:SECONDS pair with 0 < SECONDS < EVERY_S"

        return cls(
            start_delay_s=get("START_DELAY_S", float, 0.0),
            warmup_s=get("WARMUP_S", float, 0.0),
            oom_at_start=get("OOM_AT_START", flag, False),
            crash_after=get("CRASH_AFTER", int, None),
            oom_after=get("OOM_AFTER", int, None),
            hang=get("HANG", flag, False),
            ignore_sigterm=get("IGNORE_SIGTERM", flag, False),
            children=get("CHILDREN", int, 0),
            time_scale=get("TIME_SCALE", float, 0.25),
            noise=get("NOISE", float, 0.0),
            seed=get("SEED", int, 0),
            max_chunks=max(1, get("MAX_CHUNKS", int, 16)),
            frontend_pause=get("FRONTEND_PAUSE", pause, None),
        )


def resolve(ns: argparse.Namespace) -> dict[str, Any]:
    """SGLang-like `resolved_dict()`: requested values plus the stand-in's resolution of unset ones."""
    d = dict(vars(ns))
    d["served_model_name"] = d["served_model_name"] or d["model_path"]
    d["tokenizer_path"] = d["tokenizer_path"] or d["model_path"]
    if d["mem_fraction_static"] is None:
        d["mem_fraction_static"] = 0.80
    if d["chunked_prefill_size"] is None:
        d["chunked_prefill_size"] = 8192
    if d["cuda_graph_max_bs_decode"] is None:
        d["cuda_graph_max_bs_decode"] = 32
    if d["mm_feature_transport"] is None:
        d["mm_feature_transport"] = "cpu"
    if d["prefill_decode_interval"] is None:
        d["prefill_decode_interval"] = 0
    if d["mm_preprocess_cache_size_mb"] is None:
        d["mm_preprocess_cache_size_mb"] = 256
    if d["max_running_requests"] is None:
        d["max_running_requests"] = max(1, min(4096, kv_capacity(d) // 512))
    d["cuda_graph_max_bs_decode"] = min(d["cuda_graph_max_bs_decode"], d["max_running_requests"])
    d["stream_interval"] = max(1, d["stream_interval"])
    return d


def kv_capacity(resolved: dict[str, Any]) -> int:
    """KV pool size in tokens: grows with `mem_fraction_static`, shrinks with the decode graph width."""
    frac = resolved["mem_fraction_static"] - KV_BASE_FRACTION
    return max(
        0, int(frac * KV_TOKENS_PER_FRACTION) - KV_TOKENS_PER_GRAPH_BS * int(resolved["cuda_graph_max_bs_decode"])
    )
