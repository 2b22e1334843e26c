"""The verdict of one capacity step: met, missed, undecided or invalid, with a stated confidence.

A step offers Poisson arrivals at one rate and `StepJudge.look(records, now)` is asked, as requests
complete, whether it may stop. Its parts:

- **Warm-up.** Arrivals in the step's first `warmup_s` load the server but are judged by nothing
  (a server is slower while its batch fills, and a fresh launch compiles kernels on first use).
- **Percentile SLOs** (`p99_tpot_ms<=25`): the judged requests in arrival order, up to the first one
  whose outcome is still open, counted over the bound (`stats.SequentialBinomial`: met once the share
  over is certainly within what the percentile allows, missed once it certainly exceeds it, at
  `confidence`, valid however often it is looked at). A request whose latency already exceeds a bound
  while in flight counts as over at once; a failed request is over every bound. ITL counts gaps.
  TTFT and E2E run from the scheduled arrival, so a client that falls behind cannot hide a queue.
  The count is also kept per arrival span of `cluster_s`, and the test decides on the counts divided
  by their cluster effect (`stats.cluster_effect`): a burst of overs is one piece of evidence. While
  the judged requests lie in one span there is nothing to compare it with, and its overs count as one
  burst: only a span mostly over decides a miss there, and the verdict says so ("10 of 10 over, within
  one span"; `SloCheck.spans`).
  A mean SLO is judged by its confidence interval over time bins.
- **Backlog.** A server that falls behind can hold its latencies for a while. Requests in flight
  (from their scheduled arrival) are averaged over time bins of `bin_s`; their trend's slope, with a
  HAC error (`stats.trend`: neighbouring bins share queue state), says whether they pile up. The step
  is missed when the slope is certainly above `min_overload` of the rate and, extrapolated to
  `horizon_s` after the step's start, the extra requests in flight (Little's law: each waits one
  completion interval) or the measured TTFT trend would break the queueing bound (the TTFT SLO's
  bound, else `queue_bound_ms`). A step can be met only once the backlog is shown flat: its growth
  certainly below `max_overload` of the rate, and not certainly above 0 where that growth, extrapolated
  the same way, would break the queueing bound (`creeping`: too slow to call a miss, too steady to pass;
  the step keeps sending until a later checkpoint reads it, or ends undecided). The test decides at
  checkpoints, first after `backlog_s` of judged arrivals, with its error spread over them.
- **The client.** A step whose client sent its arrivals at under `OFFERED_MIN` of their schedule, and
  fell `OFFERED_LAG_S` or more behind it, did not test its rate: invalid, not a verdict.
- **Futility.** A percentile SLO that can no longer be met before `max_s` (more over its bound than
  the judged requests still to come could outweigh) ends the step at once as undecided.

A step ends at its first decision (a soak only at its end, unless missed) or at `max_s`, where an
open verdict becomes `undecided` (counts as not met, shown as such). A soak is met once, at the length
it was planned to run, so its met is the fixed-length binomial test (`stats.FixedBinomial`: 299
judged with none over for p99 at 95%, not the sequential 433); its early miss stays sequential.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from servetune.bench.slo import LatencySlo, request_latency_ms, statistic
from servetune.bench.stats import (
    FixedBinomial,
    SequentialBinomial,
    cluster_effect,
    design_effect,
    first_count,
    mean_se,
    min_judged,
    min_judged_once,
    projected_cluster_effect,
    t_quantile,
    trend,
)
from servetune.bench.windows import client_pace

if TYPE_CHECKING:
    from servetune.bench.schema import RequestRecord

__all__ = [
    "OFFERED_MIN",
    "BacklogCheck",
    "SloCheck",
    "StepJudge",
    "StepRules",
    "StepVerdict",
    "over_in_flight",
    "replay",
]

OFFERED_MIN = 0.9
"""A step whose client sent its arrivals at under this share of their schedule did not test its rate."""
OFFERED_MIN_SENT = 20
"""Arrivals sent before the client's pace is judged."""
OFFERED_LAG_S = 0.5
"""Seconds behind its schedule a client must also be to have not held the pace: a pause of the client's
process (a garbage collection, the host's scheduler) is not an inability to generate the load. In a
1 s step at 120 req/s, a 0.12 s pause of a loaded 2-core host's client read as 89% of the rate."""
MIN_POINTS = 8
"""Time bins a trend is fitted on at least."""

State = Literal["open", "met", "missed", "undecided", "invalid"]


@dataclass(frozen=True)
class StepRules:
    """How steps are judged (the capacity options of `bench`, `compare` and `tune`)."""

    confidence: float = 0.95
    """Confidence of every SLO decision (`--confidence`)."""
    warmup_s: float = 5.0
    """Seconds of arrivals at each step's start that no verdict judges (`--step-warmup-seconds`)."""
    horizon_s: float = 300.0
    """The backlog test extrapolates to this many seconds after the step's start (`--soak-horizon`)."""
    queue_bound_ms: float = 2000.0
    """The queueing bound of the backlog test when no TTFT SLO gives one (Sarathi-Serve bounds the
    median scheduling delay at 2 s)."""
    max_failed: float = 0.01
    """Largest share of failed requests in a met step."""
    cluster_s: float = 5.0
    """Width of the arrival spans a percentile SLO's count is clustered by (s; `--cluster-seconds`):
    requests over a bound in one burst count as one piece of evidence (`stats.cluster_effect`), so the
    stated confidence holds per burst seen, not per request (a burst the step never saw is the soak's
    to find); 0: every request independent."""
    bin_s: float = 1.0
    """Width of the backlog test's time bins (s); wider at low rates, so a bin holds 3 arrivals."""
    backlog_s: float = 30.0
    """Seconds of judged arrivals (after the warm-up) before the backlog test first decides: a
    shorter window reads an arrival burst as a backlog (GuideLLM's detector waits 30 s too)."""
    min_overload: float = 0.025
    """The backlog test calls a step growing when its growth is certainly above this share of the rate
    (requests in flight per second over the offered rate; or queueing delay in s per s): half the
    search's default resolution."""
    max_overload: float = 0.05
    """... and flat when its growth is certainly below this share (the search's resolution): a met step
    cannot hide an overload as large as the resolution the capacity is read to."""

    @classmethod
    def at_resolution(cls, resolution: float, **fields) -> StepRules:
        """The rules of a search read to `resolution`: its backlog test flags growth of half that share of
        the rate and shows a met step flat below all of it; `fields`: the others."""
        return cls(min_overload=resolution / 2, max_overload=resolution, **fields)

    def bin_width(self, rate: float) -> float:
        """The bin width at `rate`: `bin_s`, or wide enough for 3 arrivals, and at most an eighth of
        `backlog_s` (the trend needs points)."""
        width = max(self.bin_s, 3.0 / rate) if rate > 0 else self.bin_s
        return min(width, self.backlog_s / MIN_POINTS)

    def min_bins(self, rate: float) -> int:
        """Bins of the backlog test's first decision at `rate`."""
        return max(MIN_POINTS, math.ceil(self.backlog_s / self.bin_width(rate) - 1e-9))


class SloCheck(BaseModel):
    """One SLO at a look: what was counted and what it decided."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    slo: str
    """The SLO as written."""
    judged: int
    """Samples judged (requests in arrival order up to the first still open; ITL: their gaps)."""
    over: int
    """Samples over the bound among them (failed requests included)."""
    value_ms: float
    """The statistic over the judged samples that have a value (ms)."""
    bound_ms: float
    """The bound (ms)."""
    decision: Literal["met", "missed"] | None = None
    """The sequential test's decision so far (None: open)."""
    needed: int | None = None
    """Judged samples a percentile SLO needs to be met with as many over as now."""
    reachable: int | None = None
    """Samples the step can judge by its end at this pace: below `needed`, it can no longer be met."""
    cluster_effect: float = 1.0
    """How many judged samples the test counted as one: the design effect of the over-bound count
    over arrival spans of `StepRules.cluster_s` (`stats.cluster_effect`; 1 with nothing over). The
    decision is on `judged` and `over` divided by it."""
    spans: int = 0
    """Arrival spans of `StepRules.cluster_s` the judged samples lie in (0 without spans). With one, the
    cluster effect cannot be estimated and reads the over count: the span's overs are one burst (the module
    docstring)."""
    design_effect: float | None = None
    """At the step's decision: how alike neighbouring requests' latencies were (`stats.design_effect`
    of their log latencies in arrival order; None for ITL, whose samples are gaps, and while open).
    Reported, not used: the latency level moves with the batch at every rate; what the test needs is
    how the overs cluster (`cluster_effect`)."""

    @property
    def futile(self) -> bool:
        """Open, and it cannot be met before the step ends."""
        return (
            self.decision is None
            and self.reachable is not None
            and (self.needed is None or self.needed > self.reachable)
        )


class BacklogCheck(BaseModel):
    """The backlog test at a look."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    bins: int
    """Time bins after the warm-up."""
    in_flight: float
    """Mean requests in flight over the bins (from their scheduled arrival)."""
    slope: float | None = None
    """Trend of requests in flight (per second)."""
    slope_low: float | None = None
    """Its lower confidence bound."""
    slope_high: float | None = None
    """Its upper confidence bound."""
    completion_rate: float
    """Completions per second after the warm-up."""
    delay_ms: float
    """The queueing level now: the TTFT SLO's statistic (else the median TTFT), from the arrival."""
    delay_bound_ms: float
    """The queueing bound: the TTFT SLO's bound, else `StepRules.queue_bound_ms`."""
    delay_slope_ms_s: float | None = None
    """Trend of the mean TTFT from the arrival over the judged bins (ms per second)."""
    projected_delay_ms: float | None = None
    """The queueing level extrapolated to the horizon at the slopes' lower bounds (what certainly comes)."""
    forecast_delay_ms: float | None = None
    """The same at the slopes' upper bounds (what may come): a soak's forecast."""
    state: Literal["growing", "flat"] | None = None
    """`growing`: certainly falling behind; `flat`: readable and not; None: not yet readable."""
    creeping: bool = False
    """At the last checkpoint: growth certainly above 0 but not above `min_overload`, whose projection breaks
    the queueing bound by the horizon: not flat, so the step keeps sending (a config 2-4% past its throughput
    ceiling passed 35-75 s steps this way and failed its soak: docs/h200-results.md section 24)."""


class StepVerdict(BaseModel):
    """A step's verdict (or the state of one still running)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    state: State
    """`met`, `missed`, `undecided` (open at the step's end: not met), `invalid` (the client could not
    hold the rate: not a verdict), or `open` while the step runs."""
    why: str = ""
    """What decided it, or what is still open."""
    at_s: float
    """Seconds since the step's first arrival at this look."""
    sent: int
    """Arrivals sent."""
    judged: int
    """Arrivals after the warm-up."""
    failed: int
    """Failed requests among the judged."""
    confidence: float
    """The confidence of its SLO decisions."""
    slos: list[SloCheck]
    """One per SLO."""
    backlog: BacklogCheck | None = None
    """The backlog test (None before any bin)."""
    offered_ratio: float | None = None
    """Scheduled over actual sending time of the arrivals (1.0: the client kept its schedule)."""

    @property
    def met(self) -> bool:
        return self.state == "met"


class StepJudge:
    """Judges one step at one rate against `slos` (module docstring).

    Args:
        slos: The latency SLOs.
        rules: How to judge.
        rate: The step's Poisson rate (req/s).
        max_s: The step's longest run (s); at it, an open verdict is `undecided`.
        soak: A soak: met only at `max_s`, by one fixed-length test there (`stats.FixedBinomial`:
            it looks once); it may still stop early when missed (sequentially) or futile.
    """

    def __init__(
        self, slos: Sequence[LatencySlo], rules: StepRules, *, rate: float, max_s: float, soak: bool = False
    ) -> None:
        self.slos = tuple(slos)
        self.rules = rules
        self.rate = rate
        self.max_s = max_s
        self.soak = soak
        self.width = rules.bin_width(rate)
        self._min_bins = rules.min_bins(rate)
        self._tests = {
            s: SequentialBinomial(1.0 - s.quantile, rules.confidence) for s in self.slos if s.quantile is not None
        }
        self._failures = SequentialBinomial(rules.max_failed, rules.confidence)
        ttft = [s for s in self.slos if s.metric == "ttft"]
        self._delay = min(ttft, key=lambda s: s.bound_ms) if ttft else None
        self._prefix = {s: _Prefix() for s in self.slos}
        self._ttfts = _Prefix()
        self._records: Sequence[RequestRecord] | None = None
        self._first = 0
        self._checkpoint = 0
        self._backlog_state: Literal["growing", "flat"] | None = None
        self._creeping = False
        self.last: StepVerdict | None = None

    @property
    def records(self) -> Sequence[RequestRecord]:
        """The step's records as the last look saw them (every arrival sent, in arrival order)."""
        return self._records if self._records is not None else ()

    def needed(self, over: float = 0) -> int:
        """Judged requests the strictest percentile SLO needs to be met with `over` over its bound."""
        counts = [self._min_judged(t, over) or 0 for t in self._tests.values()]
        return max(counts, default=0)

    def _min_judged(self, test: SequentialBinomial, over: float) -> int | None:
        """The judged count `test`'s SLO is met from with `over` over: once, at a soak's end, or sequentially."""
        return (min_judged_once if self.soak else min_judged)(test.allowed, test.confidence, over)

    def shortfall(self) -> str | None:
        """Why a step this long cannot reach a verdict at its rate, or None."""
        need = self.needed()
        span = self.max_s - self.rules.warmup_s
        if self.rate * span >= need and span >= self.rules.backlog_s:
            return None
        seconds = self.rules.warmup_s + max(need / self.rate, self.rules.backlog_s)
        return (
            f"at {self.rate:.4g} req/s a {self.max_s:g} s step judges about {self.rate * max(span, 0):.0f} requests, "
            f"and a verdict at {self.rules.confidence:.0%} confidence needs {need}: it needs {seconds:.0f} s"
        )

    def look(self, records: Sequence[RequestRecord], now: float) -> StepVerdict:
        """The verdict so far, from every record sent (in arrival order) at `now` (the records' clock).

        `records` is the step's one growing list, the same object at every look: what the judge has
        counted is kept between looks (a request's outcome, once known, does not change)."""
        verdict = self._judge(records, now, final=False)
        self.last = verdict
        return verdict

    def close(self, records: Sequence[RequestRecord], now: float) -> StepVerdict:
        """The final verdict: the last look, with `open` turned `undecided`."""
        verdict = self._judge(records, now, final=True)
        self.last = verdict
        return verdict

    def done(self, verdict: StepVerdict) -> bool:
        """Whether the step may stop at this verdict."""
        return verdict.state != "open"

    def _judge(self, records: Sequence[RequestRecord], now: float, *, final: bool) -> StepVerdict:
        rules = self.rules
        if not records:
            state: State = "undecided" if final else "open"
            return StepVerdict(
                state=state, why="no request was sent", at_s=0.0, sent=0, judged=0, failed=0,
                confidence=rules.confidence, slos=[],
            )  # fmt: skip
        if records is not self._records:
            self._records = records
            self._prefix = {s: _Prefix() for s in self.slos}
            self._ttfts = _Prefix()
            self._first = self._checkpoint = 0
            self._backlog_state = None
            self._creeping = False
        t0 = records[0].arrival
        rel = now - t0
        while self._first < len(records) and records[self._first].arrival - t0 < rules.warmup_s:
            self._first += 1
        judged = records[self._first :] if isinstance(records, list) else list(records)[self._first :]
        failed = sum(1 for r in judged if r.finished and not r.success)
        remaining = self.rate * max(0.0, self.max_s - rel)
        checks = [self._check(s, judged, now, remaining) for s in self.slos]
        backlog = self._backlog(records, judged, t0, now, checks)
        pace = client_pace(records)
        offered, behind = pace if pace is not None else (None, 0.0)
        base = dict(
            at_s=rel, sent=len(records), judged=len(judged), failed=failed, confidence=rules.confidence,
            slos=checks, backlog=backlog, offered_ratio=offered,
        )  # fmt: skip
        if (
            offered is not None
            and len(records) >= OFFERED_MIN_SENT
            and offered < OFFERED_MIN
            and behind >= OFFERED_LAG_S
        ):
            return StepVerdict(
                state="invalid",
                why=f"the client sent only {offered:.0%} of the rate (it cannot generate this load)",
                **base,
            )
        missed = [  # within one span: a burst that alone outweighs the allowance (the module docstring)
            f"{c.slo} ({c.over} of {c.judged} over{', within one span' if c.spans == 1 else ''})"
            for c in checks
            if c.decision == "missed"
        ]
        finished = sum(1 for r in judged if r.finished)
        if self._failures.decide(finished, failed) == "missed":
            missed.append(f"{failed} of {finished} requests failed")
        if backlog is not None and backlog.state == "growing":
            missed.append(
                f"falls behind: {backlog.slope_low:+.2f} requests in flight per s at least, queueing "
                f"{backlog.projected_delay_ms:.0f} ms by {rules.horizon_s:g} s (bound {backlog.delay_bound_ms:g})"
            )
        if missed:
            return StepVerdict(state="missed", why="; ".join(missed), **self._effective(base))
        futile = [
            f"{c.slo} cannot be met in {self.max_s:g} s ({c.over} of {c.judged} over; "
            f"{c.needed or 'too many'} judged needed, {c.reachable} reachable)"
            for c in checks
            if c.futile
        ]
        if futile:
            return StepVerdict(state="undecided", why="; ".join(futile), **self._effective(base))
        open_ = [
            f"{c.slo}: {c.judged} judged, {c.over} over, needs {c.needed or '?'}" for c in checks if c.decision is None
        ]
        if backlog is None or backlog.state is None:
            if backlog is None or backlog.bins < self._min_bins:
                open_.append(f"backlog: {backlog.bins if backlog else 0} of {self._min_bins} bins")
            elif backlog.creeping and backlog.projected_delay_ms is not None:
                open_.append(
                    f"backlog: creeping ({backlog.slope_low:+.2f} requests in flight per s at least, queueing "
                    f"{backlog.projected_delay_ms:.0f} ms by {rules.horizon_s:g} s): not yet shown steady"
                )
            else:
                open_.append("backlog: not yet shown steady")
        if finished and failed / finished > rules.max_failed:
            open_.append(f"{failed} of {finished} failed")
        if self.soak and rel < self.max_s and not final:
            open_.append("soaking")
        if not open_:
            return StepVerdict(state="met", why="", **self._effective(base))
        if final:
            return StepVerdict(state="undecided", why="; ".join(open_), **self._effective(base))
        return StepVerdict(state="open", why="; ".join(open_), **base)

    def _effective(self, base: dict) -> dict:
        """`base` with each percentile SLO's design effect, computed once the step is decided."""
        checks = []
        for check, slo in zip(base["slos"], self.slos):
            if slo.quantile is None or slo.metric == "itl":
                checks.append(check)
                continue
            values = [math.log(max(v, 1e-3)) for v in self._prefix[slo].values]
            checks.append(check.model_copy(update={"design_effect": design_effect(values)}))
        return {**base, "slos": checks}

    def _check(self, slo: LatencySlo, judged: Sequence[RequestRecord], now: float, remaining: float) -> SloCheck:
        """One SLO's count and decision; `remaining`: arrivals still to come before the step's end."""
        prefix = self._prefix[slo]
        test = self._tests.get(slo)
        width = self.rules.cluster_s
        t0 = judged[0].arrival if judged else 0.0
        span = (lambda r: int((r.arrival - t0) // width)) if width > 0 and test is not None else None
        prefix.advance(judged, lambda r: _outcome(r, slo, now), span)
        n, over = prefix.n, prefix.over
        value = statistic(prefix.values, slo.stat)
        if test is None:
            return SloCheck(
                slo=str(slo), judged=n, over=over, value_ms=value, bound_ms=slo.bound_ms,
                decision=self._mean_decision(slo, judged, now),
            )  # fmt: skip
        effect = cluster_effect(prefix.clusters.values())  # 1 without spans (`cluster_s` 0)
        per_request = n / prefix.cursor if prefix.cursor else 1.0
        decision = test.decide(n / effect, over / effect)
        if self.soak and decision != "missed":  # a soak's met: one look at its end (`done` holds it till then)
            decision = "met" if self._meets(test, n / effect, over / effect) else None
        clean_span = per_request * self.rate * width if width > 0 else 0.0  # samples one span of arrivals holds
        return SloCheck(
            slo=str(slo), judged=n, over=over, value_ms=value, bound_ms=slo.bound_ms,
            decision=decision, cluster_effect=round(effect, 2),
            spans=sum(1 for c, _ in prefix.clusters.values() if c > 0),
            needed=self._needed_by_end(test, prefix.clusters.values(), over, effect, clean_span),
            reachable=int(n + per_request * (len(judged) - prefix.cursor + remaining)),
        )  # fmt: skip

    def _meets(self, test: SequentialBinomial, n: float, over: float) -> bool:
        """Whether `n` judged with `over` over (effective counts) are met: by one test at a soak's end, else
        by the sequential test."""
        if self.soak:
            return FixedBinomial(test.allowed, test.confidence).decide(n, over) == "met"
        return test.decide(n, over) == "met"

    def _needed_by_end(
        self, test: SequentialBinomial, clusters: Iterable[tuple[int, int]], over: int, effect: float, span: float
    ) -> int | None:
        """The judged samples `test`'s SLO needs to be met with `over` over, if every sample still to come is
        within the bound: the cluster effect then is the one a count of that size would read
        (`stats.projected_cluster_effect`, clean spans of `span` samples to come), not today's, which rests
        on the spans seen so far (a burst in the second of two spans read 3.2 on the H200 where a step's
        end would read 2.0, and stopped a step that could still be met). None beyond a million."""
        if over == 0 or span <= 0:  # the effect cannot move: 1 with nothing over, or no spans
            need = self._min_judged(test, over / effect)
            return math.ceil(need * effect) if need is not None else None
        clusters = list(clusters)

        def met(total: int) -> bool:
            end = projected_cluster_effect(clusters, total, span)
            return self._meets(test, total / end, over / end)

        # met grows likelier with the count: the clean spans to come outweigh the burst
        return first_count(met, sum(c for c, _ in clusters), 1_000_000)

    def _mean_decision(self, slo: LatencySlo, judged: Sequence[RequestRecord], now: float) -> str | None:
        """A mean SLO: met when its upper confidence bound (bins of completed requests) is within the
        bound, missed when its lower one is over."""
        if not judged:
            return None
        t0 = judged[0].arrival
        bins: dict[int, list[float]] = {}
        for r in judged:
            outcome = _outcome(r, slo, now)
            if outcome is None:
                break
            for v in outcome[2]:
                bins.setdefault(int((r.arrival - t0) // self.width), []).append(v)
        means = [math.fsum(v) / len(v) for _, v in sorted(bins.items())]
        if len(means) < self._min_bins:
            return None
        mean = math.fsum(means) / len(means)
        margin = t_quantile(self.rules.confidence, len(means) - 1) * mean_se(means, self._lag(judged) or 1)
        if mean + margin <= slo.bound_ms:
            return "met"
        if mean - margin > slo.bound_ms:
            return "missed"
        return None

    def _backlog(
        self,
        records: Sequence[RequestRecord],
        judged: Sequence[RequestRecord],
        t0: float,
        now: float,
        checks: Sequence[SloCheck],
    ) -> BacklogCheck | None:
        """The backlog test (module docstring). Its decision is taken at checkpoints of `min_bins`,
        1.5, 2.25 ... times as many bins, the k-th spending `_spent(1 - confidence, k)` of the error
        (split between the two signals), so that looking again and again cannot add up to more than
        one test's error; between checkpoints the last decision stands."""
        rules, w = self.rules, self.width
        start = t0 + rules.warmup_s
        count = int((now - start) // w)
        if count < 1:
            return None
        edges = [start + j * w for j in range(count + 1)]
        ends = sorted(r.end for r in records if r.finished)
        arrivals = sorted(r.arrival for r in records)
        in_flight = _bin_means(arrivals, ends, edges)
        completions = bisect.bisect_right(ends, now) - bisect.bisect_left(ends, start)
        rate = max(completions, 1) / max(now - start, 1e-9)
        self._ttfts.advance(judged, _ttft_known)
        ttfts = self._ttfts.pairs
        if self._delay is not None:
            bound = self._delay.bound_ms
            level = next(c.value_ms for c, s in zip(checks, self.slos) if s is self._delay)
        else:
            bound = rules.queue_bound_ms
            level = statistic([v for _, v in ttfts], "p50")
        out = BacklogCheck(
            bins=count, in_flight=math.fsum(in_flight) / count, completion_rate=rate, delay_ms=level,
            delay_bound_ms=bound, state=self._backlog_state,
        )  # fmt: skip
        series = self._backlog_series(arrivals, edges, in_flight)
        fit = trend([(e + w / 2) - t0 for e in edges[:-1]], series, lag=self._lag(judged))
        if fit is None:
            return out
        horizon = max(rules.horizon_s, now - t0)
        low, high = fit.bounds(rules.confidence)
        delay = self._delay_trend(ttfts, t0)
        d_low, d_high = delay.bounds(rules.confidence) if delay is not None else (0.0, 0.0)
        ahead = max(0.0, horizon - fit.t_mean)
        d_ahead = max(0.0, horizon - delay.t_mean) if delay is not None else 0.0
        projected = max(level + max(0.0, low) * ahead / rate * 1000.0, level + max(0.0, d_low) * d_ahead)
        forecast = max(level + max(0.0, high) * ahead / rate * 1000.0, level + max(0.0, d_high) * d_ahead)
        if count >= _checkpoint(self._min_bins, self._checkpoint):
            self._checkpoint += 1
            conf = 1.0 - _spent(1.0 - rules.confidence, self._checkpoint - 1) / 2  # split between the two signals
            c_low, c_high = fit.bounds(conf)
            d_bounds = delay.bounds(conf) if delay is not None else None
            # certain growth (at the lower bound) that breaks the queueing bound by the horizon
            reaches = c_low > 0.0 and level + c_low * ahead / rate * 1000.0 > bound
            d_reaches = d_bounds is not None and d_bounds[0] > 0.0 and level + d_bounds[0] * d_ahead > bound
            piling = reaches and c_low > rules.min_overload * self.rate  # requests in flight per s
            slower = d_reaches and d_bounds[0] > rules.min_overload * 1000.0
            growing = piling or slower
            # growth too slow to call a miss that still breaks the bound by the horizon: not flat either
            self._creeping = (reaches or d_reaches) and not growing
            # flat: growth of the resolution's share of the rate or more is excluded; "not shown growing"
            # alone let a held-out server 2-5% past its ceiling be met within a 50 s step
            wide = rules.max_overload * self.rate
            steady = c_high < wide and (d_bounds is None or d_bounds[1] < rules.max_overload * 1000.0)
            self._backlog_state = "growing" if growing else "flat" if steady and not self._creeping else None
        return out.model_copy(
            update=dict(
                slope=fit.slope, slope_low=low, slope_high=high,
                delay_slope_ms_s=delay.slope if delay is not None else None, projected_delay_ms=projected,
                forecast_delay_ms=forecast, state=self._backlog_state, creeping=self._creeping,
            )
        )  # fmt: skip

    def _backlog_series(
        self, arrivals: Sequence[float], edges: Sequence[float], in_flight: Sequence[float]
    ) -> Sequence[float]:
        """The series the backlog test fits its trend to, one value per bin between `edges`: the requests in
        flight (`in_flight`, from their scheduled `arrivals`). A replay may read another one
        (`benchmarks/replay_verdicts.py --net-arrivals`)."""
        return in_flight

    def _delay_trend(self, ttfts: Sequence[tuple[float, float]], t0: float):
        """The trend of the mean TTFT from the arrival over bins of the judged, TTFT-known prefix."""
        bins: dict[int, list[float]] = {}
        start = t0 + self.rules.warmup_s
        for arrival, value in ttfts:
            bins.setdefault(int((arrival - start) // self.width), []).append(value)
        if len(bins) < 4:
            return None
        keys = sorted(bins)
        return trend(
            [self.rules.warmup_s + (k + 0.5) * self.width for k in keys],
            [math.fsum(bins[k]) / len(bins[k]) for k in keys],
        )

    def _lag(self, judged: Sequence[RequestRecord]) -> int | None:
        """The Newey-West lag: at least the bins a slow request spans (queue state carries over that long)."""
        lat = sorted(r.lag + r.latency for r in judged if r.finished and r.success)
        if not lat:
            return None
        return max(1, math.ceil(lat[int(0.9 * (len(lat) - 1))] / self.width))


def _outcome(r: RequestRecord, slo: LatencySlo, now: float) -> tuple[int, int, list[float]] | None:
    """(samples, over, values in ms) of one request for `slo` at `now`, or None while it is open."""
    if r.finished and not r.success:
        return 1, 1, []
    bound = slo.bound_ms
    if slo.metric == "itl":
        if not r.finished:
            return None
        gaps = [g * 1000.0 for g in r.itl]
        return len(gaps), sum(1 for g in gaps if not slo.holds(g)), gaps
    if r.finished:
        value = request_latency_ms(r, slo.metric)
        if value is None:
            return 0, 0, []
        return 1, 0 if slo.holds(value) else 1, [value]
    # in flight: over once its latency already exceeds the bound
    waited = (now - r.arrival) * 1000.0
    if slo.metric == "ttft":
        if r.ttft > 0.0:
            value = (r.ttft + r.lag) * 1000.0
            return 1, 0 if slo.holds(value) else 1, [value]
        return (1, 1, []) if waited > bound else None
    if slo.metric == "e2e":
        return (1, 1, []) if waited > bound else None
    if slo.metric != "tpot":
        raise ValueError(f"no in-flight rule for the latency {slo.metric!r}")
    if r.ttft > 0.0 and r.output_len > 1:  # the decode so far already exceeds the budget
        decoding = (now - r.start - r.ttft) * 1000.0
        return (1, 1, []) if decoding > bound * (r.output_len - 1) else None
    return None


def over_in_flight(r: RequestRecord, slos: Sequence[LatencySlo], now: float) -> bool:
    """Whether a request still in flight at `now` (step clock) already counts as over one of `slos`' bounds,
    as a step's verdict counts it (its latency so far exceeds a bound; for TPOT, its decode so far exceeds the
    whole budget of its planned tokens); False for a finished request (`slo.request_meets` judges those)."""
    if r.finished:
        return False
    return any((o := _outcome(r, slo, now)) is not None and o[1] > 0 for slo in slos)  # ITL: open until finished


def _ttft_known(r: RequestRecord) -> tuple[int, int, list[float]] | None:
    """For the delay trend: a request's TTFT from the arrival once known (a failed one adds nothing)."""
    if r.ttft > 0.0:
        return 1, 0, [(r.ttft + r.lag) * 1000.0]
    return (0, 0, []) if r.finished else None


class _Prefix:
    """What a judge has counted of one SLO: the judged requests in arrival order up to the first
    whose outcome is still open (`advance` goes on from there at the next look)."""

    def __init__(self) -> None:
        self.cursor = 0
        self.n = 0
        self.over = 0
        self.values: list[float] = []
        self.pairs: list[tuple[float, float]] = []
        """(arrival, value) of the requests with one value (the delay trend's points)."""
        self.clusters: dict[int, tuple[int, int]] = {}
        """(samples, over) per arrival span (`StepRules.cluster_s`)."""

    def advance(self, judged: Sequence[RequestRecord], outcome, cluster=None) -> None:
        while self.cursor < len(judged):
            r = judged[self.cursor]
            got = outcome(r)
            if got is None:
                return
            k, bad, vals = got
            self.n += k
            self.over += bad
            if cluster is not None:
                c = cluster(r)
                had = self.clusters.get(c, (0, 0))
                self.clusters[c] = (had[0] + k, had[1] + bad)
            self.values += vals
            if len(vals) == 1:
                self.pairs.append((r.arrival, vals[0]))
            self.cursor += 1


def _checkpoint(first: int, k: int) -> int:
    """The bins of the backlog test's k-th checkpoint: `first`, then 1.5 times as many each."""
    return math.ceil(first * 1.5**k)


def _spent(alpha: float, k: int) -> float:
    """The error the k-th checkpoint may spend: alpha * 6 / (pi^2 (k+1)^2), which sums to alpha."""
    return alpha * 6.0 / (math.pi**2 * (k + 1) ** 2)


def _bin_means(arrivals: Sequence[float], ends: Sequence[float], edges: Sequence[float]) -> list[float]:
    """The time-averaged count in flight (arrived, not ended) over each bin between `edges`, from sorted
    arrival and end times (prefix sums: the integral of a count of times <= t is a sum of overlaps)."""

    def integral(times: Sequence[float], sums: list[float], a: float, b: float) -> float:
        lo, hi = bisect.bisect_right(times, a), bisect.bisect_right(times, b)
        return lo * (b - a) + (hi - lo) * b - (sums[hi] - sums[lo])

    def prefix(times: Sequence[float]) -> list[float]:
        out = [0.0]
        for t in times:
            out.append(out[-1] + t)
        return out

    sa, se = prefix(arrivals), prefix(ends)
    return [(integral(arrivals, sa, a, b) - integral(ends, se, a, b)) / (b - a) for a, b in zip(edges, edges[1:])]


def replay(
    records: Sequence[RequestRecord], judge: StepJudge, *, look_s: float = 0.5, until: float | None = None
) -> tuple[StepVerdict, list[RequestRecord]]:
    """Judge the records of a recorded or simulated step as a client would have seen them: look every
    `look_s` seconds of their clock, each time at what was known then (sent, first token, finished),
    up to the first decision or `judge.max_s`; a record left unfinished (cancelled) never ends. `until`
    (s after the first arrival): how long the recorded step ran (default: its last completion).
    Returns the verdict and the records as they stood then (those still in flight unfinished, as a
    stopped step's client leaves them)."""
    import heapq
    from dataclasses import replace

    ordered = sorted(records, key=lambda r: r.arrival)
    if not ordered:
        return judge.close([], 0.0), []
    t0 = ordered[0].arrival
    last = t0 + until if until is not None else max([r.end for r in ordered if r.finished] or [t0])
    end = min(t0 + judge.max_s, last)
    view: list[RequestRecord] = []
    events: list[tuple[float, int, int]] = []  # (time, kind 0 first token / 1 end, index into view)
    sent = 0
    t = t0
    while True:
        t = min(t + look_s, end)
        while sent < len(ordered) and ordered[sent].start <= t:
            r = ordered[sent]
            view.append(replace(r, finished=False, success=False, ttft=0.0, latency=0.0, itl=[], error=""))
            if r.ttft > 0.0:
                heapq.heappush(events, (r.start + r.ttft, 0, sent))
            if r.finished:  # one left unfinished was cancelled when its step stopped: it never ends
                heapq.heappush(events, (r.end, 1, sent))
            sent += 1
        while events and events[0][0] <= t:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                view[i].ttft = ordered[i].ttft
            else:
                view[i] = replace(ordered[i], finished=True)
        verdict = judge.look(view, t)
        if judge.done(verdict):
            return verdict, view
        if t >= end:
            return judge.close(view, t), view
