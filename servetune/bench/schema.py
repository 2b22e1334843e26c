"""The benchmark's result schema, shared by both clients: `Metrics` (SGLang's names; how each figure is
defined and computed: `servetune.bench.metrics`), its `SteadyWindow` (`servetune.bench.windows`), and
`RequestRecord`, what the builtin client measured of one request. Data only: no statistics, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servetune.bench.slo import SloReport

__all__ = ["LATENCIES", "SUMMARY_STATS", "Metrics", "RequestRecord", "SteadyWindow"]

SUMMARY_STATS = ("mean", "median", "std", "p90", "p95", "p99")
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
    loop_lag_p99_ms: float | None = None
    """Builtin client: the 99th percentile of its event loop's lag (ms), sampled every `LOOP_TICK_S`: how
    long a timer due then waited for the loop. The loop sends the arrivals and reads the first tokens, so
    a lag counts into lateness and into TTFT; a TTFT that grows while this stays small grew in the server."""
    loop_lag_max_ms: float | None = None
    """Builtin client: the longest lag of its event loop (ms)."""
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
