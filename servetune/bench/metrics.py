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
- **Steady window** (`steady`): the stretch where the server is fully loaded
  (`servetune.bench.windows`); `Metrics.comparable_request_throughput()` is what the tuner ranks by.

The schema is `servetune.bench.schema`; this module computes it from the builtin client's records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from servetune.bench.schema import SUMMARY_STATS, Metrics, RequestRecord
from servetune.bench.slo import LatencySlo, judge
from servetune.bench.stats import percentile
from servetune.bench.windows import lateness, steady_window

__all__ = ["Snapshot", "compute_metrics", "summarize"]


class Snapshot:
    """The metrics of the first `done` completions of a running benchmark, computed when first asked
    (`metrics()`, then kept): what its hooks (`on_progress`, `should_stop`) are given.

    Computing them pools every record so far (546,000 ITL gaps at 4,300 streamed requests, about 250 ms;
    seconds at 100,000), on the client's send loop, where every millisecond is a late send and a late
    read. A hook that does not read them (the progress display, the runaway guard) costs nothing; the
    tuner's pruner reads them only at its checkpoints.
    """

    __slots__ = ("_compute", "_metrics", "done")

    def __init__(self, done: int, compute: Callable[[], Any]) -> None:
        self.done = done
        """Completions the snapshot covers."""
        self._compute: Callable[[], Any] | None = compute
        self._metrics: Any = None

    def metrics(self) -> Any:
        """The partial `Metrics` (a flat mapping from `servetune.testing.fake.FakeRunner`)."""
        if self._compute is not None:
            self._metrics, self._compute = self._compute(), None
        return self._metrics


def summarize(values: Sequence[float]) -> dict[str, float]:
    """mean, median, std (population), p90, p95, p99 of `values` (0.0 each when empty)."""
    if not values:
        return dict.fromkeys(SUMMARY_STATS, 0.0)
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
        **lateness(records),
        **stats,
        **info,
    )
