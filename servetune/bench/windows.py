"""Windows of a run: its steady-state stretch and rate, and how well the client kept to a schedule.

Runs of different length are not comparable: ramp-up and drain weigh more in a short run. Both
clients keep the workload's run shape fixed, and the builtin client also reports a **steady-state
window** (`steady_window`): the stretch where the server is fully loaded, after the first wave of
requests has completed and before the last request is sent, less the first and last `trim` fraction
of completions; its throughput is the rate of the completions inside it (`window_rate`: a
least-squares slope once the window holds `FIT_MIN_WAVES` waves, else completions over the window's
length). How far the fit and the count stray on batched servers is measured in docs/tuning.md
("The objective on a batched server") and tests/bench/test_metrics.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servetune.bench.schema import RequestRecord, SteadyWindow
from servetune.bench.stats import percentile

__all__ = [
    "FIT_MIN_WAVES",
    "client_pace",
    "fitted_rate",
    "lateness",
    "loop_lag",
    "offered_ratio",
    "steady_window",
    "window_rate",
]


def fitted_rate(times: Sequence[float]) -> float | None:
    """Completions per second from sorted completion times: the least-squares slope of the
    completion count over time. A batched server completes a wave of requests at a time, in
    bursts; completions over the window's length then depend on where the window's ends fall
    between two bursts, and the fitted slope less (docs/h200-results.md section 5 measures both).
    None when the times do not span an interval."""
    n = len(times)
    if n < 2:
        return None
    mean_t = math.fsum(times) / n
    var = math.fsum((t - mean_t) ** 2 for t in times)
    if var <= 0.0:
        return None
    mean_k = (n - 1) / 2
    return math.fsum((t - mean_t) * (k - mean_k) for k, t in enumerate(times)) / var


FIT_MIN_WAVES = 3
"""A finished window's rate is fitted (`fitted_rate`) once it holds this many waves (x concurrency) of
completions; a shorter one spans one or two bursts, and a slope fitted inside a burst means nothing."""


def window_rate(ends: Sequence[float], start: float, end: float, inside: int, concurrency: int | None) -> float:
    """A finished steady window's rate: the fitted slope over `ends` (every completion in [start,
    end]) when the window holds `FIT_MIN_WAVES` waves or the load is open (no concurrency), else
    the `inside` completions over its length."""
    if concurrency is None or inside >= FIT_MIN_WAVES * concurrency:
        fitted = fitted_rate(ends)
        if fitted:
            return fitted
    return inside / (end - start)


def steady_window(
    records: Sequence[RequestRecord], trim: float, concurrency: int | None = None, *, sending: bool = False
) -> SteadyWindow | None:
    """Throughput while the server is fully loaded, from per-request records.

    The window opens at the later of the `trim*n`-th completion and the `concurrency`-th one
    (the end of the first wave, which all started together), and closes at the earlier of the
    `(n-1-trim*n)`-th completion and the moment the last request was sent (from then on the
    load only drains). None when fewer than 3 completions fall inside.

    `sending=True` is for a partial window taken while the run still sends requests (`records`
    are the completions so far): nothing drains yet, so the window is not trimmed at the end and
    closes at the newest completion, or, once it holds a wave (`concurrency` completions), at
    the end of its last whole wave. Batched servers complete requests in bursts (a wave of them
    at a time); a window that ends inside a burst would count part of it over a whole burst's time.
    """
    done = sorted((r for r in records if r.success), key=lambda r: r.end)
    n = len(done)
    cut = int(n * trim)
    low = max(cut, (concurrency or 0) - 1)
    high = n - 1 - cut
    if sending:
        wave = concurrency or 0
        high = low + wave * ((n - 1 - low) // wave) if wave and n - 1 - low >= wave else n - 1
    if high - low < 3:
        return None
    start = done[low].end
    end = done[high].end if sending else min(done[high].end, max(r.start for r in records))
    inside = [r for r in done if start < r.end <= end]
    span = end - start
    if len(inside) < 3 or span <= 0:
        return None
    output = sum(r.output_len for r in inside)
    total = output + sum(r.prompt_len for r in inside)
    # a finished run: every completion in [start, end] (a burst at the start is not cut)
    rate = (
        len(inside) / span
        if sending
        else window_rate([r.end for r in done if start <= r.end <= end], start, end, len(inside), concurrency)
    )
    per_request = rate / len(inside)
    return SteadyWindow(
        trim=trim,
        start_s=start,
        end_s=end,
        completed=len(inside),
        request_throughput=rate,
        output_throughput=output * per_request,
        total_throughput=total * per_request,
    )


def offered_ratio(records: Sequence[RequestRecord]) -> float | None:
    """Scheduled over actual sending time of the arrivals that had a schedule (1.0: the client kept
    to it; below, it could not generate the load); None for fewer than two."""
    pace = client_pace(records)
    return None if pace is None else pace[0]


def client_pace(records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """(`offered_ratio`, seconds the client's sending fell behind its schedule's span) of the arrivals
    that had a schedule; None for fewer than two."""
    sched = [r for r in records if r.scheduled is not None]
    if len(sched) < 2:
        return None
    sent = sched[-1].start - sched[0].start
    if sent <= 0:
        return None
    span = sched[-1].scheduled - sched[0].scheduled
    return min(1.0, span / sent), max(0.0, sent - span)


def lateness(records: Sequence[RequestRecord]) -> dict[str, float]:
    """`lateness_*_ms` of the records that had a schedule (none without one)."""
    lags = sorted(r.lag * 1000.0 for r in records if r.scheduled is not None)
    if not lags:
        return {}
    return {
        "lateness_p50_ms": percentile(lags, 50),
        "lateness_p99_ms": percentile(lags, 99),
        "lateness_max_ms": lags[-1],
    }


def loop_lag(lags_s: Sequence[float]) -> dict[str, float]:
    """`loop_lag_p99_ms` and `loop_lag_max_ms` of the client's sampled event-loop lags (s; none without any)."""
    if not lags_s:
        return {}
    ordered = sorted(lag * 1000.0 for lag in lags_s)
    return {"loop_lag_p99_ms": percentile(ordered, 99), "loop_lag_max_ms": ordered[-1]}
