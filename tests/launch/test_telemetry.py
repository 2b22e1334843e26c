"""Scheduler telemetry from the server log: SGLang's `Prefill batch` / `Decode batch` lines, read from
real H200 lines (SGLang 0.5.17), from lines in 0.5.10's and 0.5.23's formats, and from the stand-in,
which logs the same lines while it serves."""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from launch_helpers import MODEL, group_gone

from servetune.launch import (
    TELEMETRY_FIELDS,
    parse_scheduler_line,
    read_scheduler_lines,
    read_telemetry,
    start_server,
    write_telemetry,
)
from servetune.testing.standin._config import Knobs, build_parser, resolve
from servetune.testing.standin._engine import Engine, Request

FIXTURE = Path(__file__).parents[1] / "fixtures" / "h200" / "scheduler-lines-0.5.17.log"
"""42 lines copied unchanged from two H200 server.logs: 26 prefill, 11 decode and 5 other lines."""

PREFILL_1332 = (
    "[2026-12-01 22:40:15] Prefill batch, #new-seq: 1, #new-token: 1332, #cached-token: 24, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 463.20"
)
DECODE_25 = (
    "[2026-12-01 22:42:32] Decode batch, #running-req: 25, #token: 35768, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 3347.04, #queue-req: 0"
)
DECODE_KEYS = {"kind", "ts", "running_req", "tokens", "token_usage", "cuda_graph", "gen_throughput", "queue_req"}
PREFILL_KEYS_0517 = {
    "kind",
    "ts",
    "new_seq",
    "new_token",
    "cached_token",
    "token_usage",
    "running_req",
    "queue_req",
    "pending_token",
    "cuda_graph",
    "input_throughput",
}


def _epoch(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


@pytest.fixture
def tz(monkeypatch):
    """Set the local time zone (POSIX TZ strings, no tzdata needed); restored afterwards."""

    def set_tz(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_tz
    monkeypatch.undo()
    time.tzset()


# --- SGLang 0.5.17, real H200 lines ----------------------------------------------------------------


def test_the_h200_lines_parse_by_kind_and_other_lines_give_none():
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 42
    records = [parse_scheduler_line(line) for line in lines]
    kinds = [r["kind"] for r in records if r is not None]
    assert (kinds.count("prefill"), kinds.count("decode"), len(kinds)) == (26, 11, 37)
    others = [line for line, r in zip(lines, records) if r is None]
    assert len(others) == 5
    assert all(" batch, " not in line for line in others)
    assert any("fired up and ready to roll" in line for line in others)
    assert any('"GET /v1/models HTTP/1.1" 200 OK' in line for line in others)
    for r in records:
        if r is None:
            continue
        assert set(r) == (DECODE_KEYS if r["kind"] == "decode" else PREFILL_KEYS_0517), r
        assert set(TELEMETRY_FIELDS) <= set(r) or r["kind"] == "prefill"
        assert isinstance(r["running_req"], int) and isinstance(r["token_usage"], float)
        assert isinstance(r["cuda_graph"], bool)
    # the same records as `read_scheduler_lines` gives for the whole file
    read, end = read_scheduler_lines(FIXTURE)
    assert read == [r for r in records if r is not None]
    assert end == FIXTURE.stat().st_size


def test_two_known_h200_lines_parse_to_their_values():
    assert PREFILL_1332 in FIXTURE.read_text().splitlines() and DECODE_25 in FIXTURE.read_text().splitlines()
    assert parse_scheduler_line(PREFILL_1332) == {
        "kind": "prefill",
        "ts": _epoch("2026-12-01 22:40:15"),
        "new_seq": 1,
        "new_token": 1332,
        "cached_token": 24,
        "token_usage": 0.0,
        "running_req": 0,
        "queue_req": 0,
        "pending_token": 0,
        "cuda_graph": False,
        "input_throughput": 463.2,
    }
    assert parse_scheduler_line(DECODE_25) == {
        "kind": "decode",
        "ts": _epoch("2026-12-01 22:42:32"),
        "running_req": 25,
        "tokens": 35768,
        "token_usage": 0.01,
        "cuda_graph": True,
        "gen_throughput": 3347.04,
        "queue_req": 0,
    }
    last = parse_scheduler_line(FIXTURE.read_text().splitlines()[-1])
    assert (last["running_req"], last["cuda_graph"], last["gen_throughput"]) == (65, False, 675.75)


def test_the_timestamp_is_read_as_local_time(tz):
    tz("UTC0")
    assert parse_scheduler_line(DECODE_25)["ts"] == 1796164952.0  # 2026-12-01 22:42:32 UTC
    tz("JST-9")
    assert parse_scheduler_line(DECODE_25)["ts"] == 1796164952.0 - 9 * 3600


# --- other releases' formats ---------------------------------------------------------------------

# SGLang 0.5.23 (managers/scheduler_components/metrics_reporter.py): 0.5.17's keys, plus
# `#replay-token` when replaying; `[iter]` after the batch word with SGLANG_LOG_FORWARD_ITERS; ranks in
# the bracket (scheduler.py: " DP{dp}", " PP{pp}", " ATTN_CP{cp}", " MOE_DP{r}", " TP{tp}", " EP{ep}").
PREFILL_0523 = (
    "[2026-12-02 09:15:07 DP0 TP0] Prefill batch [5123], #new-seq: 2, #new-token: 2680, #cached-token: 48, "
    "token usage: 0.03, #running-req: 7, #queue-req: 3, #pending-token: 512, #replay-token: 16, cuda graph: False, "
    "input throughput (token/s): 15011.89"
)
DECODE_0523 = (
    "[2026-12-02 09:15:08 DP1 PP0 TP3 EP3] Decode batch [5160], #running-req: 31, #token: 44012, token usage: 0.02, "
    "cuda graph: True, gen throughput (token/s): 4759.58, #queue-req: 2, est. decode TFLOPS/s (per GPU): 12.40, "
    "est. read BW (GB/s per GPU): 2810.55, est. write BW (GB/s per GPU): 3.21"
)
# SGLang 0.5.10 (observability/scheduler_metrics_mixin.py): no `#pending-token`; hybrid SWA models
# log `#full token` / `full token usage` / `#swa token` / `swa token usage`; speculative decoding adds
# `accept len` / `accept rate`; the graph label is `cpu graph` on CPU.
PREFILL_0510 = (
    "[2026-06-10 14:02:59] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.10, "
    "#running-req: 3, #queue-req: 0, cuda graph: False, input throughput (token/s): 2202.81"
)
DECODE_0510 = (
    "[2026-06-10 14:03:00 TP1] Decode batch [77], #running-req: 4, #full token: 5498, full token usage: 0.01, "
    "#swa token: 1200, swa token usage: 0.05, accept len: 2.31, accept rate: 0.65, cpu graph: True, "
    "gen throughput (token/s): 12.14, #queue-req: 1"
)


def test_0523_lines_with_ranks_and_iterations_parse_to_the_normalized_keys():
    prefill = parse_scheduler_line(PREFILL_0523)
    assert prefill == {
        "kind": "prefill",
        "ts": _epoch("2026-12-02 09:15:07"),
        "dp_rank": 0,
        "tp_rank": 0,
        "forward_iter": 5123,
        "new_seq": 2,
        "new_token": 2680,
        "cached_token": 48,
        "token_usage": 0.03,
        "running_req": 7,
        "queue_req": 3,
        "pending_token": 512,
        "replay_token": 16,
        "cuda_graph": False,
        "input_throughput": 15011.89,
    }
    decode = parse_scheduler_line(DECODE_0523)
    assert {k: decode[k] for k in TELEMETRY_FIELDS} == {
        "running_req": 31,
        "queue_req": 2,
        "token_usage": 0.02,
        "tokens": 44012,
        "gen_throughput": 4759.58,
        "cuda_graph": True,
    }
    assert (decode["dp_rank"], decode["pp_rank"], decode["tp_rank"], decode["ep_rank"]) == (1, 0, 3, 3)
    assert decode["forward_iter"] == 5160
    assert (decode["est_decode_tflops_s"], decode["est_read_bw"], decode["est_write_bw"]) == (12.4, 2810.55, 3.21)


def test_0510_lines_parse_to_the_normalized_keys():
    prefill = parse_scheduler_line(PREFILL_0510)
    assert set(prefill) == PREFILL_KEYS_0517 - {"pending_token"}
    assert (prefill["new_token"], prefill["token_usage"], prefill["running_req"]) == (1024, 0.1, 3)
    decode = parse_scheduler_line(DECODE_0510)
    assert decode == {
        "kind": "decode",
        "ts": _epoch("2026-06-10 14:03:00"),
        "tp_rank": 1,
        "forward_iter": 77,
        "running_req": 4,
        "full_token": 5498,
        "full_token_usage": 0.01,
        "swa_token": 1200,
        "swa_token_usage": 0.05,
        "accept_len": 2.31,
        "accept_rate": 0.65,
        "cpu_graph": True,
        "gen_throughput": 12.14,
        "queue_req": 1,
    }


def test_milliseconds_values_and_other_prefixes():
    line = "(SchedulerActor pid=4242, ip=10.0.0.7) [2026-12-01 22:42:32.250] Decode batch, #running-req: 3, note: x y"
    record = parse_scheduler_line(line)
    assert record["ts"] == _epoch("2026-12-01 22:42:32") + 0.25
    assert (record["running_req"], record["note"]) == (3, "x y")
    assert parse_scheduler_line(DECODE_25 + "\r\n") == parse_scheduler_line(DECODE_25)
    odd = parse_scheduler_line("[2026-12-01 22:42:32] Decode batch, a: -3, b: 1e3, c: nan, d: True, e: 007")
    assert (odd["a"], odd["b"], odd["c"], odd["d"], odd["e"]) == (-3, 1000.0, "nan", True, 7)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Decode batch, #running-req: 4",
        '[2026-12-01 22:42:32] INFO:     127.0.0.1:48104 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[2026-12-01 22:42:32] Decode batched, #running-req: 4",
        "[2026-12-01 22:42:32] Decode batch, ",
        "[2026-13-45 22:42:32] Decode batch, #running-req: 4",
        "[9999-12-31 99:99:99] Prefill batch, #new-seq: 1",
        "[2026-12-01 22:42:32]Decode batch, #running-req: 4",
        "x [2026-12-01 22:42:32] Decode batch, #running-req: 4",
        "[2026-12-01 22:42:32] Decode batch, " + "#a: 1, " * 20_000,
    ],
)
def test_other_lines_give_none(line):
    assert parse_scheduler_line(line) is None


SGLANG_GC_WARNING = (
    "[2026-12-07 10:54:10.123] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.9123s | # Objects: "
    "gen0=312, gen1=1840, gen2=2613458 | This may cause latency jitter. Consider calling the freeze_gc API after "
    "sending a few warmup requests."
)
"""SGLang 0.5.17's warning (`configure_gc_warning`, `--gc-warning-threshold-secs`), in its own format string."""


def test_a_long_garbage_collection_is_a_gc_record_from_sglang_and_from_the_device_watch(tmp_path):
    import os
    import subprocess
    import sys

    record = parse_scheduler_line(SGLANG_GC_WARNING)
    assert record == {"kind": "gc", "ts": record["ts"], "generation": 2, "seconds": 0.9123}
    assert record["ts"] == parse_scheduler_line("[2026-12-07 10:54:10.123] Decode batch, #running-req: 1")["ts"]
    # scripts/device/gcwatch: a real interpreter with it on PYTHONPATH writes the same shape for every collection
    # at or over its threshold, with the process
    watch = Path(__file__).parents[2] / "scripts" / "device" / "gcwatch"
    env = {**os.environ, "SERVETUNE_GC_WATCH_S": "0", "PYTHONPATH": str(watch)}
    out = subprocess.run([sys.executable, "-c", "import gc; gc.collect(); print('done')"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    lines = [parse_scheduler_line(x) for x in out.stderr.splitlines()]
    watched = [x for x in lines if x is not None]
    assert watched and len(watched) == len(lines) and out.stdout == "done\n"
    assert any(x["generation"] == 2 for x in watched)
    assert all(x["kind"] == "gc" and x["seconds"] >= 0 and x["pid"] > 0 and x["process"] for x in watched)
    # unset, it writes nothing
    quiet = subprocess.run([sys.executable, "-c", "import gc; gc.collect()"], capture_output=True, text=True,
                           timeout=60, env={**env, "SERVETUNE_GC_WATCH_S": ""})  # fmt: skip
    assert quiet.stderr == ""


def test_garbage_never_raises():
    rng = random.Random(7)
    alphabet = "[]#:,.() -_0123456789TFaeDPrue\t\r\x00\ufffd\u00e9"
    base = [PREFILL_1332, DECODE_25, PREFILL_0523, DECODE_0510]
    for i in range(3000):
        if i % 2:
            line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
        else:
            chars = list(rng.choice(base))
            for _ in range(rng.randrange(1, 8)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            line = "".join(chars)
        record = parse_scheduler_line(line)
        assert record is None or (record["kind"] in ("prefill", "decode") and isinstance(record["ts"], float))
    assert parse_scheduler_line(None) is None  # type: ignore[arg-type]


# --- tailing a growing log, writing JSONL ----------------------------------------------------------


def test_read_scheduler_lines_tails_a_growing_log(tmp_path):
    log = tmp_path / "server.log"
    assert read_scheduler_lines(log, 7) == ([], 7)
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:10]) + b"[2026-12-01 22:40:10] bad byte \xff\xfe here\n")
    first, offset = read_scheduler_lines(log)
    assert offset == log.stat().st_size and len(first) == 7
    # half a scheduler line: not consumed
    with open(log, "ab") as fh:
        fh.write(DECODE_25.encode()[:70])
    again, offset2 = read_scheduler_lines(log, offset)
    assert (again, offset2) == ([], offset)
    # the rest of it, and a progress bar (`\r`) ending in a scheduler line
    with open(log, "ab") as fh:
        fh.write(DECODE_25.encode()[70:] + b"\n")
        fh.write(b"Capturing batches (bs=8):  92%\rCapturing batches (bs=4): 94%\r" + PREFILL_1332.encode() + b"\n")
        fh.write(b"".join(lines[10:]))
    rest, end = read_scheduler_lines(log, offset2)
    assert end == log.stat().st_size
    assert rest[0] == parse_scheduler_line(DECODE_25) and rest[1] == parse_scheduler_line(PREFILL_1332)
    whole, _ = read_scheduler_lines(FIXTURE)
    assert first + rest[2:] == whole
    assert read_scheduler_lines(log, end) == ([], end)
    # a rewritten (shorter) log is read from its start
    log.write_bytes(lines[2])
    assert read_scheduler_lines(log, end) == ([parse_scheduler_line(lines[2].decode())], len(lines[2]))


def test_write_telemetry_spreads_records_sharing_a_second(tmp_path):
    t0 = _epoch("2026-12-01 22:42:30") + 0.5
    records = [
        {"kind": "decode", "ts": _epoch("2026-12-01 22:42:31"), "running_req": 18},
        {"kind": "prefill", "ts": _epoch("2026-12-01 22:42:32"), "running_req": 18},
        {"kind": "decode", "ts": _epoch("2026-12-01 22:42:32"), "running_req": 24},
        {"kind": "decode", "ts": _epoch("2026-12-01 22:42:32"), "running_req": 25},
        {"kind": "decode", "ts": _epoch("2026-12-01 22:42:34"), "running_req": 12},
    ]
    before = json.dumps(records)
    out = tmp_path / "telemetry.jsonl"
    write_telemetry(out, records, t0)
    assert json.dumps(records) == before  # not changed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert read_telemetry(out) == rows and read_telemetry(tmp_path / "missing.jsonl") == []
    assert [r["t"] for r in rows] == [0.5, 1.5, 1.833, 2.167, 3.5]
    assert [r["ts"] for r in rows] == [r["ts"] for r in records]
    assert [{k: v for k, v in r.items() if k != "t"} for r in rows] == records

    # from the H200 lines: 22:42:32 holds 12 records, spread over that second in their order
    whole, _ = read_scheduler_lines(FIXTURE)
    write_telemetry(out, whole, t0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    second = [r["t"] for r in rows if r["ts"] == _epoch("2026-12-01 22:42:32")]
    assert len(second) == 12 and second == sorted(second) and len(set(second)) == 12
    assert second[0] == 1.5 and second[-1] == round(1.5 + 11 / 12, 3) == 2.417

    # stamps with milliseconds are kept as logged
    write_telemetry(out, [{"kind": "decode", "ts": t0 + 0.25}, {"kind": "decode", "ts": t0 + 0.25}], t0)
    assert [json.loads(line)["t"] for line in out.read_text().splitlines()] == [0.25, 0.25]
    write_telemetry(out, [], t0)
    assert out.read_text() == ""


# --- the stand-in logs the same lines -------------------------------------------------------------


def _engine(env: dict[str, str], lines: list[str] | None) -> Engine:
    resolved = resolve(build_parser().parse_args(["--model-path", "m", "--cuda-graph-max-bs-decode", "2"]))
    return Engine(resolved, Knobs(time_scale=0.05), env=env, log=None if lines is None else lines.append)


def _serve(engine: Engine, n: int, prompt: int, max_tokens: int) -> None:
    def one(_: int) -> int:
        return sum(engine.generate(Request(prompt_tokens=prompt, max_tokens=max_tokens, images=[])))

    with ThreadPoolExecutor(n) as pool:
        assert list(pool.map(one, range(n))) == [max_tokens] * n


def test_the_stand_in_engine_logs_prefill_and_decode_lines_in_process():
    lines: list[str] = []
    engine = _engine({"SERVETUNE_STANDIN_LOG_INTERVAL_S": "0.05"}, lines)
    _serve(engine, 3, prompt=40, max_tokens=600)  # 600 decode steps of 16.3 simulated ms (eager), 0.8 ms real: 0.5 s
    records = [parse_scheduler_line(f"[2026-12-01 22:42:32] {line}") for line in lines]
    assert None not in records
    prefills = [r for r in records if r["kind"] == "prefill"]
    decodes = [r for r in records if r["kind"] == "decode"]
    assert len(prefills) == 3 and {r["new_token"] for r in prefills} == {40}
    assert all(r["input_throughput"] > 0 and 0 <= r["token_usage"] <= 1 for r in prefills)
    assert len(decodes) >= 3, lines
    assert all(set(TELEMETRY_FIELDS) <= set(r) and 1 <= r["running_req"] <= 3 for r in decodes)
    assert all(r["gen_throughput"] > 0 and r["tokens"] > 0 for r in decodes)
    assert {r["cuda_graph"] for r in decodes if r["running_req"] == 3} == {False}  # 3 > the graph's 2
    assert {r["cuda_graph"] for r in decodes if r["running_req"] <= 2} <= {True}
    assert engine.stats()["kv_used"] == 0


def test_the_stand_in_engine_logs_no_decode_lines_at_interval_zero_and_nothing_without_a_log():
    lines: list[str] = []
    _serve(_engine({"SERVETUNE_STANDIN_LOG_INTERVAL_S": "0"}, lines), 2, prompt=10, max_tokens=300)
    assert [line.split(",")[0] for line in lines] == ["Prefill batch", "Prefill batch"]
    quiet = _engine({}, None)
    assert quiet.log_interval_s == 0.5
    _serve(quiet, 2, prompt=10, max_tokens=50)
    with pytest.raises(SystemExit, match="SERVETUNE_STANDIN_LOG_INTERVAL_S"):
        _engine({"SERVETUNE_STANDIN_LOG_INTERVAL_S": "soon"}, [])


def test_the_stand_in_server_logs_scheduler_lines_while_it_serves(make_options):
    """A real stand-in process through the launcher (127.0.0.1, a free port, stopped by its process
    group); four concurrent streamed chats; its server.log, tailed as it grows, reads as SGLang's."""
    import httpx

    opts = make_options(knobs={"LOG_INTERVAL_S": "0.2"})
    prompt = "hello " * 50
    with start_server(["--model-path", MODEL], {}, {}, opts) as server:
        before, offset = read_scheduler_lines(server.log_path)
        assert before == []
        tailed: list[dict] = []
        done = threading.Event()

        def tail() -> None:
            nonlocal offset
            while not done.is_set():
                records, offset = read_scheduler_lines(server.log_path, offset)
                tailed.extend(records)
                time.sleep(0.05)

        follower = threading.Thread(target=tail, daemon=True)
        follower.start()
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 400, "stream": True}
        with httpx.Client(base_url=server.url, timeout=30) as client:

            def one(_: int) -> int:
                chunks = 0
                with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                    assert resp.status_code == 200
                    chunks = sum(1 for line in resp.iter_lines() if line.startswith("data: {"))
                return chunks

            with ThreadPoolExecutor(4) as pool:
                assert all(n > 1 for n in pool.map(one, range(4)))
        done.set()
        follower.join(timeout=5)
        records, offset = read_scheduler_lines(server.log_path, offset)
        tailed.extend(records)
    assert group_gone(server.pgid)
    whole, _ = read_scheduler_lines(server.log_path)
    assert tailed == whole  # nothing lost or read twice while tailing
    prefills = [r for r in whole if r["kind"] == "prefill"]
    decodes = [r for r in whole if r["kind"] == "decode"]
    assert len(prefills) == 4 and {r["new_token"] for r in prefills} == {50}
    assert set(prefills[0]) == PREFILL_KEYS_0517
    assert decodes, server.log_path.read_text()[-3000:]
    assert all(set(r) == DECODE_KEYS for r in decodes)
    assert max(r["running_req"] for r in decodes) > 0
    assert all(r["cuda_graph"] is True and r["gen_throughput"] > 0 for r in decodes)  # 4 <= 32
    now = time.time()
    assert all(now - 60 < r["ts"] <= now for r in whole)
