"""The stand-in speaks the HTTP surface the launcher and the benchmark clients use."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from standin_helpers import STANDIN_CMD, image_url, standin


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    flags = (
        "--max-running-requests",
        "8",
        "--cuda-graph-max-bs-decode",
        "64",
        "--some-future-flag",
        "x",
        "--enable-metrics",
        "--api-key",
        "sk-test",
    )
    with standin(tmp_path_factory.mktemp("standin"), *flags) as handle:
        yield handle


AUTH = {"Authorization": "Bearer sk-test"}


def test_health_and_info_endpoints(server):
    """Health, readiness, model_info and server_info answer, in their current and deprecated spellings."""
    for path in ("/health", "/health_generate", "/ready"):
        assert httpx.get(server.url + path).status_code == 200
    model = httpx.get(server.url + "/model_info").json()
    assert model == httpx.get(server.url + "/get_model_info").json()
    assert model["model_path"] == "standin/model" and model["has_image_understanding"] is True
    info = httpx.get(server.url + "/server_info").json()
    assert info["max_running_requests"] == 8 and info["cuda_graph_max_bs_decode"] == 8
    assert info["chunked_prefill_size"] == 8192 and info["mm_feature_transport"] == "cpu"
    assert info["pid"] == server.pid and info["version"].startswith("standin-")
    assert "--some-future-flag x" in info["launch_command"] and info["api_key"] == "<redacted>"
    assert httpx.get(server.url + "/get_server_info").json()["port"] == server.port
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "standin/model"
    assert httpx.post(server.url + "/flush_cache").status_code == 200
    assert httpx.get(server.url + "/nope").status_code == 404


def test_streamed_chat_has_chunks_done_and_usage(server):
    """SSE chunks with content, a finish chunk, a usage chunk when asked, then [DONE]; images count 1000 tokens."""
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "one two three"},
                    {"type": "image_url", "image_url": {"url": image_url(1)}},
                ],
            }
        ],
        "max_tokens": 40,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=AUTH) as resp:
        assert resp.headers["content-type"] == "text/event-stream"
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 40 and 2 < len(chunks) <= 19
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == {"prompt_tokens": 1003, "completion_tokens": 40, "total_tokens": 1043}


def test_non_streamed_chat_completions_and_generate(server):
    """Plain JSON answers for chat, completions and SGLang's native /generate."""
    chat = httpx.post(
        server.url + "/v1/chat/completions",
        headers=AUTH,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
    ).json()
    assert chat["usage"]["completion_tokens"] == 5 and chat["choices"][0]["message"]["role"] == "assistant"
    comp = httpx.post(server.url + "/v1/completions", headers=AUTH, json={"prompt": "a b", "max_tokens": 3}).json()
    assert len(comp["choices"][0]["text"].split()) == 3
    gen = httpx.post(
        server.url + "/generate", headers=AUTH, json={"text": "x", "sampling_params": {"max_new_tokens": 4}}
    ).json()
    assert gen["meta_info"]["completion_tokens"] == 4


def test_api_key_and_bad_requests(server):
    """A wrong key is 401; a body that is not JSON or has no messages is 400."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(server.url + "/v1/chat/completions", json=body).status_code == 401
    assert httpx.post(server.url + "/v1/chat/completions", content=b"{", headers=AUTH).status_code == 400
    assert httpx.post(server.url + "/v1/chat/completions", json={"messages": []}, headers=AUTH).status_code == 400


def test_it_starts_without_importing_anything_heavy():
    """It binds its port quickly because it imports only the stdlib and servetune's light modules: no
    torch, optuna, numpy, pydantic-heavy catalogs or sglang (a start time is a benchmark's to print)."""
    code = (
        "import sys, servetune.testing.standin.__main__ as m; "
        "heavy = {'torch', 'optuna', 'numpy', 'sglang', 'httpx', 'rich', 'yaml'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_bad_knob_is_a_clear_usage_error():
    """A malformed SERVETUNE_STANDIN_* value names the variable and exits non-zero."""
    out = subprocess.run(
        [*STANDIN_CMD, "--model-path", "m"],
        env={"SERVETUNE_STANDIN_CRASH_AFTER": "many", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 1 and "SERVETUNE_STANDIN_CRASH_AFTER='many' is not a valid int" in out.stderr
