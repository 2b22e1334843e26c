"""The statistics behind a capacity verdict: a sequential binomial test for percentile SLOs and a
trend test for the backlog. Pure functions of counts and series; no clock, no I/O.

**Percentile SLOs.** `p99_ttft_ms<=2000` is a statement about a share: at most 1% of requests over
2000 ms. With `n` judged requests of which `over` are over the bound, `SequentialBinomial` decides
whether the true share is certainly within the allowed one (`met`), certainly above it (`missed`), or
not yet known. Its evidence is a mixture likelihood ratio against the boundary share (Robbins'
mixture martingale): under a true share at the boundary it is a non-negative martingale, so by
Ville's inequality it exceeds `1 / (1 - confidence)` with probability at most `1 - confidence`
*however often it is looked at*. A step may therefore look after every completion and stop at the
first decision, in either direction, without the error inflation of re-testing a fixed-sample
p-value. The price is a larger sample than one fixed-length test needs: `min_judged` gives it.
Where the count is looked at once, at a length fixed in advance (a fixed-rate run's end, a soak's
end), `FixedBinomial` is the exact one-sided binomial test MLPerf LoadGen decides a p99 with
(`min_judged_once`: 299 judged with none over at 95%, against the sequential test's 433).
The test counts independent draws; where requests over a bound come in bursts (a batching server
stalls all its running requests at once), `cluster_effect` gives the factor to divide both counts
by (the test accepts such effective counts).

**Backlog.** `trend` fits a least-squares line to a series of time bins and gives its slope with a
Newey-West (HAC) standard error, so that neighbouring bins, which share queue state, are not counted
as independent observations; the one-sided bounds use Student's t on the bins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

__all__ = [
    "FixedBinomial",
    "SequentialBinomial",
    "Trend",
    "binomial_cdf",
    "cluster_effect",
    "design_effect",
    "first_count",
    "max_missed",
    "mean_se",
    "min_judged",
    "min_judged_once",
    "percentile",
    "projected_cluster_effect",
    "t_quantile",
    "trend",
]

GRID = 16
"""Points of each mixture prior (the likelihood ratio is averaged over them)."""
MISS_SPAN = 50.0
"""The `missed` prior spans shares from the allowed one to this many times it (log-uniform)."""

Decision = Literal["met", "missed"]


def _log_mean_exp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(math.fsum(math.exp(v - top) for v in values) / len(values))


@dataclass(frozen=True)
class SequentialBinomial:
    """A sequential one-sided binomial test of "the share over the bound is at most `allowed`".

    `met` needs the share certainly below `allowed`: the mixture ratio of shares in [0, allowed)
    (uniform grid) against `allowed` reaches `1 / (1 - confidence)`. `missed` needs it certainly
    above: shares from `allowed` to `MISS_SPAN` times it (log-uniform grid). Both are valid at any
    stopping time (module docstring).
    """

    allowed: float
    """The share the percentile allows over its bound (p99: 0.01)."""
    confidence: float = 0.95
    """1 - the largest error rate of a decision."""

    def __post_init__(self) -> None:
        if not 0.0 < self.allowed < 1.0:
            raise ValueError(f"0 < allowed < 1 must hold, but got {self.allowed}")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"0.5 <= confidence < 1 must hold, but got {self.confidence}")

    @property
    def threshold(self) -> float:
        """The log evidence a decision needs: log(1 / (1 - confidence))."""
        return -math.log1p(-self.confidence)

    def _log_ratio(self, n: float, over: float, p: float) -> float:
        a = self.allowed
        if p <= 0.0:
            return -math.inf if over else -n * math.log1p(-a)
        if p >= 1.0:
            return -math.inf if over < n else n * math.log(1.0 / a)
        return over * math.log(p / a) + (n - over) * (math.log1p(-p) - math.log1p(-a))

    def _met_grid(self) -> list[float]:
        return [self.allowed * j / GRID for j in range(GRID)]

    def _missed_grid(self) -> list[float]:
        a = self.allowed
        if a * MISS_SPAN < 1.0:
            return [a * MISS_SPAN ** (j / GRID) for j in range(1, GRID + 1)]
        return [a + (1.0 - a) * j / (GRID + 1) for j in range(1, GRID + 1)]

    def evidence(self, n: float, over: float) -> tuple[float, float]:
        """(log evidence for `met`, log evidence for `missed`) after `n` judged with `over` over."""
        if n <= 0:
            return 0.0, 0.0
        met = _log_mean_exp([self._log_ratio(n, over, p) for p in self._met_grid()])
        missed = _log_mean_exp([self._log_ratio(n, over, p) for p in self._missed_grid()])
        return met, missed

    def decide(self, n: float, over: float) -> Decision | None:
        """`met`, `missed`, or None (keep sending) after `n` judged requests with `over` over the bound.

        At a fixed `over` the evidence for met grows with `n` and the evidence for missed shrinks, so
        each is a threshold on `n` (`min_judged`, `max_missed`), computed once per count. Effective
        counts (`cluster_effect`: not whole numbers) are decided on their evidence directly."""
        if n <= 0:
            return None
        if not (float(n).is_integer() and float(over).is_integer()):
            met, missed = self.evidence(n, over)
            return "met" if met >= self.threshold else "missed" if missed >= self.threshold else None
        n, over = int(n), int(over)
        met_from = min_judged(self.allowed, self.confidence, over)
        if met_from is not None and n >= met_from:
            return "met"
        if n <= max_missed(self.allowed, self.confidence, over):
            return "missed"
        return None


@dataclass(frozen=True)
class FixedBinomial:
    """A one-sided binomial test of "the share over the bound is at most `allowed`", looked at once.

    `met` when so few of `n` are over that a true share of `allowed` (or more) would give as few with
    probability at most `1 - confidence`; `missed` when so many are over that a share of `allowed` (or
    less) would give as many with at most that probability. Valid for one look at a length fixed in
    advance, as MLPerf LoadGen's early-stopping rule is (its table: p99 at 95% met from 299 judged with
    none over, 473 with one); a count looked at again and again needs `SequentialBinomial`. Effective
    (not whole) counts are decided on the binomial's continuous extension (`binomial_cdf`)."""

    allowed: float
    """The share the percentile allows over its bound (p99: 0.01)."""
    confidence: float = 0.95
    """1 - the largest error rate of a decision."""

    def __post_init__(self) -> None:
        SequentialBinomial(self.allowed, self.confidence)  # the same checks, the same messages

    def decide(self, n: float, over: float) -> Decision | None:
        """`met`, `missed`, or None (the count cannot tell) after `n` judged with `over` over the bound."""
        if n <= 0:
            return None
        alpha = 1.0 - self.confidence
        if binomial_cdf(over, n, self.allowed) <= alpha:
            return "met"
        if over >= 1.0 and 1.0 - binomial_cdf(over - 1.0, n, self.allowed) <= alpha:
            return "missed"
        return None


def binomial_cdf(k: float, n: float, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), continued to real `k` and `n` (0 <= k, k < n): the regularized
    incomplete beta I_{1-p}(n - k, k + 1), which equals the sum of the probabilities at whole numbers."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _betainc(n - k, k + 1.0, 1.0 - p)


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (a, b > 0, 0 <= x <= 1), by its continued
    fraction (modified Lentz), on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-14
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


@lru_cache(maxsize=4096)
def min_judged_once(allowed: float, confidence: float, over: float = 0, limit: int = 1_000_000) -> int | None:
    """The fewest judged requests with `over` of them over the bound that `FixedBinomial` calls met
    (p99 at 95%: 299 with none over, 473 with one, 628, 773: MLPerf LoadGen's table); None beyond
    `limit`. `over` may be an effective count (`cluster_effect`)."""
    test = FixedBinomial(allowed, confidence)
    # P(X <= over) falls as n grows at fixed `over`
    return first_count(lambda n: test.decide(n, over) == "met", math.floor(over) + 1, limit)


@lru_cache(maxsize=4096)
def min_judged(allowed: float, confidence: float, over: float = 0, limit: int = 1_000_000) -> int | None:
    """The fewest judged requests with `over` of them over the bound that `SequentialBinomial`
    calls met (p99 at 95%: 433 with none over, 685 with one); None beyond `limit`. `over` may be an
    effective count (`cluster_effect`)."""
    test = SequentialBinomial(allowed, confidence)
    # the evidence for met grows with n at fixed `over`
    return first_count(lambda n: test.evidence(n, over)[0] >= test.threshold, math.floor(over) + 1, limit)


def first_count(holds: Callable[[int], bool], start: int, limit: int) -> int | None:
    """The smallest count from `start` (at least 1) at which `holds`, a predicate that stays true once it
    is true, holds (doubling, then bisecting); None when it does not by `limit`."""
    lo = hi = max(1, start)
    while not holds(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@lru_cache(maxsize=4096)
def max_missed(allowed: float, confidence: float, over: int) -> int:
    """The most judged requests with `over` of them over the bound that `SequentialBinomial` still
    calls missed (0: none; the evidence for missed shrinks as `n` grows at fixed `over`)."""
    test = SequentialBinomial(allowed, confidence)

    def missed(n: int) -> bool:
        return test.evidence(n, over)[1] >= test.threshold

    if over <= 0 or not missed(over):
        return 0
    lo, hi = over, over * 2
    while missed(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if missed(mid):
            lo = mid
        else:
            hi = mid
    return lo


def design_effect(values: Sequence[float], *, cutoff: float = 0.05) -> float | None:
    """How many requests carry the information of one, when neighbours in arrival order are alike:
    1 + 2 x the sum of the series' autocorrelations from lag 1 up to the first under `cutoff` (Kish's
    design effect for an autocorrelated mean; at least 1). None for fewer than 20 values or a
    constant series. On the H200 the log TPOT of SGLang's requests read 9-22 (a burst of arrivals
    slows a whole batch at once): a binomial count over them states its confidence per request."""
    n = len(values)
    if n < 20:
        return None
    mean = math.fsum(values) / n
    dev = [v - mean for v in values]
    var = math.fsum(d * d for d in dev) / n
    if var <= 0:
        return None
    total = 0.0
    for lag in range(1, n // 4):
        rho = math.fsum(dev[i] * dev[i + lag] for i in range(n - lag)) / n / var
        if rho < cutoff:
            break
        total += rho
    return max(1.0, 1.0 + 2.0 * total)


def cluster_effect(clusters: Iterable[tuple[int, int]]) -> float:
    """The design effect of a share counted over clusters: how many samples carry the information of
    one, when samples over a bound come in bursts. `clusters`: (samples, over) of each, e.g. the
    requests that arrived in one span of a few seconds. The share's variance between clusters (the
    ratio estimator's, k/(k-1) sum (over_c - share n_c)^2 / n^2) over the binomial one, share (1 -
    share) / n; at least 1, and 1 with nothing over (Kish's design effect; Korn and Graubard's effective
    sample size is n over it). A burst of b overs in one cluster among independent samples reads about
    b: the burst is one piece of evidence, not b.

    With one cluster there is nothing to compare it with, and its b overs read b: one burst, as far as
    the count can tell (on the H100, one 0.6 s garbage collection in SGLang's front end put 5 requests
    of one span just over a TPOT bound and decided "missed" at a rate the same search met in a later step;
    docs/h200-results.md section 35). A count of 1 or every sample over reads 1 there too: nothing to tell apart."""
    counts = [(n, x) for n, x in clusters if n > 0]
    total = sum(n for n, _ in counts)
    over = sum(x for _, x in counts)
    k = len(counts)
    if over <= 0 or over >= total:
        return 1.0
    if k < 2:
        return float(over)
    share = over / total
    between = k / (k - 1) * math.fsum((x - share * n) ** 2 for n, x in counts) / total**2
    return max(1.0, between / (share * (1.0 - share) / total))


def projected_cluster_effect(clusters: Iterable[tuple[int, int]], total: float, span: float) -> float:
    """`cluster_effect` once the count reaches `total` samples with every sample still to come within the
    bound: `clusters` completed by clean clusters of `span` samples (the last one partial). What a judge
    would read at a step's end in the best case: early in a step the estimate rests on few clusters, and a
    burst in one of two reads up to twice its size there (the k/(k-1) term), where the same burst among the
    clusters a step's end holds reads about its size."""
    counts = list(clusters)
    rest = total - sum(n for n, _ in counts)
    if rest <= 0 or span <= 0:
        return cluster_effect(counts)
    whole = int(rest // span)
    return cluster_effect([*counts, *[(span, 0)] * whole, (rest - whole * span, 0)])  # an empty one is skipped


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile (Cornish-Fisher expansion about the normal one; within 1% of the
    exact value from 3 degrees of freedom on)."""
    z = NormalDist().inv_cdf(p)
    if dof <= 0 or math.isinf(dof):
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3 + g4 / dof**4


@dataclass(frozen=True)
class Trend:
    """A least-squares line through time bins, with a HAC standard error of its slope."""

    slope: float
    """Units per second."""
    se: float
    """Newey-West standard error of the slope."""
    level: float
    """The fitted value at the mean bin time (the series' mean)."""
    t_mean: float
    """The mean bin time (s)."""
    bins: int
    """Bins fitted."""
    lag: int
    """Newey-West lag (bins)."""

    def bounds(self, confidence: float) -> tuple[float, float]:
        """One-sided (lower, upper) confidence bounds of the slope, Student's t on `bins - 2` dof."""
        t = t_quantile(confidence, max(1, self.bins - 2))
        return self.slope - t * self.se, self.slope + t * self.se


def trend(times: Sequence[float], values: Sequence[float], lag: int | None = None) -> Trend | None:
    """The slope of `values` over `times` (OLS) and its Newey-West standard error with `lag` bins
    (default: the rule of thumb floor(4 (n/100)^(2/9)), at least 1). None for fewer than 4 points
    or times that do not vary."""
    n = len(times)
    if n < 4 or len(values) != n:
        return None
    tm = math.fsum(times) / n
    ym = math.fsum(values) / n
    dx = [t - tm for t in times]
    sxx = math.fsum(d * d for d in dx)
    if sxx <= 0.0:
        return None
    slope = math.fsum(d * (y - ym) for d, y in zip(dx, values)) / sxx
    resid = [y - ym - slope * d for d, y in zip(dx, values)]
    u = [d * e for d, e in zip(dx, resid)]
    if lag is None:
        lag = int(4 * (n / 100.0) ** (2.0 / 9.0))
    lag = max(1, min(lag, n - 2))
    var = _long_run(u, lag) / (sxx * sxx) * n / max(n - 2, 1)
    return Trend(slope=slope, se=math.sqrt(var), level=ym, t_mean=tm, bins=n, lag=lag)


def mean_se(values: Sequence[float], lag: int) -> float:
    """Newey-West standard error of the mean of a series (autocovariances up to `lag`, Bartlett weights)."""
    n = len(values)
    m = math.fsum(values) / n
    return math.sqrt(_long_run([v - m for v in values], min(lag, n - 1))) / n


def _long_run(u: Sequence[float], lag: int) -> float:
    """The Bartlett-weighted sum of a centred series' autocovariances up to `lag` (times n; at least 0)."""
    n = len(u)
    s = math.fsum(x * x for x in u)
    for k in range(1, lag + 1):
        s += 2.0 * (1.0 - k / (lag + 1.0)) * math.fsum(u[i] * u[i - k] for i in range(k, n))
    return max(s, 0.0)


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
