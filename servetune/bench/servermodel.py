"""A model of one server's capacity at an SLO, fitted on what one capacity search measured.

A capacity search of a baseline runs 6-12 steps at rates around its capacity. Every step records
each request's arrival, first token and end (`requests.jsonl`) and SGLang's own scheduler lines
(`telemetry.jsonl`: running and queued requests, KV token usage, whether the decode batch ran in a
CUDA graph). `profile_step` condenses one step into a `StepProfile`; `ServerModel.fit` reads the
profiles of one search and predicts the capacity of the same server under another running limit
and decode CUDA-graph size (`ServerModel.capacity`), so a study spends its first sampled launch on
the config the measurement points to.

**What is fitted.** Each request decodes its tokens at a time per token of

    TPOT = (a + b * B + e * E) / (1 - s * r)

where B is the number of requests decoding during its life (time-averaged, from every request's
first token and end), E the share of its life with B above the CUDA graph's size (a batch past
the graph runs eagerly), and r the rate of prefills that finished during its life (other
requests' first tokens per second): each prefill holds decode for s, so decode runs a share
1 - s * r of the time. a is the decode step at an empty batch, b its growth per running request,
e the eager penalty. Multiplied out, TPOT = a + b * B + e * E + s * A / (n - 1), with A the prefills
during its life and n its output tokens: a linear regression. The fit is ordinary least squares
over every finished request of every step (the steps keep its sufficient statistics, so a study stores a few numbers per
step, not every request), with a negative coefficient dropped and the rest refitted; e is only
fitted where the baseline ran past its graph (else it is unknown, and a graph smaller than the
running limit is not recommended). SGLang 0.5.17's `gen throughput` per decode line is not used:
on the H200 its ratio to the running batch read 0.15-190 ms per token within one step (it counts
prefill time in the interval), while per-request TPOT is exact.

**What is predicted**, at a rate `lam`, a running limit `L` (capped by the KV pool, from token
usage) and a graph size `G`, where prefill holds decode (`exclusive`, SGLang's default): SGLang's
scheduler is simulated with the fitted costs (`ServerModel.simulated`): Poisson arrivals; while a request
waits and a running slot is free a prefill batch runs (s per request, decode held), else one decode step
of a + b B (+ e past the graph) gives every running request a token; each request's TPOT adds a draw of
the fit's residual, its TTFT the host's share of a no-queue TTFT. The capacity is the highest rate whose
simulated p99.5 TPOT and TTFT meet the SLO (`CERTIFIED_SHARE`). A burst's prefills pile into an
unbounded batch and stall its decode, which lengthens every life in it and lets more arrivals in; a
running limit holds them in the queue instead (TTFT for TPOT). On the H200 this cascade is what a
running limit buys: fitted on SGLang's defaults alone, the simulation reads their certified capacity
within 1% and a limit of 48 (never launched in that search) within 7%, where the closed form below saw no
gain at all (docs/tuning.md). A capacity is found on `SIM_ARRIVALS` per seed, then read again on
`SIM_HORIZON_S` of arrivals, where the queue near a running limit's ceiling has time to build.

The closed form (`point`; used where prefill mixes into decode steps, `mixed`):

- the mean batch by Little's law, B = lam * (t0 + (n - 1) * TPOT(B)), at most L;
- p99 TPOT: B and the prefills during one life at their 99th percentile under Poisson arrivals
  (mean + z * k * sqrt(mean), k fitted to the measured p99 TPOT of the steps that finished 90% of their
  arrivals: a step stopped early leaves its slowest requests unfinished), the prefills at most L per
  life once the limit binds (arrivals past it wait, so they cannot stall the running batch);
- p99 TTFT: the baseline's no-queue p99 TTFT (linear in the rate over its steps) plus the p99 wait
  for one of L slots (Erlang C with a service time of one request's life, scaled by the
  Allen-Cunneen factor (1 + cv^2) / 2 for its measured variability);
- the capacity: the highest rate whose p99 TPOT and p99 TTFT meet the SLO, below the limit's
  throughput ceiling L / life.

The fit can pool the searches of other configs of the same server (`fit(..., pooled=...)`, each
`Search` read at its own running limit and graph size): a search of an unbounded batch moves the batch
and the prefill rate together, so alone it cannot tell b from s; a search whose batch a limit pinned can.

It models what a running limit and a graph size do; it does not model other fields (they are the
baseline's), memory fraction (it only tells whether the KV pool bound), or a model the search did not
run. Its error on the stand-in and the H200 is in docs/tuning.md; the tuner stores each trial's
prediction beside its measurement.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr

if TYPE_CHECKING:
    from servetune.bench.schema import RequestRecord
    from servetune.bench.slo import LatencySlo

__all__ = [
    "ModelPoint",
    "Search",
    "ServerModel",
    "StepProfile",
    "profile_step",
    "requests_per_prefill",
    "server_limits",
]

CERTIFIED_SHARE = 0.5
"""`capacity` holds this share of an SLO's allowed tail under the bound (p99: p99.5): a step is met
only once its share over the bound is certainly within what the percentile allows (433-1065 judged
requests at 95% for p99), which a server whose share sits at the allowance rarely passes; on the
stand-in the certified capacity sat near where p99.5, not p99, met the bound."""
SPANS = (0.25, 0.5, 1.0)
"""A mixed prefill's span as shares of the no-queue TTFT (the client sees when a prefill ends, not how
long it ran: the fit tries each)."""
REGRESSORS = ("base", "batch", "eager", "prefill", *(f"mixed_{f:g}" for f in SPANS))
"""The columns of the TPOT regressions: 1, B, E, A / (n - 1) (exclusive prefill), P per span (mixed)."""
STALLS = {"exclusive": (0, 1, 2, 3), **{f"mixed_{f:g}": (0, 1, 2, 4 + i) for i, f in enumerate(SPANS)}}
"""The prefill-stall models and their regressors (the fit keeps the one that explains most)."""
MIN_REQUESTS = 20
"""Requests a step needs to enter the fit."""
OUTLIER_RMS = 10.0
"""A step whose requests' RMS residual exceeds this many times the median step's is left out of the TPOT
regression, which is then fitted once more. On a seventh lent H100 one step of SGLang's defaults (16.32 req/s,
43 requests) fell into a prefill cascade (prefill batches back to back, 121 running, TPOT 50 ms), which decode
time linear in the prefill rate cannot describe (the stall grows as 1 / (1 - s r)): it sat 34.8 ms RMS from the
fit, 13 times the median step's. With it, the residual every simulated request draws rose from 1.9 to 4.6 ms,
and the model read that search's defaults 17% low and the seed 35% low (docs/h200-results.md section 30). On
the 26 recorded searches no other step sat beyond 6.5 times the median; the steps near an edge, which the SLO
decides on, reach 5-6.5 times and stay in. The simulation still plays such cascades out."""
SIM_ARRIVALS = 2000
"""Arrivals per seed of one simulated rate (`ServerModel.simulated`) ..."""
SIM_WARMUP = 200
"""... the first ones not read (the batch fills) ..."""
SIM_SEEDS = (1, 2)
"""... and the seeds pooled: 3600 requests read, so a p99.5 rests on 18 over it."""
SIM_HORIZON_S = 300.0
"""The capacity's final reading simulates this many seconds of arrivals per seed (at least `SIM_ARRIVALS`): the
soak horizon a certified capacity must hold. 2,000 arrivals (25 s at 80 req/s) end before the queue for a
running slot builds near the limit's ceiling: on the stand-in at 32 running, 76 req/s, the model read p99 TTFT
225 ms in 2,000 arrivals, 303 in 300 s of them, the server 999 in 20,000 (docs/tuning.md). Against the
long-run truth its capacities moved from -5.5% to +10.8% to -6.4% to +6.5% (the baseline's from +10.8% to
-3.6%; `benchmarks/model_error.py --seed 2`)."""

SIM_NO_GRAPH = 1 << 30
"""A graph no batch outgrows (the eager cost unknown, or no graph size given)."""
PREFILL_BATCH = 6
"""Requests one simulated prefill batch takes at most: SGLang's default 8192-token chunk holds about six
720p-image prompts of ~1300 tokens (on the H200 fit the capacities moved under 3% from 1 to 16)."""
FINISHED_SHARE = 0.9
"""Steps whose p99 TPOT the spread is fitted on finished this share of their arrivals: on the H200 the
defaults' steps stopped early as missed (62-80% finished) read p99 TPOT 12.2 ms at 17.79 req/s and 21.5 at
20.26, where the steps that ran on read 20.8-25.1 at 16.15-16.88; with them the model put the defaults'
capacity 12% high (18.09 against 16.15 certified), without them 2% (16.51)."""


class StepProfile(BaseModel):
    """What one capacity step says about the server (`profile_step`), compact enough to store per trial."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    rate: float
    """Offered Poisson rate (req/s)."""
    requests: int
    """Requests that finished and enter the fit (the warm-up span's too: the fit needs no steady state)."""
    out_tokens: float
    """Mean output tokens per request."""
    ttft_p50_ms: float
    """Median TTFT from the scheduled arrival (ms)."""
    ttft_p99_ms: float
    """p99 TTFT from the scheduled arrival (ms)."""
    tpot_p99_ms: float
    """p99 TPOT (ms), over the requests that finished."""
    finished_share: float = 1.0
    """Share of the step's arrivals that finished: a step stopped early (missed) leaves its slowest
    requests unfinished, so its `tpot_p99_ms` reads low (the spread is fitted on steps that finished 90%)."""
    batch_mean: float
    """Requests decoding, time-averaged over the judged span (from each request's first token and end)."""
    batch_max: int
    """The most requests decoding at once (client view)."""
    life_cv2: float
    """Squared coefficient of variation of a request's life (arrival to end): the service time's variability."""
    completion_rate: float
    """Completions per second over the judged span."""
    graph_bs: int | None = None
    """The decode CUDA graph's largest batch (None: unknown)."""
    over_graph_share: float = 0.0
    """Share of the span with more requests decoding than `graph_bs`."""
    xtx: list[list[float]]
    """Sufficient statistics of the TPOT regression (X'X over `REGRESSORS`)."""
    xty: list[float]
    """... X'y (y: TPOT in ms) ..."""
    yty: float
    """... and y'y."""
    prefill_s: float = 0.0
    """A prefill's span with no queue (s): the step's 10th-percentile TTFT from the send."""
    running_max: int | None = None
    """SGLang's largest `#running-req` during the step (telemetry; None without it)."""
    running_p90: int | None = None
    """The 90th percentile of SGLang's `#running-req` over its decode lines: the batch a burst reaches."""
    queue_max: int | None = None
    """SGLang's largest `#queue-req`."""
    token_usage_max: float | None = None
    """SGLang's largest KV `token usage` (0-1)."""
    kv_tokens: float | None = None
    """The KV pool in tokens (`#token` / `token usage`, where usage is readable)."""
    kv_per_request: float | None = None
    """KV tokens per running request (`#token` / `#running-req`, median)."""
    graph_false_share: float | None = None
    """Share of SGLang's decode lines that ran without a CUDA graph."""
    prefill_batches: int | None = None
    """SGLang's prefill lines during the step (one per prefill batch; None without telemetry) ..."""
    prefill_requests: int | None = None
    """... and the requests they prefilled (`#new-seq`)."""


def requests_per_prefill(profiles: Sequence[StepProfile]) -> float | None:
    """Requests per prefill batch over the steps whose telemetry had prefill lines (None: none had)."""
    batched = [p for p in profiles if p.prefill_batches]
    if not batched:
        return None
    return sum(p.prefill_requests or 0 for p in batched) / sum(p.prefill_batches or 0 for p in batched)


def horizon_arrivals(rate: float) -> int:
    """Arrivals per seed of the capacity's final reading at `rate`: `SIM_HORIZON_S` of them, at least `SIM_ARRIVALS`."""
    return max(SIM_ARRIVALS, int(rate * SIM_HORIZON_S))


def server_limits(info: Mapping[str, Any]) -> dict[str, int | None]:
    """The running limit and decode CUDA-graph size a server runs with, from `/server_info`: 0.5.17 on
    the H200 reported `max_running_requests: None` with the scheduler's figure under
    `internal_states[0].effective_max_running_requests_per_dp`, and the graph under
    `cuda_graph_config.decode.max_bs`; 0.5.23 names `cuda_graph_max_bs_decode`, older ones
    `cuda_graph_max_bs`. None where it says nothing."""
    states = info.get("internal_states")
    inner = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}

    def number(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def first(*keys: str) -> int | None:
        for src in (info, inner):
            for key in keys:
                if (value := number(src.get(key))) is not None:
                    return value
        return None

    graph = first("cuda_graph_max_bs_decode", "cuda_graph_max_bs")
    if graph is None:
        config = info.get("cuda_graph_config") or inner.get("cuda_graph_config")
        decode = config.get("decode") if isinstance(config, Mapping) else None
        graph = number(decode.get("max_bs")) if isinstance(decode, Mapping) else None
    return {"running": first("max_running_requests", "effective_max_running_requests_per_dp"), "graph": graph}


class _Decoding:
    """The number of requests decoding (first token <= t < end) as a step function of time, with
    prefix sums, so its integral and the time it spends above a size are O(log n) per window."""

    def __init__(self, firsts: Sequence[float], ends: Sequence[float], graph: int | None) -> None:
        events = sorted([(t, 1) for t in firsts] + [(t, -1) for t in ends])
        self.times: list[float] = []
        self.counts: list[int] = []
        count = 0
        for t, d in events:
            count += d
            if self.times and self.times[-1] == t:
                self.counts[-1] = count
            else:
                self.times.append(t)
                self.counts.append(count)
        self.graph = graph
        self.area = [0.0]  # integral of the count up to times[i]
        self.over = [0.0]  # time above `graph` up to times[i]
        for i in range(1, len(self.times)):
            dt = self.times[i] - self.times[i - 1]
            self.area.append(self.area[-1] + self.counts[i - 1] * dt)
            above = graph is not None and self.counts[i - 1] > graph
            self.over.append(self.over[-1] + (dt if above else 0.0))
        self.peak = max(self.counts, default=0)

    def _at(self, sums: list[float], value, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0.0
        return sums[i] + value(self.counts[i]) * (t - self.times[i])

    def integral(self, x: float, y: float) -> float:
        """The integral of the count over [x, y]."""
        return self._at(self.area, float, y) - self._at(self.area, float, x)

    def over_share(self, x: float, y: float) -> float:
        """Share of [x, y] with more than `graph` decoding (0 without a graph size)."""
        if self.graph is None or y <= x:
            return 0.0
        above = lambda c: 1.0 if c > self.graph else 0.0  # noqa: E731
        return (self._at(self.over, above, y) - self._at(self.over, above, x)) / (y - x)


def profile_step(
    records: Sequence[RequestRecord],
    rate: float,
    *,
    warmup_s: float,
    telemetry: Sequence[Mapping[str, Any]] = (),
    graph_bs: int | None = None,
) -> StepProfile | None:
    """One step's `StepProfile` from every arrival's record (arrival order, on the step's clock) and
    SGLang's scheduler records (`t` on the same clock); None when fewer than `MIN_REQUESTS` judged
    requests finished. `graph_bs`: the server's decode graph size (else read off the telemetry: the
    largest batch that ran in a graph, where one ran outside it)."""
    from servetune.bench.stats import percentile

    if not records:
        return None
    t0 = min(r.arrival for r in records)
    done = [r for r in records if r.finished and r.success and r.ttft > 0]
    firsts = sorted(r.start + r.ttft for r in done)
    ends = sorted(r.end for r in done)
    fitted = [r for r in done if r.output_len > 1 and r.end > r.start + r.ttft]
    judged = [r for r in fitted if r.arrival - t0 >= warmup_s] or fitted
    if len(fitted) < MIN_REQUESTS:
        return None
    decode = [t for t in telemetry if t.get("kind") == "decode" and t.get("t", -1.0) >= warmup_s]
    if graph_bs is None:
        graph_bs = _graph_from_telemetry(decode)
    decoding = _Decoding(firsts, ends, graph_bs)
    service = sorted(r.ttft for r in done)[len(done) // 10]  # a prefill's span with no queue (s)
    prefilling = [_Decoding(sorted(f - service * share for f in firsts), firsts, 0) for share in SPANS]
    k = len(REGRESSORS)
    xtx = [[0.0] * k for _ in range(k)]
    xty = [0.0] * k
    yty = 0.0
    lives = []
    for r in fitted:  # a request's own batch and prefills are its regressors: the warm-up span fits too
        first, end = r.start + r.ttft, r.end
        life = end - first
        batch = decoding.integral(first, end) / life
        eager = decoding.over_share(first, end)
        prefills = bisect.bisect_right(firsts, end) - bisect.bisect_right(firsts, first)
        x = (1.0, batch, eager, prefills / (r.output_len - 1), *(p.over_share(first, end) for p in prefilling))
        y = life / (r.output_len - 1) * 1000.0
        yty += y * y
        for i in range(k):
            xty[i] += x[i] * y
            for j in range(k):
                xtx[i][j] += x[i] * x[j]
        lives.append(r.end - r.arrival)
    span_start = t0 + warmup_s
    span_end = max(r.end for r in judged)
    span = max(span_end - span_start, 1e-9)
    mean_life = math.fsum(lives) / len(lives)
    cv2 = math.fsum((v - mean_life) ** 2 for v in lives) / len(lives) / mean_life**2 if mean_life > 0 else 0.0
    ttfts = sorted((r.ttft + r.lag) * 1000.0 for r in judged)
    tpots = sorted((r.end - r.start - r.ttft) / (r.output_len - 1) * 1000.0 for r in judged)
    tele = _telemetry_summary(decode)
    prefill = [t for t in telemetry if t.get("kind") == "prefill" and t.get("t", -1.0) >= 0.0]
    if prefill:
        tele |= {"prefill_batches": len(prefill), "prefill_requests": sum(int(t.get("new_seq") or 0) for t in prefill)}
    return StepProfile(
        rate=rate, requests=len(fitted), out_tokens=math.fsum(r.output_len for r in judged) / len(judged),
        ttft_p50_ms=percentile(ttfts, 50), ttft_p99_ms=percentile(ttfts, 99), tpot_p99_ms=percentile(tpots, 99),
        finished_share=len(done) / len(records),
        batch_mean=decoding.integral(span_start, span_end) / span, batch_max=decoding.peak, life_cv2=cv2,
        completion_rate=sum(1 for r in done if span_start <= r.end <= span_end) / span, graph_bs=graph_bs,
        over_graph_share=decoding.over_share(span_start, span_end),
        xtx=xtx, xty=xty, yty=yty, prefill_s=service, **tele,
    )  # fmt: skip


def _graph_from_telemetry(decode: Sequence[Mapping[str, Any]]) -> int | None:
    """The graph's size as the telemetry brackets it: at least the largest batch that ran in a graph,
    below the smallest that ran without one; the largest multiple of 8 between (SGLang captures
    decode graphs at multiples of 8), else the bracket's top. None when every line ran in a graph,
    or none did."""
    inside = [int(t["running_req"]) for t in decode if t.get("cuda_graph") is True and "running_req" in t]
    outside = [int(t["running_req"]) for t in decode if t.get("cuda_graph") is False and "running_req" in t]
    if not inside or not outside:
        return None
    low, high = max((b for b in inside if b < min(outside)), default=0), min(outside) - 1
    if low < 1 or high < low:
        return None
    return next((b for b in range(high, low - 1, -1) if b % 8 == 0), high)


def _telemetry_summary(decode: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The telemetry fields of a profile (all None without decode lines)."""
    if not decode:
        return {}
    running = [int(t.get("running_req") or 0) for t in decode]
    usage = [float(t.get("token_usage") or 0.0) for t in decode]
    readable = [t for t in decode if (t.get("token_usage") or 0.0) >= 0.05 and t.get("tokens")]
    per_request = sorted(
        float(t["tokens"]) / t["running_req"] for t in decode if t.get("tokens") and t.get("running_req")
    )
    graphs = [t.get("cuda_graph") for t in decode if isinstance(t.get("cuda_graph"), bool)]
    return {
        "running_max": max(running),
        "running_p90": sorted(running)[min(len(running) - 1, int(0.9 * len(running)))],
        "queue_max": max(int(t.get("queue_req") or 0) for t in decode),
        "token_usage_max": max(usage),
        "kv_tokens": sorted(float(t["tokens"]) / float(t["token_usage"]) for t in readable)[len(readable) // 2]
        if readable
        else None,
        "kv_per_request": per_request[len(per_request) // 2] if per_request else None,
        "graph_false_share": (sum(1 for g in graphs if not g) / len(graphs)) if graphs else None,
    }


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None for a singular system."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _nonnegative_fit(xtx: list[list[float]], xty: list[float], cols: list[int]) -> dict[int, float]:
    """Least squares over `cols` (0: the intercept), a negative slope dropped and the rest refitted."""
    active = list(cols)
    coef: dict[int, float] = {}
    for _ in range(len(cols)):
        sol = _solve([[xtx[i][j] for j in active] for i in active], [xty[i] for i in active])
        if sol is None:
            active = active[:1] + active[-1:] if len(active) > 2 else active[:1]
            continue
        coef = dict(zip(active, sol))
        negative = [i for i in active if i != 0 and coef[i] < 0]
        if not negative:
            break
        active = [i for i in active if i not in negative]
    return coef


class _Regression:
    """The TPOT regression over some steps' sufficient statistics: each stall model fitted (slopes kept
    non-negative), the one with the smaller residual kept."""

    def __init__(self, profiles: Sequence[StepProfile]) -> None:
        k = len(REGRESSORS)
        self.profiles = list(profiles)
        xtx = [[math.fsum(p.xtx[i][j] for p in profiles) for j in range(k)] for i in range(k)]
        xty = [math.fsum(p.xty[i] for p in profiles) for i in range(k)]
        yty = math.fsum(p.yty for p in profiles)
        self.requests = sum(p.requests for p in profiles)
        self.eager_seen = xtx[2][2] > 1e-6
        self.mean_y = xty[0] / xtx[0][0]
        fits = {}
        for stall, cols in STALLS.items():
            coef = _nonnegative_fit(xtx, xty, [i for i in cols if i != 2 or self.eager_seen])
            fits[stall] = (_rss(coef, xtx, xty, yty), coef)
        self.stall = min(fits, key=lambda name: fits[name][0])
        self.residual, self.coef = fits[self.stall]
        total = yty - self.requests * self.mean_y**2
        self.r2 = max(0.0, min(1.0, 1.0 - self.residual / total)) if total > 0 else 0.0

    def step_rms(self, p: StepProfile) -> float:
        """The RMS residual of one step's requests under this fit (ms)."""
        return math.sqrt(max(_rss(self.coef, p.xtx, p.xty, p.yty), 0.0) / p.requests)

    def outliers(self) -> list[StepProfile]:
        """The steps whose requests sit `OUTLIER_RMS` times the median step's RMS residual from the fit."""
        rms = [self.step_rms(p) for p in self.profiles]
        if len(rms) < 3:
            return []
        median = sorted(rms)[len(rms) // 2]
        return [p for p, r in zip(self.profiles, rms) if r > OUTLIER_RMS * median]


def _rss(coef: Mapping[int, float], xtx: Sequence[Sequence[float]], xty: Sequence[float], yty: float) -> float:
    """The residual sum of squares of `coef` (column -> coefficient) over sufficient statistics."""
    c = [coef.get(i, 0.0) for i in range(len(xty))]
    n = len(c)
    quadratic = sum(c[i] * xtx[i][j] * c[j] for i in range(n) for j in range(n))
    return yty - 2 * sum(c[i] * xty[i] for i in range(n)) + quadratic


def _erlang_c(servers: int, load: float) -> float:
    """The probability that an arrival waits in an M/M/c queue (c = `servers`, offered load in Erlangs)."""
    if load >= servers:
        return 1.0
    if load <= 0:
        return 0.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = load * blocking / (k + load * blocking)
    return servers * blocking / (servers - load * (1.0 - blocking))


@dataclass(frozen=True)
class Search:
    """One capacity search's profiles with the running limit and graph size its server ran (None: unknown)."""

    profiles: Sequence[StepProfile]
    running_limit: int | None = None
    graph_bs: int | None = None


class ModelPoint(BaseModel):
    """The model's reading of one config at one rate."""

    model_config = ConfigDict(extra="forbid")

    rate: float
    batch: float
    tpot_p99_ms: float
    ttft_p99_ms: float
    wait_p99_ms: float
    stable: bool


class ServerModel(BaseModel):
    """TPOT and TTFT of one server as functions of the rate, running limit and graph size (module docstring)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    base_ms: float
    """a: time per token at an empty batch, no prefill (ms)."""
    per_running_ms: float
    """b: growth of the time per token per running request (ms)."""
    eager_ms: float | None
    """e: added per token while the batch is past the CUDA graph (ms); None: never seen."""
    stall: Literal["exclusive", "mixed"] = "exclusive"
    """How prefill stalls decode: `exclusive`, each prefill holds decode for `prefill_ms` (SGLang's
    separate prefill batches; TPOT = tau / (1 - s r)); `mixed`, a decode step carries `prefill_ms` more
    while any prefill runs (chunked prefill mixed into decode; TPOT = tau + c P, P the share of time a
    prefill of `prefill_span_s` runs at rate r, 1 - exp(-r span)). The fit keeps the one that explains
    more of the TPOT variance."""
    prefill_ms: float
    """s (exclusive: decode time each prefill holds) or c (mixed: added per token while a prefill runs), ms."""
    prefill_span_s: float = 0.0
    """A prefill's span with no queue (s)."""
    prefill_fixed_ms: float = 0.0
    """p0: the part of one prefill batch's cost that its requests share (ms; exclusive stall). A batch of k
    requests holds decode for p0 + p1 k, with p1 = `prefill_ms` - p0 / `prefill_batch_mean`, so that at the
    fitted searches' own batching it costs `prefill_ms` a request."""
    prefill_batch_mean: float = 1.0
    """Requests per prefill batch over the fitted searches (SGLang's prefill lines; 1.0 where unread)."""
    spread: float
    """k: the 99th percentiles' spread, in Poisson standard deviations (fitted to the steps' p99 TPOT)."""
    out_tokens: float
    """Mean output tokens per request."""
    ttft_ms: float
    """Median TTFT with no queue (ms): the lowest of the steps' medians."""
    ttft_p99_ms: float
    """p99 TTFT with no queue at rate 0 (ms) ..."""
    ttft_p99_per_rate: float
    """... and its growth per req/s (ms), over the steps where no request queued."""
    life_cv2: float
    """Variability of a request's life (squared coefficient of variation)."""
    kv_slots: float | None
    """Requests the KV pool holds (None: unknown, or it never bound)."""
    kv_bound: bool
    """Token usage reached 90%: the KV pool bound the running batch."""
    running_limit: int
    """The baseline's effective running limit."""
    graph_bs: int | None
    """The baseline's decode graph size."""
    running_max: int
    """The most requests the baseline ever ran at once."""
    queued: bool = False
    """SGLang's telemetry showed requests queued for admission (the running limit or KV pool bound)."""
    token_usage_max: float | None
    """The baseline's largest KV token usage."""
    throughput_max: float
    """The highest completion rate any step reached (req/s)."""
    steps: int
    """Steps fitted (those in `left_out` too: they are left out of the TPOT regression only)."""
    requests: int
    """Requests fitted."""
    r2: float
    """Share of the TPOT variance the fit explains ..."""
    pooled: int = 0
    """Searches of other configs pooled into the fit (a probe's): 0, the baseline's alone."""
    residual_ms: float = 0.0
    """... and the spread it leaves, per request (RMS residual, ms): requests at one batch and prefill
    rate still differ (the tail adds its quantile of it)."""
    left_out: list[float] = []
    """Rates of the steps left out of the TPOT regression (`OUTLIER_RMS`); they still count everywhere else."""

    _memo: dict[tuple, float] = PrivateAttr(default_factory=dict)

    @classmethod
    def fit(
        cls,
        profiles: Sequence[StepProfile],
        *,
        running_limit: int | None = None,
        graph_bs: int | None = None,
        pooled: Sequence[Search] = (),
        prefill_fixed_share: float = 0.0,
    ) -> ServerModel | None:
        """The model of the server that ran `profiles` (one search), or None with fewer than two
        usable steps. `running_limit` / `graph_bs`: its effective values (else read off the profiles).
        `pooled`: searches of other configs of the same server and traffic (a probe's), each with its
        running limit and graph size: their requests enter the regression and their steps the tail's
        fit, each read at its own limit; what the model says of the baseline (its limits, largest
        batch, queueing, KV pool, no-queue TTFT) stays the baseline's. `prefill_fixed_share`: the share of the
        fitted prefill cost a prefill batch's requests share (`prefill_fixed_ms`), where SGLang's prefill lines show
        it batching (none by default: a search of SGLang's defaults cannot measure it, and on the recorded pairs no
        assumed share read both the seed and the pooled fit better; `benchmarks/model_pairs.py`)."""
        own = [p for p in profiles if p.requests >= MIN_REQUESTS]
        if len(own) < 2:
            return None
        graph_own = graph_bs if graph_bs is not None else next((p.graph_bs for p in own if p.graph_bs), None)
        searches = [Search(own, running_limit, graph_own)] + [
            Search([p for p in s.profiles if p.requests >= MIN_REQUESTS], s.running_limit, s.graph_bs) for s in pooled
        ]
        usable = [p for s in searches for p in s.profiles]
        fit = _Regression(usable)
        outliers = fit.outliers()
        if outliers:
            fit = _Regression([p for p in usable if all(p is not o for o in outliers)])
        stall, coef, eager_seen, mean_y = fit.stall, fit.coef, fit.eager_seen, fit.mean_y
        n_req = sum(p.requests for p in usable)
        usage = [p.token_usage_max for p in usable if p.token_usage_max is not None]
        kv = [p.kv_tokens / p.kv_per_request for p in usable if p.kv_tokens and p.kv_per_request]
        running_max = max((p.running_max or p.batch_max) for p in own)
        per_batch = requests_per_prefill(usable) or 1.0
        prefill_ms = coef.get(STALLS[stall][3], 0.0)
        fixed = prefill_fixed_share * prefill_ms if stall == "exclusive" and per_batch > 1.0 else 0.0
        quiet = [p for p in own if not p.queue_max]
        c0, c1 = _line([(p.rate, p.ttft_p99_ms) for p in (quiet or own)])
        model = cls(
            base_ms=coef.get(0, mean_y), per_running_ms=coef.get(1, 0.0),
            eager_ms=coef.get(2, 0.0) if eager_seen else None, stall="exclusive" if stall == "exclusive" else "mixed",
            prefill_ms=prefill_ms, prefill_fixed_ms=fixed, prefill_batch_mean=max(1.0, per_batch),
            prefill_span_s=sorted(p.prefill_s for p in usable)[len(usable) // 2]
            * (1.0 if stall == "exclusive" else SPANS[STALLS[stall][3] - 4]),
            spread=1.0,
            out_tokens=math.fsum(p.out_tokens * p.requests for p in usable) / n_req,
            ttft_ms=min(p.ttft_p50_ms for p in usable), ttft_p99_ms=c0, ttft_p99_per_rate=c1,
            life_cv2=math.fsum(p.life_cv2 * p.requests for p in usable) / n_req,
            kv_slots=sorted(kv)[len(kv) // 2] if kv else None, kv_bound=bool(usage) and max(usage) >= 0.9,
            running_limit=running_limit or 4096, graph_bs=graph_own, running_max=running_max,
            queued=any((p.queue_max or 0) > 0 for p in own),
            token_usage_max=max(usage) if usage else None, throughput_max=max(p.completion_rate for p in usable),
            steps=len(usable), requests=n_req, r2=fit.r2, residual_ms=math.sqrt(max(fit.residual, 0.0) / fit.requests),
            left_out=sorted(round(p.rate, 4) for p in outliers),
            pooled=len(searches) - 1,
        )  # fmt: skip
        return model.model_copy(update={"spread": model._fit_spread(searches)})

    def _fit_spread(self, searches: Sequence[Search]) -> float:
        """k minimising the squared error of the predicted p99 TPOT over the steps that finished
        `FINISHED_SHARE` of their arrivals (all, where none did), each read at its search's running limit
        and graph size (a grid over 0-3)."""
        whole = [Search([p for p in s.profiles if p.finished_share >= FINISHED_SHARE], s.running_limit, s.graph_bs)
                 for s in searches]  # fmt: skip
        if any(s.profiles for s in whole):
            searches = whole
        best = (math.inf, 1.0)
        for i in range(61):
            k = i * 0.05
            trial = self.model_copy(update={"spread": k})
            err = 0.0
            for search in searches:
                graph = search.graph_bs if search.graph_bs is not None else self.graph_bs
                for p in search.profiles:
                    pt = trial.point(p.rate, search.running_limit or 4096, graph)
                    err += p.requests * (min(pt.tpot_p99_ms, 10 * p.tpot_p99_ms) - p.tpot_p99_ms) ** 2
            best = min(best, (err, k))
        return best[1]

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ServerModel:
        """A copy (pydantic's), with its own memo of capacities: one shared with the original would answer
        for the old figures."""
        copied = super().model_copy(update=update, deep=deep)
        copied._memo = {}
        return copied

    def limit(self, running_limit: int | None) -> float:
        """The running batch's effective limit: the running limit, or the KV pool where it is smaller."""
        limit = float(running_limit or self.running_limit)
        return min(limit, self.kv_slots) if self.kv_slots else limit

    def tpot_ms(self, batch: float, graph_bs: int | None, prefill_rate: float) -> float:
        """Mean time per token at a running batch, graph size and prefill rate (ms); inf when the
        prefills leave decode no time."""
        eager = self.eager_ms if (self.eager_ms and graph_bs is not None and batch > graph_bs) else 0.0
        if self.stall == "mixed":
            busy = 1.0 - math.exp(-prefill_rate * self.prefill_span_s)
            return self.base_ms + self.per_running_ms * batch + eager + self.prefill_ms * busy
        share = 1.0 - self.prefill_ms * prefill_rate / 1000.0
        if share <= 0.0:
            return math.inf
        return (self.base_ms + self.per_running_ms * batch + eager) / share

    def point(self, rate: float, running_limit: int | None, graph_bs: int | None, *, tail: float = 0.01) -> ModelPoint:
        """The model at `rate` (req/s) under a running limit (None: the baseline's) and graph size;
        its percentiles at `tail` (0.01: p99) of TPOT and TTFT."""
        z = NormalDist().inv_cdf(1.0 - tail)
        limit = self.limit(running_limit)
        n1 = max(self.out_tokens - 1.0, 1.0)
        t0 = self.ttft_ms / 1000.0
        batch = 1.0
        for _ in range(60):
            life = t0 + n1 * self.tpot_ms(min(batch, limit), graph_bs, rate) / 1000.0
            new = min(limit, rate * life)
            if abs(new - batch) < 1e-6:
                break
            batch = new
        life_full = t0 + n1 * self.tpot_ms(limit, graph_bs, rate) / 1000.0
        stable = math.isfinite(life_full) and rate * life_full < limit
        wait = 0.0
        if not stable:
            wait = math.inf
        elif limit < 4096:
            servers = max(1, int(limit))
            waiting = _erlang_c(servers, rate * life_full)
            if waiting > tail:
                wait = (1.0 + self.life_cv2) / 2.0 * math.log(waiting / tail) / (servers / life_full - rate)
        life = t0 + n1 * self.tpot_ms(batch, graph_bs, rate) / 1000.0
        k = self.spread
        b99 = min(limit, batch + z * k * math.sqrt(batch))
        prefills = rate * life
        p99 = prefills + z * k * math.sqrt(prefills)
        if limit < 4096:
            p99 = min(p99, limit)
        tpot99 = self.tpot_ms(b99, graph_bs, p99 / life) + z * self.residual_ms
        ttft99 = self.ttft_p99_ms + self.ttft_p99_per_rate * rate + wait * 1000.0
        return ModelPoint(
            rate=rate, batch=batch, tpot_p99_ms=tpot99, ttft_p99_ms=ttft99, wait_p99_ms=wait * 1000.0, stable=stable
        )

    def meets(self, point: ModelPoint, slos: Sequence[LatencySlo]) -> bool:
        """Whether the point meets every SLO the model reads (TPOT/ITL against p99 TPOT, TTFT/E2E
        against p99 TTFT plus the decode; a median SLO against the median-ish mean)."""
        if not point.stable:
            return False
        for slo in slos:
            if slo.metric in ("tpot", "itl") and point.tpot_p99_ms > slo.bound_ms:
                return False
            if slo.metric == "ttft" and point.ttft_p99_ms > slo.bound_ms:
                return False
            if slo.metric == "e2e":
                e2e = point.ttft_p99_ms + (self.out_tokens - 1) * point.tpot_p99_ms
                if e2e > slo.bound_ms:
                    return False
        return True

    def simulated(
        self,
        rate: float,
        running_limit: int | None,
        graph_bs: int | None,
        *,
        tail: float = 0.01,
        arrivals: int = SIM_ARRIVALS,
    ) -> ModelPoint:
        """The model at `rate` by simulating SGLang's scheduler with the fitted costs (exclusive stall):
        Poisson arrivals (`arrivals` per seed, the first `SIM_WARMUP` not read, `SIM_SEEDS` pooled, the
        same draws at every rate); while a request waits and a running slot is free a prefill batch runs
        (up to `PREFILL_BATCH` requests, `prefill_ms` each, or `prefill_fixed_ms` for the batch and the rest per
        request, decode held meanwhile), else one decode step of
        `base_ms + per_running_ms * B` (+ `eager_ms` past the graph) gives every running request a token.
        A burst's prefills pile into the batch and stall its decode, and a running limit holds them in
        the queue instead: the cascade a Poisson spread of prefills per life does not hold. Each request's
        TPOT adds a normal draw of the fit's residual (`residual_ms`: what its batch and prefills do not
        explain); TTFT adds the host's share of a no-queue TTFT (`ttft_ms - prefill_ms`); percentiles at
        `tail`."""
        import heapq
        import random

        from servetune.bench.stats import percentile

        limit = max(1, int(self.limit(running_limit)))
        count = max(arrivals, SIM_WARMUP + 1)
        n1 = max(1, round(self.out_tokens - 1.0))
        step_s, grow_s = self.base_ms / 1000.0, self.per_running_ms / 1000.0
        fixed_s = self.prefill_fixed_ms / 1000.0
        prefill_s = max(0.0, self.prefill_ms / 1000.0 - fixed_s / self.prefill_batch_mean)
        graph = graph_bs if graph_bs is not None and self.eager_ms else SIM_NO_GRAPH
        eager_s = (self.eager_ms or 0.0) / 1000.0
        host_ms = max(0.0, self.ttft_ms - self.prefill_ms)
        ttfts: list[float] = []
        tpots: list[float] = []
        waits: list[float] = []
        area = span = 0.0
        for seed in SIM_SEEDS:
            rng = random.Random(seed)
            times: list[float] = []
            t = 0.0
            for _ in range(count):
                t += rng.expovariate(1.0) / rate
                times.append(t)
            first = [0.0] * count
            admit = [0.0] * count
            end = [0.0] * count
            finishing: list[tuple[int, int]] = []  # (decode step it ends at, request)
            t, step, head, came = 0.0, 0, 0, 0
            while True:
                came = bisect.bisect_right(times, t, came)
                running = len(finishing)
                if head < came and running < limit:
                    k = min(came - head, limit - running, PREFILL_BATCH)
                    for j in range(head, head + k):
                        admit[j] = t
                    t += fixed_s + prefill_s * k
                    for j in range(head, head + k):
                        first[j] = t
                        heapq.heappush(finishing, (step + n1, j))
                    head += k
                elif running:
                    dt = step_s + grow_s * running + (eager_s if running > graph else 0.0)
                    # decode steps of one batch until the next event: a request finishes, or one arrives while
                    # a slot is free (the same additions one step at a time, so the same floats)
                    done_at = finishing[0][0]
                    arrives = times[came] if running < limit and came < count else math.inf
                    busy = running * dt
                    while True:
                        t += dt
                        area += busy
                        step += 1
                        if step >= done_at or t >= arrives:
                            break
                    while finishing and finishing[0][0] <= step:
                        end[heapq.heappop(finishing)[1]] = t
                elif came < count:
                    t = times[came]
                else:
                    break
            span += t
            for j in range(SIM_WARMUP, count):
                ttfts.append((first[j] - times[j]) * 1000.0 + host_ms)
                tpots.append(max(0.0, (end[j] - first[j]) / n1 * 1000.0 + rng.gauss(0.0, self.residual_ms)))
                waits.append((admit[j] - times[j]) * 1000.0)
        q = 100.0 * (1.0 - tail)
        return ModelPoint(
            rate=rate, batch=area / span if span > 0 else 0.0, tpot_p99_ms=percentile(sorted(tpots), q),
            ttft_p99_ms=percentile(sorted(ttfts), q), wait_p99_ms=percentile(sorted(waits), q), stable=True,
        )  # fmt: skip

    def capacity(
        self,
        slos: Sequence[LatencySlo],
        running_limit: int | None = None,
        graph_bs: int | None = None,
        *,
        screen: bool = False,
    ) -> float:
        """The highest rate (req/s) at which the model meets every SLO with the margin a certified step
        needs (`CERTIFIED_SHARE` of the strictest percentile's tail), by bisection to 0.5%: simulated where
        prefill holds decode (`simulated`), else by the closed form (`point`). A simulated capacity is
        found on `SIM_ARRIVALS` per seed, then read again, and lowered where it must be, on `SIM_HORIZON_S`
        of arrivals (about ten times the cost); `screen`: the first reading only (an upper bound, close
        except near a running limit's ceiling), for ranking many configs."""
        graph = graph_bs if graph_bs is not None else self.graph_bs
        limit = self.limit(running_limit)
        if graph is not None and (not self.eager_ms or graph >= limit):
            graph = None  # a graph the batch never outgrows, or one whose cost is unknown: the same prediction
        key = (tuple(str(s) for s in slos), limit, graph)
        if key not in self._memo:
            self._memo[key] = self._capacity(slos, running_limit, graph)
        first = self._memo[key]
        if screen or self.stall != "exclusive" or first <= 0.0:
            return first
        if (key, "horizon") not in self._memo:
            self._memo[(key, "horizon")] = self._horizon(slos, running_limit, graph, first)
        return self._memo[(key, "horizon")]

    def _tail(self, slos: Sequence[LatencySlo]) -> float:
        return min([(1.0 - s.quantile) * CERTIFIED_SHARE for s in slos if s.quantile is not None] or [0.5])

    def _capacity(self, slos: Sequence[LatencySlo], running_limit: int | None, graph: int | None) -> float:
        tail = self._tail(slos)
        at = self.simulated if self.stall == "exclusive" else self.point
        lo, hi = 0.0, max(self.throughput_max, 1.0) * 4.0
        if not self.meets(at(hi * 1e-3, running_limit, graph, tail=tail), slos):
            return 0.0
        lo = hi * 1e-3
        return self._bisect(lambda rate: self.meets(at(rate, running_limit, graph, tail=tail), slos), lo, hi)

    def _horizon(self, slos: Sequence[LatencySlo], running_limit: int | None, graph: int | None, first: float) -> float:
        """`first` (the short reading) read again on `SIM_HORIZON_S` of arrivals: kept where it holds there,
        else lowered by steps of 10% until a rate holds, then bisected to 0.5% (0.0 if none does)."""
        tail = self._tail(slos)

        def holds(rate: float) -> bool:
            count = horizon_arrivals(rate)
            return self.meets(self.simulated(rate, running_limit, graph, tail=tail, arrivals=count), slos)

        if holds(first):
            return first
        hi, lo = first, first * 0.9
        while not holds(lo):
            hi, lo = lo, lo * 0.9
            if lo < first * 1e-3:
                return 0.0
        return self._bisect(holds, lo, hi)

    @staticmethod
    def _bisect(holds, lo: float, hi: float) -> float:
        """The highest rate in [lo, hi) found to hold, to 0.5% (`lo` holds, `hi` does not)."""
        while hi / lo - 1.0 > 0.005:
            mid = math.sqrt(lo * hi)
            if holds(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def summary(self) -> dict[str, Any]:
        """The fitted figures, rounded, as a study stores and `tune report` prints them."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.model_dump().items()}


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and (non-negative) slope; a flat line through the mean for one point."""
    n = len(points)
    mx = math.fsum(x for x, _ in points) / n
    my = math.fsum(y for _, y in points) / n
    sxx = math.fsum((x - mx) ** 2 for x, _ in points)
    if n < 2 or sxx <= 0:
        return my, 0.0
    slope = max(0.0, math.fsum((x - mx) * (y - my) for x, y in points) / sxx)
    return my - slope * mx, slope
