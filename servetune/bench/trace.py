"""Trace workloads: the user's own requests, from a JSONL trace or a ShareGPT file.

JSONL (one request per line)::

    {"prompt": "Summarise ...", "output_tokens": 200, "arrival_s": 0.0}
    {"messages": [{"role": "user", "content": "Hi"}], "images": ["cat.jpg"], "output_tokens": 64, "arrival_s": 0.4}

- `prompt` (text) or `messages` (OpenAI chat messages, sent as they are), one of them;
- `images`: local paths (relative to the trace file; sent as base64 data URLs) or http(s)/data URLs;
- `output_tokens` (or `max_tokens`): the length asked for (`ignore_eos`), default the workload's;
- `arrival_s`: seconds from the start of the trace, for `replay: recorded`.

ShareGPT: a JSON list (or JSONL) of `{"conversations": [{"from": "human", "value": ...},
{"from": "gpt", "value": ...}, ...]}`; each conversation's first human turn is the prompt and the
reply's length in words (x 4/3, as tokens) the output length, as SGLang's bench_serving reads it.
"""

from __future__ import annotations

import base64
import json
import math
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servetune.errors import SourceLocation, SpecError

__all__ = ["TraceRequest", "load_trace"]

MAX_TRACE_BYTES = 512 * 1024 * 1024
"""A trace file larger than this is refused (it is read into memory)."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace."""

    messages: list[dict[str, Any]]
    """OpenAI chat messages (a prompt becomes one user message)."""
    images: tuple[str, ...] = ()
    """Image paths (absolute) or URLs, added to the last user message."""
    output_tokens: int | None = None
    """Tokens to generate; None: the workload's `output_tokens`."""
    arrival_s: float | None = None
    """Arrival time from the start of the trace (seconds)."""
    prompt_words: int = 0
    """Words of text in the messages (an estimate of the prompt's length)."""
    line: int = field(default=0, compare=False)
    """Line of the trace it came from."""


def _error(path: Path, line: int, message: str, help: str) -> SpecError:
    return SpecError(message, location=SourceLocation(str(path), line), help=help)


_JSONL_HELP = (
    'each line is a JSON object with "prompt" (text) or "messages" (chat messages), optional "images" '
    '(paths or URLs), "output_tokens" and "arrival_s"'
)


def _words(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):
            total += sum(len(str(p.get("text", "")).split()) for p in content if isinstance(p, dict))
    return total


def _positive_int(value: Any, path: Path, line: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _error(path, line, f"`{key}` must be a positive integer, but got {value!r}", _JSONL_HELP)
    return value


def _jsonl_request(obj: Any, path: Path, line: int) -> TraceRequest:
    if not isinstance(obj, dict):
        raise _error(path, line, f"a trace line must be a JSON object, but got {type(obj).__name__}", _JSONL_HELP)
    unknown = sorted(set(obj) - {"prompt", "messages", "images", "output_tokens", "max_tokens", "arrival_s"})
    if unknown:
        raise _error(path, line, f"unknown key(s) {', '.join(map(repr, unknown))} in a trace line", _JSONL_HELP)
    if ("prompt" in obj) == ("messages" in obj):
        raise _error(path, line, 'a trace line needs exactly one of "prompt" and "messages"', _JSONL_HELP)
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise _error(path, line, f'"prompt" must be a non-empty string, but got {obj["prompt"]!r}', _JSONL_HELP)
        messages = [{"role": "user", "content": obj["prompt"]}]
    else:
        messages = obj["messages"]
        ok = isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m for m in messages)
        if not ok:
            raise _error(path, line, '"messages" must be a non-empty list of {"role", "content"} objects', _JSONL_HELP)
    images = obj.get("images", [])
    if not isinstance(images, list) or not all(isinstance(i, str) and i for i in images):
        raise _error(path, line, f'"images" must be a list of paths or URLs, but got {images!r}', _JSONL_HELP)
    resolved = []
    for image in images:
        if image.startswith(("http://", "https://", "data:")):
            resolved.append(image)
            continue
        file = (path.parent / image).resolve()
        if not file.is_file():
            raise _error(
                path, line, f"image {image!r} not found (looked for {file})", "paths are relative to the trace"
            )
        resolved.append(str(file))
    out = obj.get("output_tokens", obj.get("max_tokens"))
    if out is not None:
        out = _positive_int(out, path, line, "output_tokens")
    arrival = obj.get("arrival_s")
    if arrival is not None and (
        isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not math.isfinite(arrival) or arrival < 0
    ):
        raise _error(path, line, f"`arrival_s` must be a number of seconds >= 0, but got {arrival!r}", _JSONL_HELP)
    return TraceRequest(
        messages=messages,
        images=tuple(resolved),
        output_tokens=out,
        arrival_s=float(arrival) if arrival is not None else None,
        prompt_words=_words(messages),
        line=line,
    )


def _sharegpt_request(obj: Any, path: Path, line: int) -> TraceRequest | None:
    help = 'ShareGPT entries are {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}'
    turns = obj.get("conversations") if isinstance(obj, dict) else None
    if not isinstance(turns, list):
        raise _error(path, line, 'a ShareGPT entry needs a "conversations" list', help)
    human = next((t for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
    if human is None or not isinstance(human.get("value"), str) or not human["value"].strip():
        return None  # SGLang skips conversations without a prompt too
    reply = next((t for t in turns[turns.index(human) + 1 :] if isinstance(t, dict) and t.get("from") != "human"), None)
    words = len(str(reply.get("value", "")).split()) if reply else 0
    messages = [{"role": "user", "content": human["value"]}]
    return TraceRequest(
        messages=messages,
        output_tokens=max(1, round(words * 4 / 3)) if words else None,
        prompt_words=_words(messages),
        line=line,
    )


def load_trace(path: str | Path, fmt: str = "jsonl") -> list[TraceRequest]:
    """Read and check a trace; every problem names the file and line and says what is expected.

    Raises:
        SpecError: A missing, oversized, unreadable or malformed file, or one with no request.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise SpecError(f"trace {path} is {size >> 20} MiB, over the {MAX_TRACE_BYTES >> 20} MiB limit")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"trace file {path} not found", help="the path is relative to the workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read trace {path}: {exc}", help="a trace is UTF-8 JSON lines or JSON") from None
    entries: list[tuple[int, Any]] = []
    if fmt == "sharegpt" and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _error(path, exc.lineno, f"invalid JSON: {exc.msg}", "a ShareGPT file is a JSON list") from None
        entries = [(0, item) for item in data]
    else:
        for number, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                entries.append((number, json.loads(raw)))
            except json.JSONDecodeError as exc:
                raise _error(path, number, f"invalid JSON: {exc.msg} (column {exc.colno})", _JSONL_HELP) from None
    parse = _sharegpt_request if fmt == "sharegpt" else _jsonl_request
    requests = [r for number, obj in entries if (r := parse(obj, path, number)) is not None]
    if not requests:
        raise SpecError(f"trace {path} holds no request", help=_JSONL_HELP)
    arrivals = [r.arrival_s for r in requests]
    if any(a is not None for a in arrivals) and (None in arrivals or arrivals != sorted(arrivals)):
        bad = next(r for r, a, b in zip(requests[1:], arrivals, arrivals[1:]) if a is None or b is None or b < a)
        raise _error(path, bad.line, "`arrival_s` must be given on every line and never decrease", _JSONL_HELP)
    return requests


def image_data_url(image: str) -> str:
    """A trace image as the URL sent: a local file as a base64 data URL, a URL as it is."""
    if image.startswith(("http://", "https://", "data:")):
        return image
    mime = mimetypes.guess_type(image)[0] or "image/jpeg"
    return f"data:{mime};base64," + base64.b64encode(Path(image).read_bytes()).decode("ascii")
