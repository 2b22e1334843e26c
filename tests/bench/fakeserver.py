"""A tiny OpenAI-style streaming server for the benchmark tests, with known delays.

Not the project's stand-in (servetune.testing.standin): this one exists only to pin the client's
timing definitions, so its delays are exact and it records every image it receives.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field

_DATA_URL = re.compile(rb"data:image/[a-z]+;base64,([A-Za-z0-9+/=]+)")


@dataclass
class FakeServer:
    ttft_s: float = 0.05
    """Delay before the first content chunk."""
    itl_s: float = 0.01
    """Delay between later content chunks."""
    fail_every: int = 0
    """Every n-th chat request answers HTTP 500 (0 = never)."""
    prompt_tokens: int = 77
    """The `usage.prompt_tokens` reported (when `tokens_per_word` is 0)."""
    tokens_per_word: float = 0.0
    """If set: `usage.prompt_tokens` = 10 (template) + words of the text * this."""
    image_hashes: list[str] = field(default_factory=list)
    chat_requests: int = 0
    seen: list = field(default_factory=list)
    """Every streamed chat request's JSON (image data replaced by `data:image/x;base64,`)."""
    max_in_flight: int = 0
    _in_flight: int = 0

    def __post_init__(self) -> None:
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if method == "GET" and path == "/v1/models":
                    self._json(writer, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                elif method == "POST" and path == "/v1/chat/completions":
                    await self._chat(writer, body)
                else:
                    self._json(writer, 404, {"error": "not found"})
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _json(self, writer, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )

    def _prompt_tokens(self, request) -> int:
        if not self.tokens_per_word:
            return self.prompt_tokens
        content = request["messages"][0]["content"]
        text = (
            content
            if isinstance(content, str)
            else " ".join(p.get("text", "") for p in content if p.get("type") == "text")
        )
        return 10 + round(len(text.split()) * self.tokens_per_word)

    async def _chat(self, writer, body: bytes) -> None:
        request = json.loads(_DATA_URL.sub(b"data:image/x;base64,", body))
        if not request.get("stream"):
            self._json(
                writer,
                200,
                {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}],
                    "usage": {"prompt_tokens": self._prompt_tokens(request), "completion_tokens": 1},
                },
            )
            return
        self.chat_requests += 1
        self.seen.append(request)
        number = self.chat_requests
        for match in _DATA_URL.finditer(body):
            self.image_hashes.append(hashlib.sha256(match.group(1)).hexdigest())
        if self.fail_every and number % self.fail_every == 0:
            self._json(writer, 500, {"error": {"message": "injected failure"}})
            return
        tokens = request.get("max_tokens") or request.get("max_completion_tokens") or 16
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            await asyncio.sleep(self.ttft_s)
            for index in range(tokens):
                if index:
                    await asyncio.sleep(self.itl_s)
                self._event(writer, {"choices": [{"index": 0, "delta": {"content": f" t{index}"}}]})
                await writer.drain()
            self._event(
                writer,
                {"choices": [], "usage": {"prompt_tokens": self._prompt_tokens(request), "completion_tokens": tokens}},
            )
            writer.write(self._chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        finally:
            self._in_flight -= 1

    def _event(self, writer, payload) -> None:
        writer.write(self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n"))

    @staticmethod
    def _chunk(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"
