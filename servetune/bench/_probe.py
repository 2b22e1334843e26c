"""Talking to the server before a run: its base URL, the auth header, which models it serves, and
its tokenizer's tokens per prompt word (so prompts carry the asked-for text tokens)."""

from __future__ import annotations

import os

from servetune.bench.prompts import make_prompt
from servetune.errors import BenchError

__all__ = ["auth_headers", "base_url_of", "calibrate_tokens_per_word", "probe_server"]


def auth_headers(api_key: str | None = None) -> dict[str, str]:
    """The `Authorization` header for `api_key` (the server's pinned key), else `$OPENAI_API_KEY`."""
    key = api_key or os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def base_url_of(url: str) -> str:
    """`http://host:port` from what a user may type (`host:port`, a trailing `/` or `/v1`)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


async def probe_server(client, url: str) -> list[str]:
    """Model ids the server lists at /v1/models; a clear `BenchError` when it does not answer."""
    import httpx

    try:
        response = await client.get("/v1/models", timeout=10.0)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise BenchError(
            f"cannot reach the server at {url} ({type(exc).__name__})",
            help="start the server first (e.g. `servetune launch --model M`), "
            "or fix --url (SGLang listens on port 30000 by default)",
        ) from None
    except httpx.HTTPError as exc:
        raise BenchError(
            f"the server at {url} did not answer GET /v1/models: {type(exc).__name__}: {exc}",
            help="is this an OpenAI-compatible server (SGLang, vLLM)?",
        ) from None
    if response.status_code != 200:
        raise BenchError(
            f"the server at {url} answered GET /v1/models with HTTP {response.status_code}",
            help="is this an OpenAI-compatible server, and is it ready? (an API key goes in OPENAI_API_KEY; "
            "a managed run sends the pinned --set api_key)",
        )
    try:
        return [entry["id"] for entry in response.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


async def calibrate_tokens_per_word(client, model: str, seed: int) -> float | None:
    """Tokens per prompt word on this server's tokenizer, from two one-token text requests.

    The difference of `usage.prompt_tokens` between a 16-word and an 80-word prompt cancels
    the chat template; None when the server reports no usage.
    """
    counts = []
    for words in (16, 80):
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": make_prompt(seed, -words, words)}],
            "max_tokens": 1,
            "temperature": 0.0,
            "stream": False,
        }
        try:
            response = await client.post("/v1/chat/completions", json=payload, timeout=60.0)
            counts.append(int(response.json()["usage"]["prompt_tokens"]))
        except Exception:
            return None
    ratio = (counts[1] - counts[0]) / 64
    return ratio if 0.25 <= ratio <= 8 else None
