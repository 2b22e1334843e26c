"""`engineclock`: a decode step's and a prefill's cost from SGLang's own scheduler lines.

Synthetic logs are written the way SGLang 0.5.17 writes them (a `Decode batch` line every 40 decode steps,
its `gen throughput` the tokens since the last line over the time since it); the recorded ones are two steps
of session 26's seed search on a lent H100 (tests/fixtures/h200/telemetry/, copied unchanged from
`h200/h100-s26/certified/02-ucap/steps/` in docs/h200-evidence.tar.xz)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from servetune.bench.engineclock import DECODE_LOG_INTERVAL, engine_clock, intervals

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "telemetry"

A, B, P0, P1 = 0.0052, 0.00002, 0.028, 0.035
"""Seconds: a decode step at an empty batch, its growth per running request, a prefill batch, a request."""


def _log(seed: int, lines: int, *, steps: int = DECODE_LOG_INTERVAL, ms: bool = True) -> list[dict]:
    """A step's telemetry: prefill batches between decode lines, each decode line `steps` decode steps after
    the last, timed by the costs above; `steps` != 40 is a server that logs on another cadence."""
    rng = random.Random(seed)
    now, t0 = 1_796_539_775.0, 1_796_539_775.0
    batch = rng.randint(8, 50)
    out = [{"t": 0.0, "kind": "decode", "ts": now, "running_req": batch, "gen_throughput": 100.0}]
    for _ in range(lines):
        spent = 0.0
        for _ in range(rng.randint(0, 3)):
            n = rng.randint(1, 4)
            spent += P0 + P1 * n
            out.append({"t": now + spent - t0, "kind": "prefill", "ts": now + spent, "new_seq": n})
        nxt = max(1, batch + rng.randint(-6, 6))
        mean = (batch + nxt) / 2.0
        spent += steps * (A + B * mean)
        now += spent
        gen = steps * mean / spent
        ts = round(now, 3) if ms else float(int(now))
        out.append({"t": now - t0, "kind": "decode", "ts": ts, "running_req": nxt, "gen_throughput": gen})
        batch = nxt
    return out


def test_the_fit_reads_back_the_costs_a_log_was_written_with():
    clock = engine_clock([_log(1, 40), _log(2, 30)])
    assert clock is not None and clock.intervals == 70
    assert clock.decode_step_ms == pytest.approx(A * 1e3, rel=1e-6)
    assert clock.per_running_ms == pytest.approx(B * 1e3, rel=1e-5)
    assert clock.prefill_batch_ms == pytest.approx(P0 * 1e3, rel=1e-6)
    assert clock.prefill_request_ms == pytest.approx(P1 * 1e3, rel=1e-6)
    assert clock.r2 == pytest.approx(1.0)
    assert clock.prefill_ms_per_request == pytest.approx((P0 / clock.requests_per_batch + P1) * 1e3)
    assert clock.timed_ratio == pytest.approx(1.0, abs=1e-3)  # the stamps (to the ms) agree with 40 B / G


def test_lines_on_another_cadence_give_no_figures_where_the_stamps_say_so():
    """A server that logs every 100 decode steps (or by time, as servetune's stand-in does): 40 B / G is not
    the interval, and the millisecond stamps show it; with whole-second stamps nothing can tell."""
    assert engine_clock([_log(3, 40, steps=100)]) is None
    blind = engine_clock([_log(3, 40, steps=100, ms=False)])
    assert blind is not None and blind.timed_ratio is None


def test_too_few_intervals_or_no_prefill_give_no_figures():
    assert engine_clock([_log(4, 5)]) is None
    quiet = [line for line in _log(5, 40) if line["kind"] == "decode"]
    assert engine_clock([quiet]) is None


def test_on_sglangs_own_lines_the_fit_is_ordinary_least_squares_and_the_stamps_agree():
    """Two recorded steps of real SGLang 0.5.17 on an H100 (`SGLANG_LOG_MS`): the figures equal numpy's least
    squares over the same intervals, the intervals' 40 B / G matches their stamped lengths within 1%, and a
    decode step is a few milliseconds where a prefilled request costs tens."""
    steps = [[json.loads(x) for x in p.read_text().splitlines() if x.strip()] for p in sorted(RECORDED.glob("*.jsonl"))]
    assert len(steps) == 2
    rows = [r for s in steps for r in intervals(s)]
    x = np.array([[DECODE_LOG_INTERVAL, tokens, k, p] for _, tokens, k, p in rows], dtype=float)
    y = np.array([seconds for seconds, _, _, _ in rows])
    a, b, p0, p1 = np.linalg.lstsq(x, y, rcond=None)[0]
    clock = engine_clock(steps)
    assert clock is not None and clock.intervals == len(rows) >= 40
    assert (clock.decode_step_ms, clock.per_running_ms, clock.prefill_batch_ms, clock.prefill_request_ms) == (
        pytest.approx(a * 1e3),
        pytest.approx(b * 1e3, abs=1e-9),
        pytest.approx(p0 * 1e3),
        pytest.approx(p1 * 1e3),
    )
    assert clock.timed_ratio == pytest.approx(1.0, abs=0.01)
    assert 2.0 < clock.decode_step_ms < 10.0 and 20.0 < clock.prefill_ms_per_request < 100.0
