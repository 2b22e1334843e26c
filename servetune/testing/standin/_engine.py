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
LOG_INTERVAL_ENV = "SERVETUNE_STANDIN_LOG_INTERVAL_S"
DEFAULT_LOG_INTERVAL_S = 0.5
"""Real seconds between two `Decode batch` lines at most (`LOG_INTERVAL_ENV`; 0 = none)."""

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
    """Admission queue, running batch and timed token emission; thread-safe.

    With `log` (e.g. `_server.log`), it logs SGLang 0.5.17's scheduler lines through it: a
    `Prefill batch, ...` line as each request's prefill starts and, while requests decode, a
    `Decode batch, ...` line at most every `$SERVETUNE_STANDIN_LOG_INTERVAL_S` real seconds (default
    0.5; 0 = none), written from the decode path when a chunk is done (the package docstring).
    Lines are composed under the engine's lock and written outside it, one at a time.
    """

    def __init__(
        self,
        resolved: dict[str, Any],
        knobs: Knobs,
        env: dict[str, str] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
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
        self._log = log
        self.log_interval_s = _log_interval(env)
        self._log_lock = threading.Lock()
        self._gen_tokens = 0
        self._gen_since = time.monotonic()
        self._front = threading.Event()
        self._front.set()
        if knobs.frontend_pause is not None:
            threading.Thread(target=self._pause_front, args=knobs.frontend_pause, daemon=True).start()

    def _pause_front(self, every: float, seconds: float) -> None:
        """`$SERVETUNE_STANDIN_FRONTEND_PAUSE`: once every `every` real seconds, hold each new request for
        `seconds` before the scheduler sees it (no prefill line, no queue), as a pause of SGLang's
        HTTP/tokenizer process does; the running batch decodes on."""
        while True:
            time.sleep(every - seconds)
            self._front.clear()
            time.sleep(seconds)
            self._front.set()

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

    def _usage(self) -> float:
        return self._kv_used / self.capacity if self.capacity > 0 else 0.0

    def _prefill_line(self, tokens: int, prefill_ms: float) -> str:
        """SGLang 0.5.17's prefill line for one request (the caller holds the lock)."""
        rate = tokens * 1000.0 / prefill_ms if prefill_ms > 0 else 0.0
        return (
            f"Prefill batch, #new-seq: 1, #new-token: {tokens}, #cached-token: 0, token usage: {self._usage():.2f}, "
            f"#running-req: {self._decoding}, #queue-req: {len(self._queue)}, #pending-token: 0, cuda graph: False, "
            f"input throughput (token/s): {rate:.2f}"
        )

    def _decode_line(self, gen_throughput: float) -> str:
        """SGLang 0.5.17's decode line for the running batch (the caller holds the lock)."""
        running = self._decoding
        return (
            f"Decode batch, #running-req: {running}, #token: {self._kv_used}, token usage: {self._usage():.2f}, "
            f"cuda graph: {running <= self.graph_bs}, gen throughput (token/s): {gen_throughput:.2f}, "
            f"#queue-req: {len(self._queue)}"
        )

    def _emit(self, line: str | None) -> None:
        if line is None or self._log is None:
            return
        try:
            with self._log_lock:
                self._log(line)
        except (OSError, ValueError):
            pass

    def _emitted(self, n: int) -> None:
        """Count `n` output tokens; log a decode line once the interval has passed since the last."""
        if self._log is None or self.log_interval_s <= 0:
            return
        with self._cond:
            self._gen_tokens += n
            now = time.monotonic()
            elapsed = now - self._gen_since
            if elapsed < self.log_interval_s:
                return
            line = self._decode_line(self._gen_tokens / elapsed)
            self._gen_tokens = 0
            self._gen_since = now
        self._emit(line)

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
        self._front.wait()
        tokens = req.prompt_tokens + IMAGE_TOKENS * len(req.images)
        need = tokens + req.max_tokens
        index = self._admit(need)
        rng = random.Random(self.knobs.seed * 1_000_003 + index) if self.knobs.noise > 0 else None
        try:
            self._wait_prefill_turn()
            prefill_ms = _rules.prefill_ms(tokens, self.chunk) * self.slowdown
            with self._cond:
                running = self._running
            # images are processed first, one at a time (SGLang's tokenizer manager, on the host): they
            # delay this request's first token but not the running batch's decode
            for url in req.images:
                cost = self._image_ms(url, running)
                with self._lane:
                    self._sleep(cost, rng)
            with self._cond:
                self._prefilling += tokens
                line = self._prefill_line(tokens, prefill_ms) if self._log is not None else None
            self._emit(line)
            try:
                self._sleep(prefill_ms, rng)
            finally:
                with self._cond:
                    self._prefilling -= tokens
                    if self._decoding == 0:
                        self._gen_tokens, self._gen_since = 0, time.monotonic()
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
            self._emitted(first)
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
            self._emitted(n)
            yield n


def _log_interval(env: Any) -> float:
    """`$SERVETUNE_STANDIN_LOG_INTERVAL_S` (default 0.5; 0 or less = no decode lines); a malformed
    value is a usage error naming the variable, as `Knobs.from_env` makes it."""
    raw = env.get(LOG_INTERVAL_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_LOG_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"standin: {LOG_INTERVAL_ENV}={raw!r} is not a valid float") from None
    return value if value > 0 else 0.0


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
