"""Helpers for stand-in tests: start one through the launcher, drive a small load."""

from __future__ import annotations

import base64
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from servetune.launch import LaunchOptions, ServerHandle, start_server

STANDIN_CMD = [sys.executable, "-m", "servetune.testing.standin"]


@contextlib.contextmanager
def standin(
    run_dir: Path, *flags: str, knobs: dict[str, object] | None = None, env: dict[str, str] | None = None
) -> Iterator[ServerHandle]:
    """A running stand-in with `flags`; knobs become SERVETUNE_STANDIN_* env vars."""
    extra = {f"SERVETUNE_STANDIN_{k}": str(v) for k, v in (knobs or {}).items()}
    opts = LaunchOptions(
        sglang_cmd=STANDIN_CMD,
        run_dir=run_dir,
        startup_timeout_s=20,
        stop_grace_s=3,
        wait_gpu_release=False,
        extra_env=extra,
    )
    with start_server(["--model-path", "standin/model", *flags], env or {}, {}, opts) as server:
        yield server


def image_url(i: int, size: int = 60_000) -> str:
    """A distinct data URL (payload bytes are not a real image; the stand-in only hashes and sizes it)."""
    payload = (f"{i:08d}".encode() * (size // 8 + 1))[:size]
    return "data:image/jpeg;base64," + base64.b64encode(payload).decode()


def drive(
    url: str, n: int, concurrency: int, max_tokens: int = 32, images: list[str] | None = None
) -> dict[str, float]:
    """Send n streamed chat requests, `concurrency` at a time; request throughput, mean TTFT (s) and how
    many streamed their first token (`served`)."""
    import httpx

    client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=concurrency * 2))

    def one(i: int) -> float:
        content: list[dict] = [{"type": "text", "text": "word " * 32}]
        if images:
            content.append({"type": "image_url", "image_url": {"url": images[i % len(images)]}})
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "stream": True}
        t0 = time.perf_counter()
        ttft = None
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
            for line in resp.iter_lines():
                if ttft is None and line.startswith("data: {"):
                    ttft = time.perf_counter() - t0
        return ttft or 0.0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        ttfts = list(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    client.close()
    return {"throughput": n / wall, "mean_ttft": sum(ttfts) / n, "wall": wall, "served": sum(1 for t in ttfts if t)}


def cpu_count() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0))
