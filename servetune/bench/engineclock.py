"""What a decode step and a prefill batch cost on this machine, timed by SGLang's own scheduler.

SGLang logs a `Decode batch` line every `--decode-log-interval` (40) decode steps, with the running batch B
and `gen throughput`: the tokens generated since the last decode line over the time since it, by the
scheduler's clock. With about 40 x B tokens generated (B averaged over the interval's two ends), the interval
lasted 40 B / G seconds. What filled it: 40 decode steps, and the prefill batches whose lines came between the
two decode lines. Over every interval of a capacity search

    interval = 40 a + b (40 B) + p0 (prefill batches) + p1 (prefilled requests)

and a least-squares fit gives the decode step at an empty batch (a), its growth per running request (b), and a
prefill batch's fixed (p0) and per-request (p1) cost. A prefilled request costs p0 / k + p1 at the search's
mean of k requests a batch.

Why it is reported: on four lent H100s that NVML and SGLang's `/server_info` could not tell apart, one config's
certified capacity read 11.26-21.94 req/s, and this clock put the difference in prefill (37.9-58.0 ms a request)
with the decode step within 11% (docs/h200-results.md sections 26-27). A capacity belongs to its machine; these
figures say which part of the machine.

The fit is trusted only where the decode lines really are 40 steps apart: where the log is stamped to the
millisecond (`SGLANG_LOG_MS`, which `servetune launch` sets), each interval's 40 B / G is checked against its
stamped length, and a median ratio outside `TIMED_RATIO` (another `--decode-log-interval`, or a server that logs
by time, as servetune's stand-in does) gives no figures. `benchmarks/decode_intervals.py` prints them for
recorded runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["DECODE_LOG_INTERVAL", "EngineClock", "engine_clock", "intervals", "stamped_ratios"]

DECODE_LOG_INTERVAL = 40
"""SGLang's default `--decode-log-interval`: decode steps between two `Decode batch` lines."""
MIN_INTERVALS = 8
"""Intervals a fit needs."""
TIMED_RATIO = (0.8, 1.25)
"""The median of 40 B / G over an interval's stamped length must fall here (1.000 on SGLang 0.5.17: sessions
22-26 read 0.998-1.003)."""

Interval = tuple[float, float, int, int]
"""(seconds, tokens 40 x B, prefill batches, prefilled requests)."""


class EngineClock(BaseModel):
    """A decode step's and a prefill's cost by SGLang's clock, fitted over one search's steps (module docstring)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    intervals: int
    """Decode-line intervals fitted."""
    decode_step_ms: float
    """a: one decode step at an empty batch (ms)."""
    per_running_ms: float
    """b: its growth per running request (ms; near 0 with CUDA graphs)."""
    prefill_batch_ms: float
    """p0: a prefill batch's fixed cost (ms; undetermined where batches rarely hold more than one request)."""
    prefill_request_ms: float
    """p1: its cost per request (ms)."""
    requests_per_batch: float
    """Mean requests per prefill batch over the search."""
    prefill_ms_per_request: float
    """p0 / k + p1 at that mean k: what a prefilled request cost here (ms)."""
    r2: float
    """Share of the intervals' variance the fit explains."""
    timed_ratio: float | None = None
    """Median of 40 B / G over each interval's stamped length (None: the log was stamped to the second)."""


def _tokens(prev: Mapping[str, Any], line: Mapping[str, Any]) -> float:
    """The tokens generated between two decode lines: 40 decode steps at the mean of their two batches."""
    return DECODE_LOG_INTERVAL * (float(prev.get("running_req") or 0) + float(line.get("running_req") or 0)) / 2.0


def intervals(telemetry: Iterable[Mapping[str, Any]]) -> list[Interval]:
    """Every pair of consecutive decode lines that ends after the step's start (`t` >= 0), with the prefill
    lines between them (`telemetry`: one step's records, as `telemetry.jsonl` holds them)."""
    rows: list[Interval] = []
    prev: Mapping[str, Any] | None = None
    batches = requests = 0
    for line in telemetry:
        if line.get("kind") == "prefill":
            batches += 1
            requests += int(line.get("new_seq") or 0)
            continue
        if line.get("kind") != "decode":
            continue
        gen = float(line.get("gen_throughput") or 0.0)
        if prev is not None and gen > 0 and float(line.get("t", -1.0)) >= 0.0:
            tokens = _tokens(prev, line)
            rows.append((tokens / gen, tokens, batches, requests))
        prev, batches, requests = line, 0, 0
    return rows


def stamped_ratios(telemetry: Iterable[Mapping[str, Any]]) -> list[float]:
    """Each interval's 40 B / G over its length by the decode lines' own stamps, where they carry
    milliseconds; [] where every stamp is a whole second."""
    decode = [x for x in telemetry if x.get("kind") == "decode" and float(x.get("t", -1.0)) >= 0.0]
    if not any(float(x.get("ts", 0.0)) % 1 for x in decode):
        return []
    out = []
    for prev, line in zip(decode, decode[1:]):
        gen, length = float(line.get("gen_throughput") or 0.0), float(line["ts"]) - float(prev["ts"])
        if gen > 0 and length > 0:
            out.append(_tokens(prev, line) / gen / length)
    return out


def _least_squares(rows: Sequence[Interval]) -> tuple[list[float], float] | None:
    """(a, b, p0, p1) in seconds and R^2 over `rows`; None where the system is singular."""
    from servetune.bench.servermodel import _solve

    xs = [(float(DECODE_LOG_INTERVAL), tokens, float(k), float(p)) for _, tokens, k, p in rows]
    ys = [seconds for seconds, _, _, _ in rows]
    xtx = [[sum(x[i] * x[j] for x in xs) for j in range(4)] for i in range(4)]
    xty = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(4)]
    coef = _solve(xtx, xty)
    if coef is None:
        return None
    mean = statistics.fmean(ys)
    total = sum((y - mean) ** 2 for y in ys)
    residual = sum((y - sum(c * v for c, v in zip(coef, x))) ** 2 for x, y in zip(xs, ys))
    return coef, (1.0 - residual / total) if total > 0 else 0.0


def engine_clock(steps: Iterable[Sequence[Mapping[str, Any]]]) -> EngineClock | None:
    """The fit over the telemetry of a search's steps (one record list per step); None with fewer than
    `MIN_INTERVALS` intervals, no prefill, a singular fit, or stamps that say the lines are not 40 decode
    steps apart (`TIMED_RATIO`)."""
    rows: list[Interval] = []
    ratios: list[float] = []
    for telemetry in steps:
        rows += intervals(telemetry)
        ratios += stamped_ratios(telemetry)
    batches, requests = sum(r[2] for r in rows), sum(r[3] for r in rows)
    if len(rows) < MIN_INTERVALS or not batches:
        return None
    timed = statistics.median(ratios) if ratios else None
    if timed is not None and not TIMED_RATIO[0] <= timed <= TIMED_RATIO[1]:
        return None
    fitted = _least_squares(rows)
    if fitted is None:
        return None
    (a, b, p0, p1), r2 = fitted
    size = requests / batches
    return EngineClock(
        intervals=len(rows), decode_step_ms=a * 1e3, per_running_ms=b * 1e3, prefill_batch_ms=p0 * 1e3,
        prefill_request_ms=p1 * 1e3, requests_per_batch=size, prefill_ms_per_request=(p0 / size + p1) * 1e3,
        r2=r2, timed_ratio=timed,
    )  # fmt: skip
