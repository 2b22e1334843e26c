"""The stand-in's toy engine: admission, prefill, decode and failure injection (see the package docstring)."""

from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from servetune.testing.standin import _rules
from servetune.testing.standin._config import Knobs, kv_capacity

IMAGE_TOKENS = 1000
MEDIA_CACHE_ENTRIES = 512

OOM_TRACE = """Traceback (most recent call last):
  File "/sglang/srt/managers/scheduler.py", line 2731, in run_scheduler_process
  File "/sglang/srt/model_executor/model_runner.py", line 1873, in forward
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib:.2f} GiB. \
GPU 0 has a total capacity of 139.81 GiB of which 312.00 MiB is free. \
Including non-PyTorch memory, this process has 139.49 GiB memory in use.
[standin] scheduler died: torch.OutOfMemoryError; exiting
"""

CRASH_TRACE = """Traceback (most recent call last):
  File "/sglang/srt/managers/scheduler.py", line 2731, in run_scheduler_process
RuntimeError: stand-in scheduler crash injected after {n} requests (SERVETUNE_STANDIN_CRASH_AFTER)
[standin] Received sigquit from a child process. It usually means the child failed.
"""


def die(message: str, code: int = 1) -> None:
    """Write `message` to the log and exit at once, as a crashed SGLang does (children are left behind)."""
    sys.stderr.write(message)
    sys.stderr.flush()
    os._exit(code)


@dataclass
class Request:
    """One generation request as the engine sees it."""

    prompt_tokens: int
    max_tokens: int
    images: list[str]


class Engine:
    """Admission queue, running batch and timed token emission; thread-safe."""

    def __init__(self, resolved: dict[str, Any], knobs: Knobs, env: dict[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.cfg = resolved
        self.knobs = knobs
        self.capacity = kv_capacity(resolved)
        self.max_running = int(resolved["max_running_requests"])
        self.graph_bs = int(resolved["cuda_graph_max_bs_decode"])
        self.chunk = _rules.effective_chunk(resolved)
        self.transport = resolved["mm_feature_transport"]
        self.interval = int(resolved["prefill_decode_interval"] or 0)
        self.media_cache_on = self.transport == "cpu" and env.get("SGLANG_VLM_CACHE_SIZE_MB", "") != "0"
        self.ipc_pool_mb = _int_or(env.get("SGLANG_MM_FEATURE_CACHE_MB"), 0)
        self.oom_under_load = _rules.ooms_under_load(resolved)
        self.slowdown = _rules.slowdown(resolved)
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._ticket = 0
        self._running = 0
        self._decoding = 0
        self._prefilling = 0
        self._kv_used = 0
        self._served = 0
        self._steps = 0
        self._last_prefill_step: int | None = None
        self._media: OrderedDict[str, None] = OrderedDict()
        self._lane = threading.Lock()
        self._run_factor = random.Random(knobs.seed).lognormvariate(0.0, knobs.noise / 2) if knobs.noise > 0 else 1.0

    def _sleep(self, sim_ms: float, rng: random.Random | None) -> None:
        factor = self._run_factor
        if rng is not None and self.knobs.noise > 0:
            factor *= rng.lognormvariate(0.0, self.knobs.noise)
        time.sleep(max(0.0, sim_ms * factor * self.knobs.time_scale / 1000.0))

    def stats(self) -> dict[str, int]:
        """Counters for `/server_info`."""
        with self._cond:
            return {
                "running": self._running,
                "queued": len(self._queue),
                "served": self._served,
                "kv_used": self._kv_used,
            }

    def flush(self) -> None:
        """Drop the media cache (`/flush_cache`)."""
        with self._cond:
            self._media.clear()

    def _admit(self, need: int) -> int:
        with self._cond:
            ticket = self._ticket
            self._ticket += 1
            self._queue.append(ticket)
            while True:
                if self._queue[0] == ticket and _rules.admits(
                    kv_used=self._kv_used,
                    need=need,
                    capacity=self.capacity,
                    running=self._running,
                    max_running=self.max_running,
                ):
                    break
                self._cond.wait()
            self._queue.popleft()
            self._running += 1
            self._kv_used += need
            self._served += 1
            served = self._served
            running = self._running
            self._cond.notify_all()
        k = self.knobs
        if k.crash_after is not None and served > k.crash_after:
            die(CRASH_TRACE.format(n=k.crash_after))
        if k.oom_after is not None and served > k.oom_after:
            die(OOM_TRACE.format(gib=2.0))
        if _rules.oom_now(self.oom_under_load, running):
            die(OOM_TRACE.format(gib=1.25))
        return served

    def _release(self, need: int) -> None:
        with self._cond:
            self._running -= 1
            self._kv_used -= need
            self._cond.notify_all()

    def _image_ms(self, url: str, running: int) -> float:
        size_kb = len(url) * 3 / 4 / 1024
        if self.transport == "cpu":
            if self.media_cache_on:
                key = hashlib.blake2b(url.encode(), digest_size=16).hexdigest()
                with self._cond:
                    hit = key in self._media
                    self._media[key] = None
                    self._media.move_to_end(key)
                    while len(self._media) > MEDIA_CACHE_ENTRIES:
                        self._media.popitem(last=False)
                if hit:
                    return 1.0
            return 20.0 + 4.0 * size_kb / 100.0
        if self.transport == "cuda_ipc":
            congestion = 5.0 if running >= 48 and self.ipc_pool_mb < 1024 else 0.0
            return 5.0 + size_kb / 100.0 + congestion
        return 8.0 + size_kb / 100.0

    def _decode_step_ms(self, batch: int, prefill_tokens: int) -> float:
        return _rules.decode_step_ms(batch, self.graph_bs, self.chunk, prefill_tokens) * self.slowdown

    def _wait_prefill_turn(self) -> None:
        if self.interval <= 0:
            return
        with self._cond:
            while _rules.prefill_must_wait(
                interval=self.interval,
                last_prefill_step=self._last_prefill_step,
                decoding=self._decoding,
                steps=self._steps,
            ):
                self._cond.wait(timeout=0.05)
            self._last_prefill_step = self._steps

    def generate(self, req: Request) -> Iterator[int]:
        """Run one request; yields the number of tokens of each chunk as it is "decoded"."""
        tokens = req.prompt_tokens + IMAGE_TOKENS * len(req.images)
        need = tokens + req.max_tokens
        index = self._admit(need)
        rng = random.Random(self.knobs.seed * 1_000_003 + index) if self.knobs.noise > 0 else None
        try:
            self._wait_prefill_turn()
            with self._cond:
                self._prefilling += tokens
                running = self._running
            try:
                for url in req.images:
                    cost = self._image_ms(url, running)
                    with self._lane:
                        self._sleep(cost, rng)
                self._sleep(_rules.prefill_ms(tokens, self.chunk) * self.slowdown, rng)
            finally:
                with self._cond:
                    self._prefilling -= tokens
                    self._decoding += 1
            yield from self._decode(req, rng)
        finally:
            with self._cond:
                self._decoding -= 1
            self._release(need)

    def _decode(self, req: Request, rng: random.Random | None) -> Iterator[int]:
        per_chunk = _rules.tokens_per_chunk(self.cfg["stream_interval"], req.max_tokens, self.knobs.max_chunks)
        first = min(1, req.max_tokens)
        if first:
            yield first
        left = req.max_tokens - first
        while left > 0:
            n = min(per_chunk, left)
            with self._cond:
                step = self._decode_step_ms(self._decoding, self._prefilling)
                self._steps += n
                self._cond.notify_all()
            self._sleep(step * n, rng)
            left -= n
            yield n


def _int_or(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def stream_words(counts: Iterator[int], on_chunk: Callable[[str, int], None]) -> int:
    """Turn chunk token counts into filler text; returns the total tokens produced."""
    total = 0
    for n in counts:
        words = " ".join(f"tok{(total + i) % 1000}" for i in range(n))
        total += n
        on_chunk(words, n)
    return total
