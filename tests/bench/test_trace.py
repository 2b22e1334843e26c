"""Trace workloads: the user's requests from a JSONL trace or a ShareGPT file, checked with file and
line, replayed in the workload's shape or at their recorded times (against the timing fake server)."""

from __future__ import annotations

import json

import pytest

from servetune.bench import load_workload, run_benchmark
from servetune.bench.trace import load_trace
from servetune.errors import SpecError
from tests.bench.fakeserver import FakeServer


def _write(path, lines):
    path.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return path


def test_a_jsonl_trace_reads_prompts_messages_images_lengths_and_arrivals(tmp_path):
    (tmp_path / "cat.png").write_bytes(b"\x89PNG fake")
    trace = _write(tmp_path / "t.jsonl", [
        {"prompt": "hello there", "output_tokens": 5, "arrival_s": 0.0},
        "",
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a b c"}],
         "images": ["cat.png", "https://example.invalid/x.jpg"], "max_tokens": 7, "arrival_s": 0.5},
    ])  # fmt: skip
    first, second = load_trace(trace)
    assert first.messages == [{"role": "user", "content": "hello there"}] and first.output_tokens == 5
    assert first.prompt_words == 2 and first.line == 1
    assert second.images == (str(tmp_path / "cat.png"), "https://example.invalid/x.jpg")
    assert second.output_tokens == 7 and second.arrival_s == 0.5 and second.line == 3 and second.prompt_words == 5


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (['{"prompt": "a"}', '{"prompt": "b",}'], 2, "invalid JSON: Expecting property name enclosed in double quotes"),
        (['["a"]'], 1, "a trace line must be a JSON object, but got list"),
        (['{"prompt": "a", "tokens": 3}'], 1, "unknown key(s) 'tokens' in a trace line"),
        (['{"prompt": "a", "messages": []}'], 1, 'a trace line needs exactly one of "prompt" and "messages"'),
        (['{"prompt": ""}'], 1, "\"prompt\" must be a non-empty string, but got ''"),
        (['{"messages": "hi"}'], 1, '"messages" must be a non-empty list of {"role", "content"} objects'),
        (['{"prompt": "a", "output_tokens": 0}'], 1, "`output_tokens` must be a positive integer, but got 0"),
        (['{"prompt": "a", "images": ["nope.jpg"]}'], 1, "image 'nope.jpg' not found"),
        (['{"prompt": "a", "arrival_s": 1}', '{"prompt": "b", "arrival_s": 0.5}'], 2, "`arrival_s` must be given"),
        (['{"prompt": "a", "arrival_s": -1}'], 1, "`arrival_s` must be a number of seconds >= 0, but got -1"),
    ],
)
def test_a_malformed_trace_names_its_file_line_and_what_is_expected(tmp_path, lines, line, message):
    trace = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(SpecError) as err:
        load_trace(trace)
    assert err.value.message.startswith(message)
    assert err.value.location is not None and (err.value.location.path, err.value.location.line) == (str(trace), line)


def test_an_empty_or_missing_trace_is_refused(tmp_path):
    with pytest.raises(SpecError, match="holds no request"):
        load_trace(_write(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(SpecError, match="not found"):
        load_trace(tmp_path / "missing.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="cannot read trace"):
        load_trace(tmp_path / "bin.jsonl")


def test_a_sharegpt_file_gives_first_human_turns_and_reply_lengths(tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "It is four ok"}]},
        {"conversations": [{"from": "gpt", "value": "no prompt"}]},
        {"conversations": [{"from": "human", "value": "Hi"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    got = load_trace(tmp_path / "sg.json", "sharegpt")
    assert [r.messages[0]["content"] for r in got] == ["What is 2+2?", "Hi"]
    assert got[0].output_tokens == 5 and got[1].output_tokens is None  # 4 words x 4/3
    (tmp_path / "bad.json").write_text('[{"conversations": 3}]')
    with pytest.raises(SpecError, match='needs a "conversations" list'):
        load_trace(tmp_path / "bad.json", "sharegpt")


def test_a_trace_file_is_a_workload_that_sends_its_requests_and_cycles(tmp_path):
    trace = _write(
        tmp_path / "my-traffic.jsonl", [{"prompt": f"question {i}", "output_tokens": 3 + i} for i in range(3)]
    )
    w = load_workload(str(trace)).model_copy(update={"requests": 6, "warmup_requests": 0})
    assert w.name == "my-traffic" and w.kind == "text" and w.trace is not None
    with FakeServer(ttft_s=0.001, itl_s=0.001) as server:
        m = run_benchmark(server.url, w, client="auto")
    assert m.client == "builtin" and m.completed == 6
    streamed = [r for r in server.seen if r.get("stream")]
    assert [r["messages"][0]["content"] for r in streamed] == [f"question {i % 3}" for i in range(6)]
    assert [r["max_tokens"] for r in streamed] == [3, 4, 5, 3, 4, 5]
    with pytest.raises(SpecError, match="needs the builtin client"):
        run_benchmark(server.url, w, client="sglang")


def test_images_in_a_trace_are_sent_with_the_text(tmp_path):
    (tmp_path / "a.png").write_bytes(b"\x89PNG one")
    trace = _write(tmp_path / "mm.jsonl", [{"prompt": "what is this", "images": ["a.png"], "output_tokens": 2}])
    w = load_workload(str(trace)).model_copy(update={"requests": 2, "warmup_requests": 0})
    assert w.kind == "multimodal"
    with FakeServer(ttft_s=0.001, itl_s=0.001) as server:
        run_benchmark(server.url, w)
    content = [r for r in server.seen if r.get("stream")][0]["messages"][0]["content"]
    assert content[0]["type"] == "image_url" and content[0]["image_url"]["url"].startswith("data:image/")
    assert content[1] == {"type": "text", "text": "what is this"}
    assert len(server.image_hashes) == 2


def test_recorded_replay_sends_at_the_trace_times_scaled(tmp_path):
    trace = _write(
        tmp_path / "t.jsonl", [{"prompt": f"q{i}", "output_tokens": 2, "arrival_s": 0.4 * i} for i in range(4)]
    )
    spec = tmp_path / "w.yaml"
    spec.write_text(
        "name: replay\nsummary: s\nrequests: 4\nwarmup_requests: 0\n"
        "trace: {path: t.jsonl, replay: recorded, time_scale: 2.0}\n"
    )
    w = load_workload(str(spec))
    assert w.trace.path == str(trace)
    with FakeServer(ttft_s=0.001, itl_s=0.001) as server:
        m = run_benchmark(server.url, w, run_dir=tmp_path / "run")
    assert m.completed == 4
    # the last arrival, 1.2 s recorded, is due at 0.6 s at twice the speed: the schedule says so exactly
    sent = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["scheduled"] for r in sent) == pytest.approx([0.0, 0.2, 0.4, 0.6], abs=1e-6)
    assert m.duration_s >= 0.6 * 0.95


def test_a_workload_file_with_a_malformed_trace_fails_when_it_loads(tmp_path):
    _write(tmp_path / "t.jsonl", ['{"prompt": "a"}', "{oops"])
    spec = tmp_path / "w.yaml"
    spec.write_text("name: x\nsummary: s\ntrace: {path: t.jsonl}\n")
    with pytest.raises(SpecError) as err:
        load_workload(str(spec))
    assert err.value.location.line == 2 and err.value.location.path.endswith("t.jsonl")
