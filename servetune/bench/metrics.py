"""Benchmark metrics: one typed object for both clients, with SGLang's names and definitions.

Definitions follow SGLang's client (`sglang/benchmark/serving.py`, `calculate_metrics`):

- **TTFT**: from sending the request to the first streamed chunk that carries content.
- **ITL**: every gap between two consecutive content chunks (pooled over all requests).
- **E2E latency**: from sending the request to the last chunk received (`[DONE]` included).
- **TPOT**: per request `(e2e - ttft) / (output_tokens - 1)`, for requests with > 1 token.
- Percentiles interpolate linearly between order statistics (numpy's default); `std` is the
  population standard deviation. A statistic over no samples is 0.0, as in SGLang.
- **Throughput** (whole run): completed requests, or tokens of completed requests, divided
  by `duration_s`, the time from the first measured request to the last completion
  (warmup excluded).

Runs of different length are not comparable: ramp-up and drain weigh more in a short run.
Both clients keep the workload's run shape fixed, and the builtin client also reports a
**steady-state window** (`steady`, see `steady_window`): the stretch where the server is
fully loaded, after the first wave of requests has completed and before the last request is
sent, less the first and last `steady_trim` fraction of completions; its throughput is the
rate of the completions inside it (`window_rate`: a least-squares slope once the window holds
three waves, else completions over the window's length). `comparable_request_throughput()`
is what the tuner should rank by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servetune.bench.slo import LatencySlo, SloReport, judge

STATS = ("mean", "median", "std", "p90", "p95", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2e_latency")


class SteadyWindow(BaseModel):
    """Throughput over the fully loaded part of a run (no ramp-up, no drain)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    trim: float
    """Fraction of completions left out at each end."""
    start_s: float
    """Window start, seconds after the first measured request was sent."""
    end_s: float
    """Window end, seconds after the first measured request was sent."""
    completed: int
    """Completions inside the window (the one that opens it is not counted)."""
    request_throughput: float
    """Completions per second inside the window (req/s): for a finished run that holds three waves
    or more, the slope of the completion count over time fitted by least squares (`window_rate`);
    else, and for a partial window taken while requests are still being sent, completions over
    the window's length."""
    output_throughput: float
    """Output tokens of the requests completed inside the window, per second (tok/s)."""
    total_throughput: float
    """Input plus output tokens of the requests completed inside the window, per second (tok/s)."""


class Metrics(BaseModel):
    """The result of one benchmark run (both clients), in req/s, tok/s and ms."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    client: Literal["builtin", "sglang"]
    """Which client measured: servetune's own (`builtin`) or SGLang's `bench_serving`."""
    workload: str | None = None
    """Workload name."""
    url: str | None = None
    """Server base URL."""
    model: str | None = None
    """Model id sent in the requests."""
    requests: int
    """Measured requests planned (warmup excluded)."""
    max_concurrency: int | None = None
    """Requests in flight at most; None = unbounded."""
    request_rate: float | None = None
    """Poisson arrival rate (req/s); None = as fast as concurrency allows."""
    warmup_requests: int = 0
    """Requests sent before measuring, not counted."""
    completed: int
    """Requests that finished successfully."""
    failed: int
    """Requests that got an HTTP error, a broken stream or a timeout."""
    stopped_early: bool = False
    """The run was cut short by `should_stop` (the tuner pruned it); figures cover what finished."""
    duration_s: float
    """From the first measured request sent to the last completion, in seconds."""
    total_input_tokens: int
    """Prompt tokens of completed requests (image tokens included when the server counts them)."""
    total_output_tokens: int
    """Generated tokens of completed requests."""
    input_tokens_source: Literal["server", "client"] = "server"
    """`server`: the server's `usage.prompt_tokens`; `client`: the client's own count or estimate."""
    request_throughput: float
    """Completed requests per second over the whole run (req/s)."""
    input_throughput: float
    """Input tokens per second over the whole run (tok/s)."""
    output_throughput: float
    """Output tokens per second over the whole run (tok/s)."""
    total_throughput: float
    """Input plus output tokens per second over the whole run (tok/s)."""
    mean_ttft_ms: float = 0.0
    """Mean time to first token (ms)."""
    median_ttft_ms: float = 0.0
    """Median time to first token (ms)."""
    std_ttft_ms: float = 0.0
    """Standard deviation of time to first token (ms)."""
    p90_ttft_ms: float = 0.0
    """90th percentile time to first token (ms)."""
    p95_ttft_ms: float = 0.0
    """95th percentile time to first token (ms)."""
    p99_ttft_ms: float = 0.0
    """99th percentile time to first token (ms)."""
    mean_tpot_ms: float = 0.0
    """Mean time per output token after the first (ms)."""
    median_tpot_ms: float = 0.0
    """Median time per output token after the first (ms)."""
    std_tpot_ms: float = 0.0
    """Standard deviation of time per output token (ms)."""
    p90_tpot_ms: float = 0.0
    """90th percentile time per output token (ms)."""
    p95_tpot_ms: float = 0.0
    """95th percentile time per output token (ms)."""
    p99_tpot_ms: float = 0.0
    """99th percentile time per output token (ms)."""
    mean_itl_ms: float = 0.0
    """Mean inter-token latency: gap between streamed chunks (ms)."""
    median_itl_ms: float = 0.0
    """Median inter-token latency (ms)."""
    std_itl_ms: float = 0.0
    """Standard deviation of inter-token latency (ms)."""
    p90_itl_ms: float = 0.0
    """90th percentile inter-token latency (ms)."""
    p95_itl_ms: float = 0.0
    """95th percentile inter-token latency (ms)."""
    p99_itl_ms: float = 0.0
    """99th percentile inter-token latency (ms)."""
    mean_e2e_latency_ms: float = 0.0
    """Mean end-to-end request latency (ms)."""
    median_e2e_latency_ms: float = 0.0
    """Median end-to-end request latency (ms)."""
    std_e2e_latency_ms: float = 0.0
    """Standard deviation of end-to-end latency (ms)."""
    p90_e2e_latency_ms: float = 0.0
    """90th percentile end-to-end latency (ms)."""
    p95_e2e_latency_ms: float = 0.0
    """95th percentile end-to-end latency (ms)."""
    p99_e2e_latency_ms: float = 0.0
    """99th percentile end-to-end latency (ms)."""
    concurrency: float = 0.0
    """Mean requests in flight: sum of E2E latencies over the duration."""
    steady: SteadyWindow | None = None
    """Steady-state window figures (builtin client; None when too few completions)."""
    started_at: float | None = None
    """Builtin client: the wall-clock time (Unix seconds) of the run's clock zero, its first measured
    send; the times of `requests.jsonl` and a server log's lines line up through it."""
    warmup_s: float | None = None
    """Wall time of the warm-up requests sent before the measured ones (builtin client)."""
    client_prep_s: float | None = None
    """Client's own preparation time, in seconds: for `builtin`, building request bodies (images
    included) in worker threads, ahead of the send loop; for `sglang`, the client's wall time
    outside the measured window (dataset and images, processor, warmup)."""
    text_tokens_per_word: float | None = None
    """Builtin client: the server tokenizer's tokens per prompt word, measured before the run
    to size prompts (None: not measured, one token per word assumed)."""
    images_sent: int = 0
    """Images sent in measured requests."""
    errors: list[str] = Field(default_factory=list)
    """Up to five distinct error messages of failed requests."""
    offered_ratio: float | None = None
    """Poisson runs: the scheduled over the actual sending time of the arrivals (1.0: the client sent at the
    rate asked; below, it could not generate the load, and the run measured a lower rate than it names)."""
    lateness_p50_ms: float | None = None
    """Poisson runs: the median of how late the client sent each arrival after its schedule (ms).
    SLO verdicts time TTFT and E2E from the schedule, so lateness counts against the server."""
    lateness_p99_ms: float | None = None
    """Poisson runs: the 99th percentile of the client's lateness (ms)."""
    lateness_max_ms: float | None = None
    """Poisson runs: the largest lateness of one arrival (ms)."""
    slo: SloReport | None = None
    """The run against the `--slo` bounds: verdicts, goodput (req/s that met every bound) and attainment."""

    def comparable_request_throughput(self) -> float:
        """The figure to rank configs by: the steady-window req/s when known, else whole-run req/s."""
        return self.steady.request_throughput if self.steady is not None else self.request_throughput

    def comparable_output_throughput(self) -> float:
        """Steady-window output tok/s when known, else whole-run output tok/s."""
        return self.steady.output_throughput if self.steady is not None else self.output_throughput


@dataclass(slots=True)
class RequestRecord:
    """What one request measured (the builtin client's raw data), times in seconds."""

    success: bool = False
    start: float = 0.0
    """Send time, seconds after the first measured request was sent."""
    ttft: float = 0.0
    """From the send to the first generated text (s); set as soon as it arrives, 0.0 before."""
    latency: float = 0.0
    """From the send to the last chunk (s); set when the request finishes."""
    itl: list[float] = field(default_factory=list)
    output_len: int = 0
    """Generated tokens (the requested count until the server's usage says otherwise)."""
    prompt_len: int = 0
    prompt_len_from_server: bool = False
    images: int = 0
    error: str = ""
    scheduled: float | None = None
    """When a Poisson arrival was due, on the same clock as `start` (None: no schedule)."""
    finished: bool = False
    """The request ended (completed or failed); False while in flight, or when it was cancelled."""

    @property
    def end(self) -> float:
        return self.start + self.latency

    @property
    def arrival(self) -> float:
        """When the request arrived: its scheduled time, else its send."""
        return self.start if self.scheduled is None else self.scheduled

    @property
    def lag(self) -> float:
        """How late the client sent it (s): send minus schedule, 0 without a schedule."""
        return 0.0 if self.scheduled is None else max(0.0, self.start - self.scheduled)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of already sorted values, interpolated linearly like numpy."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    position = (n - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, n - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize(values: Sequence[float]) -> dict[str, float]:
    """mean, median, std (population), p90, p95, p99 of `values` (0.0 each when empty)."""
    if not values:
        return dict.fromkeys(STATS, 0.0)
    ordered = sorted(values)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    variance = math.fsum((v - mean) ** 2 for v in ordered) / n
    return {
        "mean": mean,
        "median": percentile(ordered, 50),
        "std": math.sqrt(variance),
        "p90": percentile(ordered, 90),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
    }


def fitted_rate(times: Sequence[float]) -> float | None:
    """Completions per second from sorted completion times: the least-squares slope of the
    completion count over time. A batched server completes a wave of requests at a time, in
    bursts; completions over the window's length then depend on where the window's ends fall
    between two bursts, and the fitted slope less (three runs of one config on the H200, every
    request recorded: spread 6.0% counted over the window, 3.7% fitted; docs/h200-results.md
    section 5). None when the times do not span an interval."""
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
    the `inside` completions over its length. On bursty synthetic servers (tests/bench), the fit
    stayed within 1.2% of the true rate at 768 requests x 64 clients and 5.7% at 384; counting,
    6.5% and 14%."""
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
    at a time); a window that ends inside a burst counts part of it over a whole burst's time
    (measured on the stand-in: half a wave read 60-64% of the full run's throughput).
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
    sched = [r for r in records if r.scheduled is not None]
    if len(sched) < 2:
        return None
    sent = sched[-1].start - sched[0].start
    if sent <= 0:
        return None
    return min(1.0, (sched[-1].scheduled - sched[0].scheduled) / sent)


def _lateness(records: Sequence[RequestRecord]) -> dict[str, float]:
    """`lateness_*_ms` of the records that had a schedule (none without one)."""
    lags = sorted(r.lag * 1000.0 for r in records if r.scheduled is not None)
    if not lags:
        return {}
    return {
        "lateness_p50_ms": percentile(lags, 50),
        "lateness_p99_ms": percentile(lags, 99),
        "lateness_max_ms": lags[-1],
    }


def compute_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    requests: int,
    trim: float = 0.1,
    sending: bool = False,
    slos: Sequence[LatencySlo] = (),
    **info,
) -> Metrics:
    """Metrics from the builtin client's per-request records, with SGLang's definitions.

    `info` fills the descriptive fields (client, workload, url, model, max_concurrency,
    request_rate, warmup_requests, stopped_early, client_prep_s). `sending`: partial metrics
    taken while requests are still being sent (see `steady_window`). `slos`: judge the run
    against these bounds (`Metrics.slo`: verdicts, goodput, attainment).
    """
    ok = [r for r in records if r.success]
    duration = max(duration_s, 1e-9)
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    latencies = {
        "ttft": [r.ttft for r in ok],
        "tpot": [(r.latency - r.ttft) / (r.output_len - 1) for r in ok if r.output_len > 1],
        "itl": [gap for r in ok for gap in r.itl],
        "e2e_latency": [r.latency for r in ok],
    }
    stats = {
        f"{stat}_{name}_ms": value * 1000.0
        for name, values in latencies.items()
        for stat, value in summarize(values).items()
    }
    errors: list[str] = []
    for r in records:
        if not r.success and r.error and r.error not in errors and len(errors) < 5:
            errors.append(r.error)
    return Metrics(
        client=info.pop("client", "builtin"),
        requests=requests,
        completed=len(ok),
        failed=sum(1 for r in records if not r.success),
        duration_s=duration_s,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        input_tokens_source="server" if ok and all(r.prompt_len_from_server for r in ok) else "client",
        request_throughput=len(ok) / duration,
        input_throughput=total_in / duration,
        output_throughput=total_out / duration,
        total_throughput=(total_in + total_out) / duration,
        concurrency=math.fsum(latencies["e2e_latency"]) / duration,
        steady=steady_window(records, trim, info.get("max_concurrency"), sending=sending),
        images_sent=sum(r.images for r in ok),
        errors=errors,
        slo=judge(slos, records, duration) if slos else None,
        **_lateness(records),
        **stats,
        **info,
    )
