"""The stand-in's HTTP server (stdlib `ThreadingHTTPServer`, HTTP/1.1, SSE streaming) and its `main()`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from servetune import __version__
from servetune.testing.standin._config import OOM_AT_START_FRACTION, Knobs, build_parser, resolve
from servetune.testing.standin._engine import OOM_TRACE, Engine, Request, die, stream_words

LOG_MS = os.environ.get("SGLANG_LOG_MS", "").lower() in ("true", "1", "yes", "y")
"""Stamp log lines to the millisecond, as SGLang's `configure_logger` does with `SGLANG_LOG_MS`."""


def log(msg: str) -> None:
    """One SGLang-style log line on stderr (`[2026-12-01 22:40:15] msg`, or `[... 22:40:15.120]` with
    `SGLANG_LOG_MS`)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + (f".{int(now % 1 * 1000):03d}" if LOG_MS else "")
    sys.stderr.write(f"[{stamp}] {msg}\n")
    sys.stderr.flush()


class State:
    """What the handlers share: resolved config, engine, status."""

    def __init__(self, resolved: dict[str, Any], knobs: Knobs, argv: list[str], started: float) -> None:
        self.resolved = resolved
        self.knobs = knobs
        self.argv = argv
        self.engine = Engine(resolved, knobs, log=log)
        self.status = "Starting"
        self.started = started
        self.ready_at: float | None = None
        self.children: list[subprocess.Popen] = []

    def server_info(self) -> dict[str, Any]:
        info = dict(self.resolved)
        if info.get("api_key"):
            info["api_key"] = "<redacted>"
        info.update(
            launch_command=" ".join([sys.executable, "-m", "servetune.testing.standin", *self.argv]),
            version=f"standin-{__version__}",
            pid=os.getpid(),
            frontend="python",
            startup_time=(self.ready_at or time.time()) - self.started,
            internal_states=[self.engine.stats()],
            standin={
                "kv_capacity_tokens": self.engine.capacity,
                "slowdown": self.engine.slowdown,
                "start_delay_s": self.knobs.start_delay_s,
                "warmup_s": self.knobs.warmup_s,
                "time_scale": self.knobs.time_scale,
                "noise": self.knobs.noise,
                "seed": self.knobs.seed,
            },
        )
        return info

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.resolved["model_path"],
            "served_model_name": self.resolved["served_model_name"],
            "tokenizer_path": self.resolved["tokenizer_path"],
            "is_generation": True,
            "weight_version": "default",
            "load_format": self.resolved["load_format"],
            "has_image_understanding": True,
            "has_audio_understanding": False,
            "model_type": "standin",
            "architectures": ["StandinForConditionalGeneration"],
        }


def _prompt(messages: list[dict[str, Any]]) -> tuple[int, list[str]]:
    words = 0
    images: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    words += len(str(part.get("text", "")).split())
                elif part.get("type") == "image_url":
                    url = part.get("image_url")
                    images.append(url.get("url", "") if isinstance(url, dict) else str(url))
    return max(1, words), images


class Handler(BaseHTTPRequestHandler):
    """Routes requests to the endpoints; one thread per connection, keep-alive."""

    protocol_version = "HTTP/1.1"
    server_version = "servetune-standin"
    state: State

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send_json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "body is not JSON", "type": "BadRequest"}})
            return None

    def _authorized(self) -> bool:
        key = self.state.resolved.get("api_key")
        if not key or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send_json(401, {"error": {"message": "invalid API key", "type": "Unauthorized"}})
        return False

    def _ready(self) -> bool:
        return self.state.status == "Up"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        state = self.state
        if path in ("/health", "/health_generate", "/ready"):
            if self._ready():
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(503, {"status": state.status})
        elif path in ("/model_info", "/get_model_info"):
            self._send_json(200, state.model_info())
        elif path in ("/server_info", "/get_server_info"):
            self._send_json(200, state.server_info())
        elif path == "/v1/models":
            name = state.resolved["served_model_name"]
            self._send_json(
                200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "standin", "root": name}]}
            )
        elif path == "/flush_cache":
            state.engine.flush()
            self._send_json(200, {"status": "Cache flushed."})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/flush_cache":
            self.do_GET()
            return
        if path not in ("/v1/chat/completions", "/v1/completions", "/generate"):
            self._send_json(404, {"detail": "Not Found"})
            return
        body = self._body()
        if body is None or not self._authorized():
            return
        if not self._ready():
            self._send_json(503, {"error": {"message": "server is not ready", "type": "ServiceUnavailable"}})
            return
        if path == "/generate":
            self._generate(body)
        else:
            self._openai(body, chat=path == "/v1/chat/completions")

    def _openai(self, body: dict[str, Any], *, chat: bool) -> None:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                self._send_json(
                    400, {"error": {"message": "`messages` must be a non-empty list", "type": "BadRequest"}}
                )
                return
            prompt_tokens, images = _prompt(messages)
        else:
            prompt_tokens, images = max(1, len(str(body.get("prompt", "")).split())), []
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        req = Request(prompt_tokens=prompt_tokens, max_tokens=max(1, max_tokens), images=images)
        rid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        model = body.get("model") or self.state.resolved["served_model_name"]
        obj = "chat.completion" if chat else "text_completion"

        def usage(done: int) -> dict[str, int]:
            return {
                "prompt_tokens": req.prompt_tokens + 1000 * len(images),
                "completion_tokens": done,
                "total_tokens": req.prompt_tokens + 1000 * len(images) + done,
            }

        def choice(text: str, finish: str | None, first: bool) -> dict[str, Any]:
            if not chat:
                return {"index": 0, "text": text, "finish_reason": finish}
            delta: dict[str, Any] = {"content": text} if text else {}
            if first:
                delta["role"] = "assistant"
            return {"index": 0, "delta": delta, "finish_reason": finish}

        if not body.get("stream"):
            parts: list[str] = []
            done = stream_words(self.state.engine.generate(req), lambda words, n: parts.append(words))
            text = " ".join(parts)
            ch = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            self._send_json(
                200,
                {"id": rid, "object": obj, "created": created, "model": model, "choices": [ch], "usage": usage(done)},
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream_obj = "chat.completion.chunk" if chat else "text_completion"
        self._start_stream()
        sent = {"first": True}

        def emit(words: str, n: int) -> None:
            text = words if sent["first"] else " " + words
            self._event(
                {
                    "id": rid,
                    "object": stream_obj,
                    "created": created,
                    "model": model,
                    "choices": [choice(text, None, sent["first"])],
                }
            )
            sent["first"] = False

        try:
            done = stream_words(self.state.engine.generate(req), emit)
            final: dict[str, Any] = {
                "id": rid,
                "object": stream_obj,
                "created": created,
                "model": model,
                "choices": [choice("", "length", False)],
            }
            if not include_usage:
                final["usage"] = usage(done)
            self._event(final)
            if include_usage:
                self._event(
                    {
                        "id": rid,
                        "object": stream_obj,
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage(done),
                    }
                )
            self._raw_chunk(b"data: [DONE]\n\n")
            self._raw_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _generate(self, body: dict[str, Any]) -> None:
        params = body.get("sampling_params") or {}
        text = body.get("text") or ""
        prompt_tokens = max(1, len(str(text).split()))
        req = Request(
            prompt_tokens=prompt_tokens, max_tokens=max(1, int(params.get("max_new_tokens") or 16)), images=[]
        )
        t0 = time.time()
        if not body.get("stream"):
            parts: list[str] = []
            done = stream_words(self.state.engine.generate(req), lambda words, n: parts.append(words))
            meta = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": done,
                "e2e_latency": time.time() - t0,
                "finish_reason": {"type": "length"},
            }
            self._send_json(200, {"text": " ".join(parts), "meta_info": meta})
            return
        self._start_stream()
        acc: list[str] = []

        def emit(words: str, n: int) -> None:
            acc.append(words)
            meta = {"prompt_tokens": prompt_tokens, "completion_tokens": sum(len(a.split()) for a in acc)}
            self._event({"text": " ".join(acc), "meta_info": meta})

        try:
            stream_words(self.state.engine.generate(req), emit)
            self._raw_chunk(b"data: [DONE]\n\n")
            self._raw_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _event(self, obj: dict[str, Any]) -> None:
        self._raw_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _raw_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class StandinHTTPServer(ThreadingHTTPServer):
    """Threaded server with a deep accept queue, so a burst of clients is never refused."""

    daemon_threads = True
    request_queue_size = 1024


def _start_children(n: int) -> list[subprocess.Popen]:
    code = "import time\nwhile True: time.sleep(3600)"
    return [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL) for _ in range(n)]


CAPTURE_BATCH_SIZES = [1, 2, 4, 8, 12, *range(16, 257, 8)]
"""SGLang 0.5.17's default decode CUDA-graph batch sizes (up to 256), as its log on the H200 listed them."""


def _start_engine(delay_s: float, resolved: dict[str, Any]) -> None:
    """Spend `delay_s` the way SGLang's engine start does, logging SGLang 0.5.17's milestone lines
    (what `servetune.launch.StartupPhases` reads): weights 20%, KV cache 10%, decode CUDA graphs
    (up to `cuda_graph_max_bs_decode`) 50%, the rest 20%."""
    log("Init torch distributed begin.")
    time.sleep(0.1 * delay_s)
    log("Load weight begin. avail mem=80.00 GB")
    time.sleep(0.2 * delay_s)
    log(f"Load weight end. elapsed={0.2 * delay_s:.2f} s, type=StandinForCausalLM (stand-in)")
    time.sleep(0.1 * delay_s)
    log("Memory pool end. avail mem=10.00 GB")
    sizes = [bs for bs in CAPTURE_BATCH_SIZES if bs <= int(resolved["cuda_graph_max_bs_decode"])]
    log(f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs={sizes}")
    time.sleep(0.5 * delay_s)
    log(f"Capture target decode CUDA graph end. elapsed={0.5 * delay_s:.2f} s")
    time.sleep(0.1 * delay_s)
    log(
        f"Engine startup timings (s): load_weight={0.2 * delay_s:.2f}, kv_cache_allocation={0.1 * delay_s:.2f}, "
        f"scheduler_e2e={delay_s:.2f}, cuda_graph={{prefill=0.00, decode={0.5 * delay_s:.2f}}}"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the stand-in server until SIGTERM/SIGINT (or an injected failure)."""
    started = time.time()
    argv = sys.argv[1:] if argv is None else argv
    ns, unknown = build_parser().parse_known_args(argv)
    knobs = Knobs.from_env()
    resolved = resolve(ns)
    if knobs.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log(f"servetune stand-in (NOT SGLang) pid={os.getpid()} server_args={json.dumps(resolved, sort_keys=True)}")
    if unknown:
        log(f"stand-in ignores flags it does not model: {' '.join(unknown)}")
    state = State(resolved, knobs, argv, started)
    state.children = _start_children(knobs.children)
    _start_engine(knobs.start_delay_s, resolved)
    if knobs.oom_at_start or resolved["mem_fraction_static"] > OOM_AT_START_FRACTION:
        log("Load weight end. Capturing cuda graph ...")
        die(OOM_TRACE.format(gib=4.0))
    handler = type("BoundHandler", (Handler,), {"state": state})
    try:
        httpd = StandinHTTPServer((ns.host, ns.port), handler)
    except OSError as exc:
        log(
            f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
            f"({ns.host!r}, {ns.port}): {exc.strerror.lower()}"
        )
        for child in state.children:
            child.kill()
        sys.exit(1)
    log(f"Uvicorn running on http://{ns.host}:{ns.port} (stand-in)")

    def shutdown(signum: int, frame: Any) -> None:
        log(f"Received signal {signum}; shutting down gracefully")
        state.status = "Exiting"
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    if not knobs.ignore_sigterm:
        signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)

    def become_ready() -> None:
        time.sleep(knobs.warmup_s)
        if knobs.hang:
            log("stand-in told to hang: never becoming healthy (SERVETUNE_STANDIN_HANG)")
            return
        state.ready_at = time.time()
        state.status = "Up"
        log("The server is fired up and ready to roll!")

    threading.Thread(target=become_ready, daemon=True).start()
    try:
        httpd.serve_forever(poll_interval=0.05)
    finally:
        httpd.server_close()
        for child in state.children:
            child.terminate()
        for child in state.children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
        log("stand-in stopped")
