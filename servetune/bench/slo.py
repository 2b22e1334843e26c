"""Latency SLOs (`--slo p99_ttft_ms<=800`) and goodput, as vLLM's and SGLang's `--goodput` define it.

**One grammar for every `--slo`** (bench, compare, tune; `parse_bound`): `NAME OP N`. A latency
statistic `STAT_METRIC[_ms]<=N` (or `<`), with STAT one of p50, p90, p95, p99, mean, median and
METRIC one of ttft, tpot, itl, e2e (milliseconds), is a `LatencySlo`: what a run's verdicts, goodput
and a capacity search judge. Any other metric the benchmark reports, with `<=`, `<`, `>=` or `>`
(`steady_request_throughput>=10`), is a `MetricBound`: a study's constraint on a throughput
objective (a latency SLO is one too, on its statistic). One error style: the SLO as written, what is
wrong, an example. Two things are judged against a set of latency SLOs:

- **the verdict** of a run: each SLO's statistic over the run's requests against its bound (TTFT
  and E2E from each request's scheduled arrival when the run had a schedule: `request_latency_ms`),
  and, for a percentile, whether the count over the bound is enough to say so at 95% confidence
  (`SloVerdict.confident`, `servetune.bench.stats.FixedBinomial`: one look, at the run's end);
- **goodput**: the requests per second that met *every* SLO's bound individually (a request
  meets `p99_ttft_ms<=800` when its own TTFT is at most 800 ms; its TPOT is
  `(e2e - ttft) / (output_tokens - 1)`; its ITL is its mean inter-token gap), over the run's
  duration; `slo_attainment` is their share of the measured requests (failed ones count as
  missed). This is the per-request definition of vLLM's `--goodput` and SGLang's bench_serving.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from servetune.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from servetune.bench.schema import RequestRecord

__all__ = [
    "LatencySlo",
    "MetricBound",
    "parse_bound",
    "SloReport",
    "SloVerdict",
    "judge",
    "over_count",
    "parse_slos",
    "request_latency_ms",
    "request_meets",
    "samples_ms",
    "statistic",
]

STATS = ("p50", "p90", "p95", "p99", "mean", "median")
METRICS = ("ttft", "tpot", "itl", "e2e")
_FORM = re.compile(r"^(?P<stat>[a-z0-9]+)_(?P<metric>[a-z0-9]+?)(?:_latency)?(?:_ms)?\s*(?P<op><=|<)\s*(?P<bound>\S+)$")
_EXAMPLE = (
    "write STAT_METRIC_ms<=N, e.g. --slo p99_ttft_ms<=800 --slo p99_tpot_ms<=40 (a study also takes a bound on "
    "any reported metric, e.g. steady_request_throughput>=10)"
)


@dataclass(frozen=True)
class LatencySlo:
    """A bound on one latency statistic, e.g. p99 TTFT at most 800 ms."""

    stat: Literal["p50", "p90", "p95", "p99", "mean", "median"]
    metric: Literal["ttft", "tpot", "itl", "e2e"]
    bound_ms: float
    strict: bool = False

    def __str__(self) -> str:
        return f"{self.stat}_{self.metric}_ms{'<' if self.strict else '<='}{self.bound_ms:g}"

    @property
    def quantile(self) -> float | None:
        """The statistic as a fraction (p99 → 0.99, median → 0.5); None for the mean."""
        if self.stat == "mean":
            return None
        return 0.5 if self.stat in ("p50", "median") else int(self.stat[1:]) / 100.0

    @property
    def key(self) -> str:
        """The `Metrics` field this SLO reads, e.g. `p99_ttft_ms`, `median_e2e_latency_ms`."""
        stat = "median" if self.stat == "p50" else self.stat
        metric = "e2e_latency" if self.metric == "e2e" else self.metric
        return f"{stat}_{metric}_ms"

    def holds(self, value_ms: float) -> bool:
        """Whether a value (a statistic or one request's latency) is within the bound."""
        return value_ms < self.bound_ms if self.strict else value_ms <= self.bound_ms


def parse_slo(text: str) -> LatencySlo:
    """`p99_ttft_ms<=800` → `LatencySlo("p99", "ttft", 800.0)`.

    Raises:
        SpecError: The text is not STAT_METRIC_ms<=N with a known statistic and metric and a
            positive finite bound (the option and a fix are named).
    """
    raw = text.strip()
    m = _FORM.match(raw.replace(" ", ""))
    if m is None:
        raise SpecError(f"cannot read the SLO {text!r}", key_path="--slo", help=_EXAMPLE)
    stat, metric = m["stat"], m["metric"]
    if metric == "e2el":
        metric = "e2e"
    if stat not in STATS:
        hint = did_you_mean(stat, STATS)
        raise SpecError(
            f"unknown statistic {stat!r} in the SLO {text!r}",
            key_path="--slo",
            help=(f"did you mean {hint!r}? " if hint else "") + f"statistics: {', '.join(STATS)}",
        )
    if metric not in METRICS:
        hint = did_you_mean(metric, METRICS)
        raise SpecError(
            f"unknown latency {metric!r} in the SLO {text!r}",
            key_path="--slo",
            help=(f"did you mean {hint!r}? " if hint else "") + f"latencies: {', '.join(METRICS)} (in ms)",
        )
    try:
        bound = float(m["bound"])
    except ValueError:
        raise SpecError(
            f"the SLO bound {m['bound']!r} is not a number", key_path=f"--slo {text}", help=_EXAMPLE
        ) from None
    if not math.isfinite(bound) or bound <= 0:
        raise SpecError(
            f"the SLO bound must be a positive number of milliseconds, but got {m['bound']!r}",
            key_path=f"--slo {text}",
            help=_EXAMPLE,
        )
    return LatencySlo(stat, metric, bound, strict=m["op"] == "<")  # type: ignore[arg-type]


@dataclass(frozen=True)
class MetricBound:
    """A bound on any metric the benchmark reports, e.g. `steady_request_throughput>=10`: a study's
    constraint (Optuna's `constraints_func` reads `violation`)."""

    metric: str
    op: Literal["<=", "<", ">=", ">"]
    bound: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def violation(self, metrics: Mapping[str, Any]) -> float:
        """<= 0 when met, the (positive) overshoot otherwise; a metric the run did not produce counts as
        a violation (the bound cannot be claimed to hold)."""
        value = metrics.get(self.metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return 1e12
        excess = value - self.bound if self.op in ("<=", "<") else self.bound - value
        if self.op in ("<", ">") and excess == 0:
            return 1e-9
        return excess

    @classmethod
    def of(cls, slo: LatencySlo | MetricBound) -> MetricBound:
        """A latency SLO as a bound on the `Metrics` field of its statistic (`p99_ttft_ms<=800`)."""
        if isinstance(slo, MetricBound):
            return slo
        return cls(slo.key, "<" if slo.strict else "<=", slo.bound_ms)


_BOUND = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)(?P<op><=|>=|<|>)(?P<bound>.*)$")
_LATENCY_NAME = re.compile(r"^(?P<stat>p\d+|mean|median)_(?P<metric>[a-z0-9]+?)(?:_latency)?(?:_ms)?$")
"""A latency statistic's name: STAT_METRIC with `_ms` or not (its metric checked against `METRICS`)."""


def _is_latency(name: str) -> bool:
    """A latency SLO's name, or one close enough to it that a typo should be told (`p99_ttfx_ms`); any
    other name (`p99_queue_delay_ms`, `steady_request_throughput`) bounds a reported metric."""
    m = _LATENCY_NAME.match(name)
    if m is None:
        return False
    metric = "e2e" if m["metric"] == "e2el" else m["metric"]
    return metric in METRICS or did_you_mean(metric, METRICS) is not None


def parse_bound(text: str) -> LatencySlo | MetricBound:
    """One `--slo` in the one grammar (module docstring): a `LatencySlo` for a latency statistic in
    ms (STAT_METRIC_ms with METRIC one of `METRICS`), else a `MetricBound` on the named metric (its
    name is checked where the metrics are known: `tuner.objectives.parse_constraint`).

    Raises:
        SpecError: No `NAME OP N`; a latency SLO that is not STAT_METRIC_ms<=N (`parse_slo`'s errors);
            a bound that is not a finite number.
    """
    raw = (text or "").strip().replace(" ", "")
    m = _BOUND.match(raw)
    if m is None:
        raise SpecError(f"cannot read the SLO {text!r}", key_path="--slo", help=_EXAMPLE)
    if _is_latency(m["name"]):
        return parse_slo(text)
    try:
        bound = float(m["bound"])
    except ValueError:
        where = f"--slo {text}"
        raise SpecError(f"the SLO bound {m['bound']!r} is not a number", key_path=where, help=_EXAMPLE) from None
    if not math.isfinite(bound):
        where = f"--slo {text}"
        raise SpecError(f"the SLO bound must be a finite number, but got {m['bound']!r}", key_path=where, help=_EXAMPLE)
    return MetricBound(m["name"], m["op"], bound)  # type: ignore[arg-type]


def parse_slos(texts: Iterable[str]) -> tuple[LatencySlo, ...]:
    """Every `--slo` of a run, a comparison or a capacity search: latency SLOs only; the same statistic
    twice is an error."""
    slos = []
    for text in texts:
        slo = parse_bound(text)
        if isinstance(slo, MetricBound):
            raise SpecError(
                f"the SLO {text!r} bounds {slo.metric}, not a latency",
                key_path="--slo",
                help="runs, comparisons and capacities are judged on latency SLOs STAT_METRIC_ms<=N, "
                "e.g. --slo p99_ttft_ms<=2000; a bound on another metric is a study's constraint (tune)",
            )
        slos.append(slo)
    slos = tuple(slos)
    keys = [s.key for s in slos]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise SpecError(f"--slo bounds {', '.join(twice)} twice", key_path="--slo", help="give each statistic once")
    return slos


def request_latency_ms(record: RequestRecord, metric: str) -> float | None:
    """One request's latency for `metric` (ms), as SLOs judge it: TTFT and E2E from its scheduled
    arrival (the client's lateness counts against the server, so a client that falls behind cannot
    hide a queue), TPOT over its tokens after the first, ITL its mean gap; None where it has none."""
    if metric == "ttft":
        return (record.ttft + record.lag) * 1000.0
    if metric == "e2e":
        return (record.latency + record.lag) * 1000.0
    if metric == "tpot":
        return (record.latency - record.ttft) / (record.output_len - 1) * 1000.0 if record.output_len > 1 else None
    if metric == "itl":
        return math.fsum(record.itl) / len(record.itl) * 1000.0 if record.itl else None
    raise ValueError(f"no per-request latency {metric!r}: one of {', '.join(METRICS)}")


def samples_ms(records: Iterable[RequestRecord], metric: str) -> list[float]:
    """The values a statistic of `metric` is taken over (ms), from the completed requests: one per
    request (`request_latency_ms`), except ITL, whose samples are every gap, pooled."""
    done = [r for r in records if r.success]
    if metric == "itl":
        return [gap * 1000.0 for r in done for gap in r.itl]
    values = (request_latency_ms(r, metric) for r in done)
    return [v for v in values if v is not None]


def statistic(values: Sequence[float], stat: str) -> float:
    """`stat` (p50, p90, p95, p99, mean, median) of `values` (0.0 when empty, as SGLang reports)."""
    from servetune.bench.stats import percentile

    if not values:
        return 0.0
    if stat == "mean":
        return math.fsum(values) / len(values)
    q = 50 if stat in ("p50", "median") else int(stat[1:])
    return percentile(sorted(values), q)


def request_meets(record: RequestRecord, slos: Sequence[LatencySlo]) -> bool:
    """Whether one request met every SLO's bound (a failed request met none; a latency a
    one-token request does not have, TPOT or ITL, does not count against it)."""
    if not record.success:
        return False
    for slo in slos:
        value = request_latency_ms(record, slo.metric)
        if value is not None and not slo.holds(value):
            return False
    return True


def over_count(records: Iterable[RequestRecord], slo: LatencySlo) -> tuple[int, int]:
    """(samples, samples over the bound) of `slo` among the completed requests: requests, or for
    ITL gaps (the samples its statistic pools)."""
    values = samples_ms(records, slo.metric)
    return len(values), sum(1 for v in values if not slo.holds(v))


class SloVerdict(BaseModel):
    """One SLO judged on a run."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    slo: str
    """The SLO as written, e.g. `p99_ttft_ms<=800`."""
    value_ms: float
    """The run's statistic (ms): TTFT and E2E from each request's scheduled arrival."""
    bound_ms: float
    """The bound (ms)."""
    met: bool
    """Whether the statistic is within the bound."""
    over: int = 0
    """Samples over this bound (requests; for ITL, gaps)."""
    samples: int = 0
    """Samples judged (requests; for ITL, gaps)."""
    confident: Literal["met", "missed", "undecided"] | None = None
    """A percentile SLO's verdict at the run's confidence (`servetune.bench.stats.FixedBinomial` on
    `samples` and `over`, the one test of a run judged once, at its end: p99 at 95% is met from 299
    samples with none over, MLPerf's count): `undecided` when the run is too short to tell; None for a
    mean."""

    @property
    def headroom(self) -> float:
        """How far inside the bound the value is, as a fraction of the bound (negative: over it)."""
        return (self.bound_ms - self.value_ms) / self.bound_ms


class SloReport(BaseModel):
    """A run against a set of SLOs: verdicts, goodput and attainment."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    verdicts: list[SloVerdict]
    """One per SLO."""
    met: bool
    """Every SLO's statistic is within its bound."""
    goodput: float
    """Requests per second that met every SLO's bound individually (vLLM/SGLang `--goodput`)."""
    attainment: float
    """Share of the measured requests (failed ones included) that met every SLO's bound."""


def judge(
    slos: Sequence[LatencySlo], records: Sequence[RequestRecord], duration_s: float, confidence: float = 0.95
) -> SloReport:
    """Verdicts and goodput of a run from its per-request records over `duration_s`; each SLO's
    statistic is taken over `samples_ms`, its confident verdict from the count over its bound."""
    from servetune.bench.stats import FixedBinomial

    verdicts = []
    for s in slos:
        values = samples_ms(records, s.metric)
        over = sum(1 for v in values if not s.holds(v))
        value = statistic(values, s.stat)
        confident = None
        if s.quantile is not None and values:
            decided = FixedBinomial(1.0 - s.quantile, confidence).decide(len(values), over)
            confident = decided or "undecided"
        verdicts.append(
            SloVerdict(
                slo=str(s), value_ms=value, bound_ms=s.bound_ms, met=s.holds(value), over=over,
                samples=len(values), confident=confident,
            )
        )  # fmt: skip
    good = sum(1 for r in records if request_meets(r, slos))
    return SloReport(
        verdicts=verdicts,
        met=all(v.met for v in verdicts),
        goodput=good / max(duration_s, 1e-9),
        attainment=good / len(records) if records else 0.0,
    )
