"""Front-end stalls (`servetune.bench.stalls`): read off recorded SGLang steps (tests/fixtures/h200/stalls/),
off made-up scheduler lines for each rule, through a search's step directories to the capacity table, and off
the stand-in's own front-end pause end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servetune.bench._builtin import load_requests
from servetune.bench.capacity import Capacity, CapacityStep
from servetune.bench.schema import RequestRecord
from servetune.bench.slo import parse_slos
from servetune.bench.stalls import AFTER_S, STALL_MIN_S, Stalls, frontend_stalls, search_stalls
from servetune.cli._capacity_view import print_capacity, stalls_line
from servetune.launch import read_telemetry
from servetune.runner._capacity import _with_engine_clock

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "stalls"
DEFAULTS = "defaults-s35-r2-07-13.4"
SEED = "seed-s35-r1-09-20.48"


def _step(name: str) -> tuple[list[dict], list]:
    return read_telemetry(RECORDED / f"{name}-telemetry.jsonl"), load_requests(RECORDED / f"{name}-requests.jsonl")


def test_the_recorded_stall_is_read_with_its_length_and_the_requests_it_held():
    telemetry, records = _step(DEFAULTS)
    stalls = frontend_stalls(telemetry, [r.start for r in records], step=7)
    first = stalls[0]
    assert first.step == 7 and 4.0 < first.at_s < 4.1 and first.seconds == pytest.approx(0.98, abs=0.01)
    assert first.held == 21
    # the requests it held: sent in it, their first token came after it ended, and they waited the longest
    held = [r for r in records if first.at_s <= r.start < first.at_s + first.seconds]
    assert len(held) == first.held
    assert all(r.start + r.ttft >= first.at_s + first.seconds for r in held if r.ttft > 0)
    # a second before it, requests waited a third as long (the four sent at 4.02-4.07, just before its first
    # held one, were held too: the prefill line that opens the gap was an earlier request's)
    before = [r.ttft for r in records if 3.0 <= r.start < 3.95 and r.ttft > 0]
    assert min(r.ttft for r in held if r.ttft > 0) > 1.5 * max(before)
    # nothing is read in the quiet part of the step before it
    assert all(s.at_s > 4.0 for s in stalls)


def test_a_gap_while_requests_queued_is_the_schedulers_not_the_front_ends():
    """The seed's step ran against its running limit of 55: prefill lines paused while requests queued. Those gaps
    are not stalls; with the queue counts blanked the same lines would read as several."""
    telemetry, records = _step(SEED)
    sends = [r.start for r in records]
    kept = frontend_stalls(telemetry, sends)
    blanked = frontend_stalls([{**x, "queue_req": 0} for x in telemetry], sends)
    assert len(blanked) >= len(kept) + 3
    assert all(k in blanked for k in kept)


def _sent(*starts: float) -> list[RequestRecord]:
    return [RequestRecord(start=t) for t in starts]


def _lines(*prefills: float, queue_at: float | None = None) -> list[dict]:
    out = [{"kind": "prefill", "t": t, "new_seq": 1, "queue_req": 0} for t in prefills]
    if queue_at is not None:
        out.append({"kind": "decode", "t": queue_at, "running_req": 8, "queue_req": 2})
    return sorted(out, key=lambda x: x["t"])


def test_each_rule_of_a_stall():
    sends = [1.10, 1.20, 1.30]
    (stall,) = frontend_stalls(_lines(1.0, 1.9), sends)
    assert (stall.at_s, stall.seconds, stall.held) == (1.10, pytest.approx(0.8), 3)
    # a queue in the gap: the scheduler held them
    assert frontend_stalls(_lines(1.0, 1.9, queue_at=1.5), sends) == []
    # a quiet spell, then three arrivals just before the next prefill: none of them waited long
    assert frontend_stalls(_lines(1.0, 1.9), [1.70, 1.75, 1.80]) == []
    # fewer than three held; or the client itself sent nothing in the gap
    assert frontend_stalls(_lines(1.0, 1.9), [1.1, 1.2]) == []
    assert frontend_stalls(_lines(1.0, 1.9), [0.9, 2.0]) == []
    # the scheduler lines of the warm-up wave before the step (t < 0) open no gap
    assert frontend_stalls(_lines(-1.0, 0.9), [0.1, 0.2, 0.3]) == []
    assert [s.held for s in frontend_stalls(_lines(0.0, 0.9), [0.1, 0.2, 0.3])] == [3]
    # the threshold is a wait of STALL_MIN_S
    assert frontend_stalls(_lines(1.0, 1.1 + STALL_MIN_S - 0.01), sends) == []


def test_a_stall_names_the_garbage_collection_it_overlapped():
    """A collection is logged when it ends (`t`), having lasted `seconds`: one that ended inside the stall, or
    began before it and ended after, overlaps it; one that ended before it does not."""
    sends = [1.10, 1.20, 1.30]
    lines = _lines(1.0, 1.9)

    def gc(end: float, seconds: float) -> dict:
        return {"kind": "gc", "t": end, "generation": 2, "seconds": seconds}

    assert frontend_stalls(lines, sends)[0].gc_s is None
    assert frontend_stalls([*lines, gc(1.6, 0.4)], sends)[0].gc_s == 0.4
    assert frontend_stalls([*lines, gc(2.5, 1.5), gc(1.5, 0.2)], sends)[0].gc_s == 1.5
    assert frontend_stalls([*lines, gc(1.05, 0.3)], sends)[0].gc_s is None
    searched = search_stalls([(1, [*lines, gc(1.6, 0.4), gc(8.0, 0.3)], _sent(*sends, 9.0), None)])
    assert searched is not None and searched.gc_logged == 2
    assert searched.describe().endswith("; 1 of them during one of the 2 long garbage collections it logged")
    plain = search_stalls([(1, lines, _sent(*sends, 9.0), None)])
    assert plain is not None and "garbage" not in plain.describe()


def test_the_requests_over_a_bound_are_counted_where_they_lived_near_a_stall():
    """On the seed's recorded step: every finished request after the warm-up span is counted once, over a bound or
    not, near a stall (arrival to end overlapping it or the 2 s after) or not: what a hand count of the same records
    reads."""
    telemetry, records = _step(SEED)
    slos = parse_slos(["p99_tpot_ms<=25", "p99_ttft_ms<=2000"])
    st = search_stalls([(9, telemetry, records, None)], slos=slos, warmup_s=5.0)
    assert st is not None and len(st.stalls) == 1
    windows = [(x.at_s, x.at_s + x.seconds + AFTER_S) for x in st.stalls]
    judged = [r for r in records if r.finished and r.arrival >= 5.0]

    def missed(r: RequestRecord) -> bool:
        return not r.success or (r.latency - r.ttft) / (r.output_len - 1) > 0.025 or r.ttft + r.lag > 2.0

    over = [r for r in judged if missed(r)]
    near = [r for r in judged if any(r.arrival <= b and r.end >= a for a, b in windows)]
    assert (st.judged, st.over, st.near) == (len(judged), len(over), len(near)) and st.judged > 200 and st.over > 0
    assert st.over_near == sum(1 for r in over if r in near)
    assert (
        f"; {st.over_near} of the {st.over} requests over a bound lived through one or the 2 s after" in st.describe()
    )
    # without SLOs nothing is counted, and nothing is said of it
    plain = search_stalls([(9, telemetry, records, None)])
    assert plain is not None and plain.judged == 0 and "requests over a bound" not in plain.describe()


def test_requests_the_verdict_counted_over_in_flight_are_counted_until_the_steps_end():
    """The defaults' recorded step was missed 9.43 s in on "3 of 3 over, within one span": three requests sent
    after the warm-up span whose decode so far had already used their whole TPOT budget, stopped unfinished with
    the step. Given the step's end, those three are the requests over a bound, and each lived through the 0.98 s
    stall's 2 s after; read from finished requests alone, the step counts none (none of its finished ones was over)."""
    telemetry, records = _step(DEFAULTS)
    slos = parse_slos(["p99_tpot_ms<=25", "p99_ttft_ms<=2000"])
    ended = 9.43471109699999  # the step's verdict.json at_s (docs/h200-results.md section 33, step 07)

    def decoding_over(r: RequestRecord) -> bool:  # the TPOT in-flight rule by hand
        return not r.finished and r.ttft > 0 and ended - r.start - r.ttft > 0.025 * (r.output_len - 1)

    by_hand = [r for r in records if r.arrival >= 5.0 and r.arrival <= ended and decoding_over(r)]
    st = search_stalls([(7, telemetry, records, ended)], slos=slos, warmup_s=5.0)
    assert st is not None and len(by_hand) == 3
    assert (st.over, st.over_near) == (3, 3)
    worst = st.longest
    assert worst is not None and worst.seconds == pytest.approx(0.98, abs=0.01)
    assert all(r.arrival <= worst.at_s + worst.seconds + AFTER_S for r in by_hand)
    assert "3 of the 3 requests over a bound lived through one" in st.describe()
    finished_only = search_stalls([(7, telemetry, records, None)], slos=slos, warmup_s=5.0)
    assert finished_only is not None and finished_only.over == 0 and finished_only.stalls == st.stalls
    # a request still within its budget at the end is open, not judged
    assert st.judged == sum(1 for r in records if r.arrival >= 5.0 and (r.finished or decoding_over(r)))


def test_a_search_without_the_servers_lines_has_no_stall_figure():
    assert search_stalls([(1, [], _sent(0.0, 1.0), None)]) is None
    none = search_stalls([(1, _lines(0.0, 0.2, 0.4), _sent(0.0, 0.1, 0.3, 10.0), None)])
    assert none is not None and none.stalls == [] and none.span_s == 10.0
    assert "at no time in 10 s of steps (1 read)" in none.describe()


def test_the_search_records_its_stalls_in_capacity_json_and_prints_them(tmp_path, capsys):
    steps = []
    for i, (name, rate) in enumerate([(DEFAULTS, 13.4), (SEED, 20.48)], start=1):
        step_dir = tmp_path / "steps" / f"{i:02d}-{rate:.4g}"
        step_dir.mkdir(parents=True)
        shutil.copy(RECORDED / f"{name}-telemetry.jsonl", step_dir / "telemetry.jsonl")
        shutil.copy(RECORDED / f"{name}-requests.jsonl", step_dir / "requests.jsonl")
        steps.append(CapacityStep(index=i, rate=rate, state="missed", met=False, run_dir=str(step_dir)))
    cap = Capacity(slos=["p99_tpot_ms<=25"], request_rate=None, certified=False, goodput=None, verdicts=[],
                   lowest_missed=13.4, resolution=0.05, steps=steps, bench_s=0.0)  # fmt: skip
    cap = _with_engine_clock(cap)
    assert cap.stalls is not None and cap.stalls.steps == 2
    by_step = {s.step for s in cap.stalls.stalls}
    assert by_step == {1, 2}
    telemetry, records = _step(DEFAULTS)
    assert [s for s in cap.stalls.stalls if s.step == 1] == frontend_stalls(
        telemetry, [r.start for r in records], step=1
    )
    assert Capacity.model_validate_json(cap.model_dump_json()).stalls == cap.stalls  # capacity.json keeps them
    line = stalls_line(cap.stalls)
    assert line is not None and line.startswith("stalls       SGLang's front end held arrivals from its scheduler ")
    longest = cap.stalls.longest
    assert longest is not None and f"the longest {longest.seconds:.2f} s ({longest.held} held, step 1 at " in line
    assert f"{len(cap.stalls.stalls)} time(s)" in line
    # the step table names each step's stalls beside its verdict
    print_capacity(cap, None, [])
    out = capsys.readouterr().out
    header = next(x for x in out.splitlines() if "rate req/s" in x)
    assert "┃ stalls " in header
    first = [s.seconds for s in cap.stalls.stalls if s.step == 1]
    assert len(first) == 2 and f"2, longest {max(first):.2f} s" in out.replace("\n", " ")


def test_the_stand_ins_front_end_pause_is_found_in_a_soak_end_to_end(tmp_path):
    """The stand-in holds new requests 0.8 s once every 3 s (`SERVETUNE_STANDIN_FRONTEND_PAUSE`): a soak of
    `bench --url` reads its log and requests and reports about one stall per pause; the same soak of the
    stand-in without the pause reads none."""
    from servetune.launch import LaunchOptions, start_server

    found = {}
    for label, pause in (("paused", "3:0.8"), ("steady", None)):
        options = LaunchOptions(
            sglang_cmd=[sys.executable, "-m", "servetune.testing.standin"], run_dir=tmp_path / label / "server",
            wait_gpu_release=False,
        )  # fmt: skip
        env = {"SERVETUNE_STANDIN_TIME_SCALE": "0.125"} | ({"SERVETUNE_STANDIN_FRONTEND_PAUSE": pause} if pause else {})
        server = start_server(["--model-path", "m", "--max-running-requests", "64"], env, {}, options)
        try:
            argv = [
                sys.executable, "-m", "servetune", "bench", "--url", server.url, "--workload", "text-chat",
                "--slo", "p90_ttft_ms<=2000", "--server-log", str(server.log_path), "--step-warmup-seconds", "1",
                "--backlog-seconds", "3", "--warmup-wave", "4", "--soak-seconds", "15", "--request-rate", "6",
                "--run-dir", str(tmp_path / label),
            ]  # fmt: skip
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ})
            assert out.returncode == 0, out.stderr
        finally:
            server.stop()
        recorded = json.loads((tmp_path / label / "soak.json").read_text())
        found[label] = (Stalls.model_validate(recorded["stalls"]), out.stdout)
    paused, stdout = found["paused"]
    pauses = paused.span_s / 3.0
    assert 0.5 * pauses <= len(paused.stalls) <= pauses + 1
    assert all(STALL_MIN_S <= s.seconds <= 1.0 for s in paused.stalls)
    assert "\nstalls       SGLang's front end held arrivals from its scheduler " in stdout and ", soak 1 at " in stdout
    steady, stdout = found["steady"]
    assert steady.stalls == [] and steady.steps == 1 and "at no time in" in stdout
