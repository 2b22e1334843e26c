"""Capacity at an SLO: the highest Poisson rate one server sustains while every SLO holds, certified.

    cap = find_capacity(run_step, slos, start_rate=8.0)   # run_step(StepPlan) -> StepOutcome
    cap.request_rate, cap.bracket, cap.certified, cap.steps

One launched server, many steps. Each step offers Poisson arrivals at one rate until its verdict is
decided (`servetune.bench.verdict`: SLOs by a sequential binomial test at `confidence`, the backlog by
its trend, a warm-up span judged by nothing) or `step_s` passes (then `undecided`, not met).

The search brackets the capacity by doubling (or halving) from `start_rate` (by `bracket`, where the
start is already known to be close: a relaunch of a config measured before), then bisects in log
space until the highest met rate and the lowest not-met one are within `resolution`; each midpoint
is drawn within the middle fifth of the bracket (seeded by the step), so repeated searches do not
read one fixed grid. Then both ends are run again: the capacity is the highest rate **met in two
runs**, and the not-met rate above it must be not met in two. A run again that disagrees with the
first gets a third (the majority decides). An end that flips moves the bracket and the search goes on.
A rate met above one missed twice is reported (`monotone: false`), not hidden: the capacity stays
below the lowest rate missed twice.

**Paired steps.** Step `k` of a search draws its arrival gaps, prompts and images from
`step_seed(seed, k)`: every config searched with the same `seed` meets the same sequence at step
`k` (common random numbers), while each step of one server, a run again included, gets a new one.

`floor` (the tuner's incumbent capacity) makes the search start there and give up after a first
step at it that is not met: such a config cannot beat the incumbent.

**Sustained.** A search's met steps last 35-110 s; a burst of Poisson arrivals that comes once every
couple of minutes falls in some and not in others, and on the H200 neither config's certified capacity
held for 300 s (docs/h200-results.md section 14). `soak_down` then soaks at the capacity (one long
step, met only at its end) and, after each soak not met, one resolution lower, until one holds: the
**sustained** capacity is the highest rate a soak held, bracketed by the lowest one not held.

    cap = soak_down(run_soak, cap, tries=3)   # run_soak(rate, index) -> SoakResult
    cap.sustained, cap.sustained_bracket, cap.soaks
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from servetune.bench.engineclock import EngineClock
from servetune.bench.schema import Metrics
from servetune.bench.servermodel import StepProfile
from servetune.bench.slo import LatencySlo
from servetune.bench.stalls import Stalls
from servetune.bench.verdict import StepJudge, StepRules, StepVerdict
from servetune.errors import SpecError

__all__ = [
    "Capacity",
    "CapacityStep",
    "SoakResult",
    "StepOutcome",
    "StepPlan",
    "find_capacity",
    "soak_down",
    "soak_plan",
    "soak_seed",
    "soak_steps",
    "step_seed",
]

JITTER = 0.1
"""A bisection point lies at (0.5 ± this) of the bracket's log width."""
MAX_STEP_S = 3600.0
"""No step runs longer, however low its rate: below the rate that fills it, a step is not a verdict."""
REACH = 3
"""A step at a low rate is lengthened until it can judge the requests a met verdict needs with this
many runs of overs (p99 at 95%: 1065): at 5 req/s a 120 s step judges about 575, and one early over
(685 needed) would already make it undecided, though the server's share over the bound is a tenth
of what p99 allows."""


def step_length(
    step_s: float, rate: float, slos: Sequence[LatencySlo], rules: StepRules, *, soak: bool = False
) -> float:
    """A step's (or a `soak`'s) longest run at `rate`: `step_s`, or long enough to judge the requests a
    met verdict needs with `REACH` runs of overs (`StepJudge.needed`), at most `MAX_STEP_S`."""
    need = StepJudge(slos, rules, rate=rate, max_s=step_s, soak=soak).needed(REACH)
    return min(MAX_STEP_S, max(step_s, rules.warmup_s + max(need / rate, rules.backlog_s)))


def soak_plan(
    slos: Sequence[LatencySlo], rules: StepRules, *, rate: float, seconds: float, seed: int, index: int
) -> StepPlan:
    """A soak of `seconds` at `rate` as a step: met only at its end, lengthened where the rate is too
    low for a verdict in `seconds` (`step_length`); `index`: its place among a search's soaks."""
    judge = StepJudge(slos, rules, rate=rate, max_s=step_length(seconds, rate, slos, rules, soak=True), soak=True)
    return StepPlan(index=index, rate=rate, repeat=0, seed=seed, max_s=judge.max_s, judge=judge)


def step_seed(seed: int, index: int) -> int:
    """The sequence seed of step `index` of a search seeded `seed` (31 bits)."""
    digest = hashlib.sha256(f"servetune-step:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def soak_seed(seed: int, index: int) -> int:
    """The sequence seed of soak `index` (0-based) after a search seeded `seed`: the first soak draws
    `seed`'s own sequence (a soak at one rate pairs across configs, as a standalone `--soak-seconds` run
    does), each lower one a new sequence (never a step's)."""
    return seed if index == 0 else step_seed(seed, -index)


@dataclass(frozen=True)
class StepPlan:
    """One step to run: what `run_step` is given."""

    index: int
    """1-based position in the search."""
    rate: float
    """Poisson rate (req/s)."""
    repeat: int
    """0 for the first run at this rate, 1, 2 for runs again."""
    seed: int
    """The step's sequence seed (`step_seed`): arrival gaps, prompts, images."""
    max_s: float
    """The step's longest run (s)."""
    judge: StepJudge
    """Asked as requests complete; the step stops once it decides (`StepJudge.done`)."""

    @property
    def requests(self) -> int:
        """Arrivals the step plans at most (its rate for `max_s`, with a margin for Poisson noise)."""
        return int(self.rate * self.max_s * 1.2) + 50


@dataclass
class StepOutcome:
    """What one step measured: its verdict (the judge's last) and the metrics of what finished."""

    verdict: StepVerdict
    metrics: Metrics | None = None
    run_dir: str | None = None
    """Where the step's files are (`requests.jsonl`, `telemetry.jsonl`, `verdict.json`), if anywhere."""
    profile: StepProfile | None = None
    """What the step says about the server, for its model (`servermodel.profile_step`), if readable."""
    resumed_from: str | None = None
    """The interrupted search's step directory this step was kept from (not run on this server)."""


RunStep = Callable[[StepPlan], StepOutcome]
"""`run_step(plan) -> StepOutcome`: one step on the launched server."""


class CapacityStep(BaseModel):
    """One step of the search."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    index: int
    """1-based position in the search."""
    rate: float
    """Offered Poisson rate (req/s)."""
    repeat: int = 0
    """0 for a first run at this rate, 1 and 2 for runs again."""
    seed: int = 0
    """The step's sequence seed (`step_seed`)."""
    state: Literal["met", "missed", "undecided", "invalid"]
    """The verdict: `undecided` and `invalid` are not met."""
    met: bool
    """`state == "met"`."""
    why: str = ""
    """What decided it (a miss, what stayed open, why it is not a verdict)."""
    at_s: float = 0.0
    """Seconds of arrivals when it was decided."""
    sent: int = 0
    """Arrivals sent."""
    judged: int = 0
    """Arrivals after the warm-up span."""
    completed: int = 0
    """Requests completed."""
    failed: int = 0
    """Requests failed."""
    goodput: float = 0.0
    """Requests per second that met every SLO's bound."""
    attainment: float = 0.0
    """Share of the completed requests that met every SLO's bound."""
    verdict: dict[str, Any] = {}
    """The judge's verdict (`StepVerdict`): per SLO its count and decision, the backlog test."""
    latency_ms: dict[str, float] = {}
    """p50/p99 of TTFT and E2E (from the scheduled arrival) and TPOT (ms)."""
    lateness_p99_ms: float | None = None
    """The client's p99 lateness against the schedule (ms)."""
    loop_lag_max_ms: float | None = None
    """The longest stall of the client's event loop during the step (ms; `Metrics.loop_lag_max_ms`)."""
    bench_s: float = 0.0
    """Wall seconds of the step."""
    run_dir: str | None = None
    """The step's directory (`requests.jsonl`, `telemetry.jsonl`, `verdict.json`), where it ran on a server."""
    profile: StepProfile | None = None
    """The step condensed for the server model (`servermodel.StepProfile`), where its requests were readable."""
    resumed_from: str | None = None
    """Where a resumed search kept this step from: the step directory of the interrupted launch that
    measured it (a retried trial keeps the steps its interrupted launch finished; None: run here)."""

    @classmethod
    def of(cls, out: StepOutcome, *, rate: float, bench_s: float, **fields: Any) -> CapacityStep:
        """The record of one step's outcome (an open verdict is undecided); `fields`: the rest."""
        v, m = out.verdict, out.metrics
        state = v.state if v.state != "open" else "undecided"
        report = m.slo if m is not None else None
        return cls(
            rate=rate, state=state, met=state == "met", why=v.why, at_s=v.at_s, sent=v.sent, judged=v.judged,
            completed=m.completed if m else 0, failed=v.failed, goodput=report.goodput if report else 0.0,
            attainment=report.attainment if report else 0.0, verdict=v.model_dump(mode="json"),
            latency_ms=_latency(m), lateness_p99_ms=m.lateness_p99_ms if m else None,
            loop_lag_max_ms=m.loop_lag_max_ms if m else None, bench_s=bench_s,
            run_dir=out.run_dir, profile=out.profile, resumed_from=out.resumed_from, **fields,
        )  # fmt: skip


class SoakResult(CapacityStep):
    """One long step at one rate, met only at its end (it stops early when missed): does the server
    hold the rate for the whole span?"""

    seconds: float
    """The span asked for (s)."""
    stalls: Stalls | None = None
    """When SGLang's front end held arrivals from its scheduler during the soak (`stalls`); None where its
    scheduler lines were not read."""


class Capacity(BaseModel):
    """The result of a capacity search."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    slos: list[str]
    """The SLOs searched against."""
    request_rate: float | None
    """The capacity: the highest rate met in two runs below the lowest rate missed twice (req/s);
    None when no rate was met."""
    certified: bool = False
    """The capacity was met in two runs and the rate above it missed in two (or it is `max_rate`)."""
    goodput: float | None
    """Goodput at that rate (req/s), from its last met run."""
    verdicts: list[dict[str, Any]]
    """The SLO checks of that run (`SloCheck`)."""
    lowest_missed: float | None
    """The lowest rate not met (the bracket's upper end); None when none was."""
    resolution: float
    """Relative bracket width the search stops at."""
    confidence: float = 0.95
    """Confidence of every step's SLO decisions."""
    monotone: bool = True
    """False when a rate was met (in two runs) above one missed in two."""
    cannot_meet: bool = False
    """Even `min_rate` was not met."""
    below_floor: bool = False
    """Stopped because the first step, at `floor`, was not met (cannot beat the incumbent)."""
    steps: list[CapacityStep]
    """Every step, in order."""
    bench_s: float
    """Wall seconds of all steps."""
    seed: int = 0
    """The search's sequence seed (`step_seed`)."""
    note: str = ""
    """What the result means when it is not a plain certified bracket."""
    soaks: list[SoakResult] = []
    """The soaks after the search (`bench --capacity --soak-seconds`, `soak_down`): at the capacity,
    then one resolution lower after each one not met, until one is met or the tries run out."""
    sustained: float | None = None
    """The highest rate a soak held for its whole span (req/s); None when no soak ran or none held."""
    engine: EngineClock | None = None
    """A decode step's and a prefill's cost on this machine by SGLang's own clock, over the search's steps
    (`engineclock`); None where its scheduler lines were not read or do not time 40 decode steps."""
    stalls: Stalls | None = None
    """The spans in which SGLang's front end held arrivals from its scheduler, over the search's steps
    (`stalls`); None where its scheduler lines were not read."""

    @property
    def bracket(self) -> tuple[float | None, float | None]:
        """(capacity, lowest missed)."""
        return self.request_rate, self.lowest_missed

    @property
    def soak(self) -> SoakResult | None:
        """The soak that decided the sustained figure (the last one run), else None."""
        return self.soaks[-1] if self.soaks else None

    @property
    def sustained_bracket(self) -> tuple[float | None, float | None]:
        """(sustained capacity, the lowest rate not sustained: a soak not met, else the search's
        lowest missed); both None before a soak."""
        if not self.soaks:
            return None, None
        failed = [s.rate for s in self.soaks if not s.met]
        return self.sustained, min(failed) if failed else self.lowest_missed


def _latency(m: Metrics | None) -> dict[str, float]:
    if m is None or m.slo is None:
        return {}
    return {
        "p50_tpot_ms": m.median_tpot_ms,
        "p99_tpot_ms": m.p99_tpot_ms,
        "p50_ttft_ms": m.median_ttft_ms,
        "p99_ttft_ms": m.p99_ttft_ms,
        "p99_e2e_ms": m.p99_e2e_latency_ms,
    }


class _Search:
    """The runs of one search, by rate, and the bracket they make."""

    def __init__(self, run_step: RunStep, slos: Sequence[LatencySlo], rules: StepRules, *, step_s: float,
                 seed: int, max_steps: int, on_step: Callable[[CapacityStep], None] | None) -> None:  # fmt: skip
        self.run_step, self.slos, self.rules = run_step, tuple(slos), rules
        self.step_s, self.seed, self.max_steps, self.on_step = step_s, seed, max_steps, on_step
        self.steps: list[CapacityStep] = []
        self.runs: dict[float, list[bool]] = {}
        self.cannot_judge = ""

    @property
    def left(self) -> int:
        return self.max_steps - len(self.steps)

    def measure(self, rate: float) -> bool:
        """Run one step at `rate`; whether it was met."""
        index = len(self.steps) + 1
        repeat = len(self.runs.get(rate, []))
        judge = StepJudge(self.slos, self.rules, rate=rate, max_s=step_length(self.step_s, rate, self.slos, self.rules))
        seed = step_seed(self.seed, index)
        short = judge.shortfall()
        t = time.monotonic()
        if short:
            self.cannot_judge = short
            step = CapacityStep(index=index, rate=rate, repeat=repeat, seed=seed, state="invalid", met=False,
                                why=f"not run: {short}")  # fmt: skip
        else:
            out = self.run_step(
                StepPlan(index=index, rate=rate, repeat=repeat, seed=seed, max_s=judge.max_s, judge=judge)
            )
            step = CapacityStep.of(out, rate=rate, bench_s=time.monotonic() - t, index=index, repeat=repeat, seed=seed)
        self.steps.append(step)
        self.runs.setdefault(rate, []).append(step.met)
        if self.on_step is not None:
            self.on_step(step)
        return step.met

    def majority(self, rate: float) -> bool | None:
        """True when most runs at `rate` met, False when most did not, None for a tie or no run."""
        runs = self.runs.get(rate, [])
        met = sum(runs)
        if not runs or 2 * met == len(runs):
            return None
        return 2 * met > len(runs)

    def again(self, rate: float) -> None:
        """Run `rate` again; a run that disagrees with the first gets a third."""
        first = self.runs[rate][0]
        if self.measure(rate) != first and self.left > 0:
            self.measure(rate)

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest majority-met rate below `hi`, lowest majority-missed rate `hi`)."""
        missed = [r for r in self.runs if self.majority(r) is False]
        hi = min(missed) if missed else None
        met = [r for r in self.runs if self.majority(r) and (hi is None or r < hi)]
        return (max(met) if met else None), hi

    def non_monotone(self) -> str:
        """A run met at a rate above one where a run was not met (a rate's own runs disagreeing is
        noise at one rate, not this), or ""."""
        met = [r for r, runs in self.runs.items() if any(runs)]
        missed = [r for r, runs in self.runs.items() if not all(runs)]
        pairs = [(hi, lo) for hi in met for lo in missed if lo < hi]
        if not pairs:
            return ""
        hi, lo = max(pairs, key=lambda p: (p[0] / p[1], p[0]))
        return f"met at {hi:.4g} req/s in a run, above {lo:.4g}, which was not met in one"


def find_capacity(
    run_step: RunStep,
    slos: Sequence[LatencySlo],
    *,
    start_rate: float,
    rules: StepRules | None = None,
    resolution: float = 0.05,
    step_s: float = 120.0,
    min_rate: float = 0.05,
    max_rate: float = 10_000.0,
    max_steps: int = 24,
    floor: float | None = None,
    seed: int = 0,
    bracket: float = 2.0,
    on_step: Callable[[CapacityStep], None] | None = None,
) -> Capacity:
    """Bracket, bisect and certify the highest Poisson rate whose steps meet every SLO (module docstring).

    Args:
        run_step: Runs one step on the launched server (`StepPlan` → `StepOutcome`).
        slos: The latency SLOs (at least one).
        start_rate: The first rate tried (req/s); with `floor`, the floor is used instead.
        rules: How each step is judged (confidence, warm-up span, backlog horizon).
        resolution: Stop bisecting when lowest missed / highest met - 1 is at most this.
        step_s: A step's longest run (s).
        min_rate, max_rate: The search never goes below / above these.
        max_steps: Steps at most (runs again included).
        floor: Give up after a first step at this rate that is not met (the incumbent's capacity).
        seed: The search's sequence seed: the same for every config compared (`step_seed`).
        bracket: The factor the search steps up (after a met step) or down (after one not met) by until
            it has a bracket: 2 from a guess; about 1.25 from a capacity measured before (on simulated
            servers started there, a quarter fewer seconds of arrivals than doubling).
        on_step: Called after each step.

    Raises:
        SpecError: No SLO, rates that do not make a range, or a bracket factor not above 1.
    """
    if not slos:
        raise SpecError("a capacity search needs at least one SLO", help="e.g. --slo p99_ttft_ms<=1000")
    if not 0 < min_rate <= start_rate <= max_rate and floor is None:
        raise SpecError(
            f"min_rate <= start_rate <= max_rate must hold, but got ({min_rate:g}, {start_rate:g}, {max_rate:g})"
        )
    if resolution <= 0:
        raise SpecError(f"the capacity resolution must be positive, but got {resolution:g}")
    if bracket <= 1.0:
        raise SpecError(
            f"the bracket factor must exceed 1, but got {bracket:g}",
            help="e.g. --bracket-factor 1.25 from a capacity measured before, 2 (the default) from a guess",
        )
    rules = rules or StepRules.at_resolution(resolution)
    t0 = time.monotonic()
    search = _Search(run_step, slos, rules, step_s=step_s, seed=seed, max_steps=max_steps, on_step=on_step)
    extra: dict[str, Any] = {}
    first = min(max(floor if floor is not None else start_rate, min_rate), max_rate)
    note = ""
    if not search.measure(first) and floor is not None and first <= floor:
        extra["below_floor"] = True
        note = f"not met at {first:.4g} req/s, the incumbent's capacity"
    while not note and search.left > 0:
        lo, hi = search.bracket()
        if search.cannot_judge:
            note = f"cannot judge: {search.cannot_judge}; raise --step-seconds or lower --confidence"
            break
        if lo is None:
            low = min(search.runs)
            if low / bracket < min_rate:
                extra["cannot_meet"] = True
                note = f"not met even at {low:.4g} req/s, the lowest rate tried"
                break
            search.measure(low / bracket)
        elif hi is None and lo >= max_rate:
            if len(search.runs[lo]) < 2:
                search.again(lo)
                continue
            note = f"met every SLO at the highest rate allowed ({max_rate:g} req/s)"
            break
        elif hi is None:
            search.measure(min(lo * bracket, max_rate))
        elif hi / lo - 1.0 > resolution:
            u = 0.5 + JITTER * (2.0 * random.Random(step_seed(seed, len(search.steps) + 1)).random() - 1.0)
            search.measure(lo * (hi / lo) ** u)
        elif len(search.runs[lo]) < 2:
            search.again(lo)
        elif len(search.runs[hi]) < 2:
            search.again(hi)
        else:
            break
    lo, hi = search.bracket()
    certified = (
        lo is not None
        and len(search.runs[lo]) >= 2
        and (
            hi is None
            and lo >= max_rate
            or hi is not None
            and len(search.runs[hi]) >= 2
            and hi / lo - 1.0 <= resolution
        )
    )
    if not note and not certified and lo is not None:
        note = f"stopped after {max_steps} steps before the bracket was certified"
    skew = search.non_monotone()
    if skew:
        note = (note + "; " if note else "") + f"non-monotone: {skew}"
    at = next((s for s in reversed(search.steps) if s.rate == lo and s.met), None) if lo is not None else None
    return Capacity(
        slos=[str(s) for s in slos],
        request_rate=lo,
        certified=certified,
        goodput=at.goodput if at else None,
        verdicts=(at.verdict.get("slos") or []) if at else [],
        lowest_missed=hi,
        resolution=resolution,
        confidence=rules.confidence,
        monotone=not skew,
        steps=search.steps,
        bench_s=time.monotonic() - t0,
        seed=seed,
        note=note,
        **extra,
    )


RunSoak = Callable[[float, int], SoakResult]
"""`run_soak(rate, index) -> SoakResult`: soak `index` (0-based) at `rate` on the same server."""


def soak_steps(
    run_soak: RunSoak, rate: float, *, resolution: float, tries: int, min_rate: float = 0.05
) -> list[SoakResult]:
    """Soak at `rate` and, after each soak not met, at the rate one resolution lower (rate / (1 +
    resolution)), until a soak is met or `tries` soaks ran: every soak, in order (the last met, if any held)."""
    soaks: list[SoakResult] = []
    while len(soaks) < tries and rate >= min_rate:
        soaks.append(run_soak(rate, len(soaks)))
        if soaks[-1].met:
            break
        rate /= 1.0 + resolution
    return soaks


def soak_down(run_soak: RunSoak, capacity: Capacity, *, tries: int, min_rate: float = 0.05) -> Capacity:
    """`capacity` with its soaks (`soak_steps` from the certified capacity) and its sustained figure, the
    rate of the soak that held (module docstring). Nothing to soak (no capacity, `tries` < 1): `capacity`."""
    if capacity.request_rate is None or tries < 1:
        return capacity
    soaks = soak_steps(run_soak, capacity.request_rate, resolution=capacity.resolution, tries=tries, min_rate=min_rate)
    held = soaks[-1].rate if soaks[-1].met else None
    if held is None:
        tried = ", ".join(f"{s.rate:.4g}" for s in soaks)
        more = f"no soak held (not met at {tried} req/s): the sustained capacity is below {soaks[-1].rate:.4g}"
    elif len(soaks) > 1:
        first = soaks[0]  # missed (broke the SLO) or undecided (not certain within its span): a user acts differently
        more = (f"the certified capacity did not hold for {first.seconds:g} s ({first.state} at {first.at_s:.0f} s); "
                f"{held:.4g} req/s did")  # fmt: skip
    else:
        more = ""
    note = "; ".join(x for x in (capacity.note, more) if x)
    return capacity.model_copy(update={"soaks": soaks, "sustained": held, "note": note})
