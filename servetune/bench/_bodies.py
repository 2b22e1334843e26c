"""Request bodies for the builtin client: synthetic prompts and images, or a trace's requests,
built in worker threads ahead of the send loop (`Bodies.build`)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from servetune.bench.prompts import make_prompt, sample_length
from servetune.schema.workload import Workload

__all__ = ["WARMUP_OUTPUT_TOKENS", "Bodies"]

WARMUP_OUTPUT_TOKENS = 32
_PLACEHOLDER = "@@servetune-image-{}@@"


class Bodies:
    """Builds request bodies (JSON bytes) one at a time, as they are sent: nothing is kept per request
    (lengths, prompts and images are derived from the index), so memory does not grow with the run's
    request count; thread-safe, images cached only for a pool."""

    def __init__(
        self,
        workload: Workload,
        model: str,
        measured: int,
        warmup: int,
        nonce: bytes | None,
        tokens_per_word: float = 1.0,
    ) -> None:
        from servetune.bench.images import ImageFactory

        self.workload, self.model, self.tokens_per_word = workload, model, tokens_per_word
        self.images = workload.images
        self.factory = None
        self._pool: dict[int, bytes] = {}
        self._lock = threading.Lock()
        if self.images is not None:
            width, height = self.images.size()
            if self.images.reuse == "pool":
                nonce = hashlib.sha256(f"servetune-pool:{workload.seed}".encode()).digest()[:16]
            self.factory = ImageFactory(width, height, self.images.format, nonce=nonce)
        self.prep_s = 0.0
        self.trace = None
        if workload.trace is not None:
            from servetune.bench.trace import load_trace

            self.trace = load_trace(workload.trace.path, workload.trace.format)
        self.warmup = warmup
        self._times = [r.arrival_s or 0.0 for r in self.trace] if self.trace is not None else []

    def input_len(self, index: int) -> int:
        """Request `index`'s input length in tokens (`prompts.sample_length`: drawn on demand)."""
        w = self.workload
        return sample_length(w.input_tokens, w.range_ratio, w.seed, index, "input")

    def output_len(self, index: int) -> int:
        """Request `index`'s output length in tokens."""
        w = self.workload
        return sample_length(w.output_tokens, w.range_ratio, w.seed, index, "output")

    def arrival_s(self, index: int) -> float | None:
        """With `replay: recorded`, when measured request `index` is sent (seconds from the first);
        a trace shorter than the run repeats, each pass one mean gap after the previous one."""
        spec = self.workload.trace
        if self.trace is None or spec is None or spec.replay != "recorded":
            return None
        n = len(self.trace)
        times = self._times
        period = times[-1] - times[0] + ((times[-1] - times[0]) / (n - 1) if n > 1 else 1.0)

        def at(k: int) -> float:
            return (k // n) * period + times[k % n] - times[0]

        return (at(self.warmup + index) - at(self.warmup)) / spec.time_scale

    def _trace_body(self, index: int, warmup: bool) -> tuple[dict[str, Any], int, int, int]:
        from servetune.bench.trace import image_data_url

        entry = self.trace[index % len(self.trace)]
        messages = json.loads(json.dumps(entry.messages))
        if entry.images:
            last = next((m for m in reversed(messages) if m.get("role") == "user"), messages[-1])
            text = last.get("content")
            parts = [{"type": "image_url", "image_url": {"url": image_data_url(i)}} for i in entry.images]
            if isinstance(text, list):
                parts += text
            elif text:
                parts.append({"type": "text", "text": text})
            last["content"] = parts
        wanted = entry.output_tokens or self.workload.output_tokens
        max_tokens = min(wanted, WARMUP_OUTPUT_TOKENS) if warmup else wanted
        payload = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        return payload, len(entry.images), max_tokens, max(1, round(entry.prompt_words * self.tokens_per_word))

    def _image_b64(self, index: int) -> bytes:
        if self.images.reuse == "pool":
            key = index % self.images.pool_size
            with self._lock:
                cached = self._pool.get(key)
            if cached is None:
                cached = self.factory.base64(key)
                with self._lock:
                    self._pool[key] = cached
            return cached
        return self.factory.base64(index)

    def build(self, index: int, warmup: bool) -> tuple[bytes, int, int, int]:
        """(body, images, expected output tokens, estimated prompt tokens) of request `index`."""
        started = time.perf_counter()
        if self.trace is not None:
            payload, count, max_tokens, estimate = self._trace_body(index, warmup)
            payload.update(temperature=0.0, stream=True, stream_options={"include_usage": True}, ignore_eos=True)
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            with self._lock:
                self.prep_s += time.perf_counter() - started
            return body, count, max_tokens, estimate
        input_len, output_len = self.input_len(index), self.output_len(index)
        text = make_prompt(self.workload.seed, index, max(1, round(input_len / self.tokens_per_word)))
        max_tokens = min(output_len, WARMUP_OUTPUT_TOKENS) if warmup else output_len
        count = self.images.per_request if self.images is not None else 0
        if count:
            content: Any = [{"type": "image_url", "image_url": {"url": _PLACEHOLDER.format(k)}} for k in range(count)]
            content.append({"type": "text", "text": text})
        else:
            content = text
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        for k in range(count):
            url = b"data:" + self.factory.mime.encode() + b";base64," + self._image_b64(index * count + k)
            body = body.replace(_PLACEHOLDER.format(k).encode(), url, 1)
        elapsed = time.perf_counter() - started
        with self._lock:
            self.prep_s += elapsed
        return body, count, max_tokens, input_len
