"""`benchmarks/decode_intervals.py` and the fit it prints (`servetune.bench.engineclock`, which `bench --capacity`
reports as `engine`): the decode step's and a prefill batch's costs, read back from the intervals between
SGLang's decode lines (their `gen throughput` times each interval). Synthetic lines in SGLang 0.5.17's shape,
written by `launch._telemetry.write_telemetry` from a scheduler whose costs are known, are read back by the fit
and by the script; stamped to the millisecond, their stamps agree with it."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from servetune.bench.engineclock import engine_clock, intervals, stamped_ratios
from servetune.launch._telemetry import write_telemetry

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "decode_intervals.py"
COSTS = (0.0035, 0.00002, 0.034, 0.029)
"""a, b (s per running request), p0 (s per prefill batch), p1 (s per prefilled request): near the H200's."""


def _step(seed: int, queued: bool) -> list[dict]:
    """A scheduler's lines over 60 intervals: prefill batches of 1-2 requests (unbounded) or 2-4 (a queue
    behind a running limit), then a decode line whose `gen throughput` is the interval's tokens over its time."""
    a, b, p0, p1 = COSTS
    rng = random.Random(seed)
    lines, now, batch = [], 1_000.0, 20
    lines.append({"kind": "decode", "ts": now, "running_req": batch, "gen_throughput": 1000.0})
    for _ in range(60):
        start = batch
        seconds = 0.0
        for _ in range(rng.randint(0, 4)):
            k = rng.randint(2, 4) if queued else rng.randint(1, 2)
            seconds += p0 + p1 * k
            batch = min(batch + k, 74)
            lines.append({"kind": "prefill", "ts": now + seconds, "new_seq": k, "running_req": batch})
        batch = max(4, batch - rng.randint(0, 5))
        mean = (start + batch) / 2
        seconds += 40 * (a + b * mean)
        now += seconds
        lines.append({"kind": "decode", "ts": now, "running_req": batch, "gen_throughput": 40 * mean / seconds})
    return lines


@pytest.mark.parametrize("queued", [False, True])
def test_the_fit_reads_back_the_costs_that_timed_the_intervals(queued):
    clock = engine_clock([[{**x, "t": 1.0} for x in _step(seed, queued)] for seed in range(3)])
    assert clock is not None and clock.intervals == 180
    read = [clock.decode_step_ms, clock.per_running_ms, clock.prefill_batch_ms, clock.prefill_request_ms]
    assert read == pytest.approx([c * 1e3 for c in COSTS], rel=1e-6, abs=1e-6) and clock.r2 > 0.999


def test_lines_before_the_steps_start_are_not_read():
    lines = _step(0, False)
    timed = [{**x, "t": -1.0 if i < 10 else 1.0} for i, x in enumerate(lines)]
    whole = intervals([{**x, "t": 1.0} for x in lines])
    assert 0 < len(intervals(timed)) < len(whole)


def test_the_script_prints_one_row_per_run(tmp_path):
    for name, queued in (("unbounded", False), ("limited", True)):
        step = tmp_path / name / "steps" / "01-12"
        step.mkdir(parents=True)
        write_telemetry(step / "telemetry.jsonl", _step(1, queued), t0=999.0)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "unbounded"), str(tmp_path / "limited")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" | ") for line in proc.stdout.splitlines()[1:]]
    assert [Path(r[0]).name for r in rows] == ["unbounded", "limited"]
    for r in rows:
        assert float(r[1]) == 60 and float(r[2]) == pytest.approx(3.5, abs=0.01)
        assert float(r[4]) == pytest.approx(34.0, abs=0.1) and float(r[5]) == pytest.approx(29.0, abs=0.1)
    per_request = [float(r[8]) for r in rows]
    assert per_request[1] < per_request[0]  # larger batches: the fixed cost spread over more requests
    assert [r[10] for r in rows] == ["1.000", "1.000"]  # stamped to the millisecond: the same lengths


def test_whole_second_stamps_give_no_stamped_check():
    """Stamped to the second (SGLang without `SGLANG_LOG_MS`), an interval's length is not on its stamps."""
    lines = [{**x, "t": 1.0} for x in _step(2, False)]
    assert stamped_ratios(lines) == pytest.approx([1.0] * 60)
    assert stamped_ratios([{**x, "ts": float(int(x["ts"]))} for x in lines]) == []


def test_the_budget_accounts_for_every_second_where_the_fit_is_exact(tmp_path):
    """`--budget`: per step, decode and prefill time by the run's fit; with the lines written from known costs
    the two add up to the intervals' own length (1.00 s per s), and the step whose prefill batches hold 2-4
    requests (not 1-2) spends the larger share of each second in prefill."""
    for name, queued in (("unbounded", False), ("limited", True)):
        step = tmp_path / name / "steps" / "01-12"
        step.mkdir(parents=True)
        write_telemetry(step / "telemetry.jsonl", _step(1, queued), t0=999.0)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--budget", str(tmp_path / "unbounded"), str(tmp_path / "limited")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\n\n", 1)[1].splitlines()
    assert table[0].startswith("run | step | decode steps/s")
    rows = [line.split(" | ") for line in table[1:]]
    assert [(Path(r[0]).name, r[1]) for r in rows] == [("unbounded", "01-12"), ("limited", "01-12")]
    assert all(r[7] == "1.00" for r in rows)
    assert float(rows[1][6]) > float(rows[0][6])
