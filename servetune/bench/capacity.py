"""Capacity at an SLO: the highest Poisson request rate one server carries while every SLO holds.

    cap = find_capacity(run_step, slos, start_rate=8.0)   # run_step(rate, requests, should_stop) -> Metrics
    cap.request_rate, cap.goodput, cap.steps

One launched server, many steps: each step offers Poisson traffic at one rate for long enough
to be steady (`requests = max(min_requests, rate * step_s)`) and is judged **met** when

- every SLO's statistic over the step's requests is within its bound (`Metrics.slo`),
- the server kept up: while requests were being sent, it completed at least `keep_up` of the
  arrivals (`Metrics.served_ratio`; a server that queues what it cannot serve can hold TPOT
  while its backlog grows without bound), and
- at most `max_failed` of the requests failed.

The search brackets the capacity by doubling (or halving) from `start_rate`, then bisects
(geometrically) until the highest met rate and the lowest missed one are within `resolution`
(relative). A step whose deciding figure lies within `noise_margin` of its bound is run again,
and counts as met only if both runs are. A step stops early once its outcome is certain (more
requests over a percentile's bound than the percentile allows, `LatencySlo.certainly_missed`).

`floor` (the tuner's incumbent capacity) makes the search start there and give up after the
first missed step at or below it: such a config cannot beat the incumbent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from servetune.bench.metrics import Metrics
from servetune.bench.slo import LatencySlo
from servetune.errors import SpecError

__all__ = ["Capacity", "CapacityStep", "find_capacity", "step_requests"]

OFFERED_MIN = 0.9
"""A step whose client sent its arrivals at under this share of their schedule did not test its rate
(on 2 cores the builtin client topped out near 80 req/s of short text requests): it is not met."""
KEEP_UP_NOISE = 0.03
"""A served ratio this close to `keep_up` is within noise (on the stand-in, runs of one rate read 0.97-1.02)."""

RunStep = Callable[[float, int, Callable[[int, Metrics], bool]], Metrics]
"""`run_step(rate, requests, should_stop) -> Metrics`: one benchmark step at a Poisson rate."""


class CapacityStep(BaseModel):
    """One benchmark step of the search."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    rate: float
    """Offered Poisson rate (req/s)."""
    requests: int
    """Requests planned in the step."""
    met: bool
    """Every SLO held, the server kept up, and few enough requests failed."""
    why: str = ""
    """What was missed, when not met."""
    achieved_rate: float
    """The offered rate times the served ratio (`Metrics.served_ratio`: completions over arrivals
    while requests were being sent)."""
    goodput: float
    """Requests per second that met every SLO's bound."""
    attainment: float
    """Share of the step's requests that met every SLO's bound."""
    verdicts: list[dict[str, Any]]
    """Per SLO: value_ms, bound_ms, met."""
    completed: int
    """Requests completed."""
    failed: int
    """Requests failed."""
    stopped_early: bool = False
    """Stopped once its outcome was certain."""
    repeat: int = 0
    """0 for a first run, 1 for the re-run of a step within noise of its bound."""
    bench_s: float
    """Wall seconds of the step."""
    latency_ms: dict[str, float]
    """p50/p99 of TTFT, TPOT and E2E (ms), for the latency-versus-rate plot."""


class Capacity(BaseModel):
    """The result of a capacity search."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    slos: list[str]
    """The SLOs searched against."""
    request_rate: float | None
    """The highest rate that met every SLO (req/s); None when even the lowest rate tried missed."""
    goodput: float | None
    """Goodput at that rate (req/s)."""
    verdicts: list[dict[str, Any]]
    """The SLO verdicts at that rate."""
    lowest_missed: float | None
    """The lowest rate that missed (the bracket's upper end); None when none missed."""
    resolution: float
    """Relative bracket width the search stopped at."""
    cannot_meet: bool = False
    """Even `min_rate` missed an SLO: the config cannot meet it at any rate tried."""
    below_floor: bool = False
    """Stopped because a rate at or below `floor` missed (cannot beat the incumbent)."""
    steps: list[CapacityStep]
    """Every step, in order."""
    bench_s: float
    """Wall seconds of all steps."""
    note: str = ""
    """What the result means when it is not a plain bracket."""


def step_requests(rate: float, step_s: float, min_requests: int) -> int:
    """Requests in a step at `rate`: enough for `step_s` seconds of arrivals, at least `min_requests`."""
    return max(min_requests, math.ceil(rate * step_s))


def _latency(m: Metrics) -> dict[str, float]:
    return {
        "p50_ttft_ms": m.median_ttft_ms,
        "p99_ttft_ms": m.p99_ttft_ms,
        "p50_tpot_ms": m.median_tpot_ms,
        "p99_tpot_ms": m.p99_tpot_ms,
        "p50_e2e_ms": m.median_e2e_latency_ms,
        "p99_e2e_ms": m.p99_e2e_latency_ms,
    }


def _judge(rate: float, m: Metrics, keep_up: float, max_failed: float) -> tuple[bool, str, float]:
    """(met, why not, achieved rate) of one step's metrics."""
    ratio = m.served_ratio if m.served_ratio is not None else 1.0
    achieved = ratio * rate
    why = []
    if m.slo is None:
        raise SpecError("a capacity step was measured without SLOs", help="pass at least one --slo")
    why += [f"{v.slo} ({v.value_ms:.0f} ms)" for v in m.slo.verdicts if not v.met]
    if m.stopped_early:
        why.append("certain to miss")
    if ratio < keep_up:
        why.append(f"kept up with {ratio:.0%} of the arrivals")
    if m.failed > max_failed * max(m.requests, 1):
        why.append(f"{m.failed} requests failed")
    if m.offered_ratio is not None and m.offered_ratio < OFFERED_MIN:
        why.append(f"the client sent only {m.offered_ratio:.0%} of the rate (it cannot generate this load)")
    return not why, "; ".join(why), achieved


def _near(m: Metrics, rate: float, achieved: float, keep_up: float, margin: float) -> bool:
    """Whether the step's deciding figures are within `margin` of their bounds (a verdict noise can flip)."""
    if m.slo is None or m.stopped_early:
        return False
    if any(abs(v.headroom) < margin for v in m.slo.verdicts):
        return True
    return abs(achieved / rate - keep_up) < KEEP_UP_NOISE


def find_capacity(
    run_step: RunStep,
    slos: Sequence[LatencySlo],
    *,
    start_rate: float,
    resolution: float = 0.1,
    min_rate: float = 0.05,
    max_rate: float = 10_000.0,
    step_s: float = 20.0,
    min_requests: int = 64,
    keep_up: float = 0.9,
    max_failed: float = 0.01,
    noise_margin: float = 0.1,
    max_steps: int = 24,
    floor: float | None = None,
    on_step: Callable[[CapacityStep], None] | None = None,
) -> Capacity:
    """Bracket, then bisect, the highest Poisson rate whose steps meet every SLO (module docstring).

    Args:
        run_step: Runs one step on the launched server (`rate`, `requests`, `should_stop`).
        slos: The latency SLOs (at least one).
        start_rate: The first rate tried (req/s); with `floor`, the floor is used instead.
        resolution: Stop when lowest missed / highest met - 1 is at most this.
        min_rate, max_rate: The search never goes below / above these.
        step_s, min_requests: Step length (`step_requests`).
        keep_up: Least share of the offered rate the server must complete while it is offered.
        max_failed: Largest share of failed requests in a met step.
        noise_margin: A step within this relative distance of a bound is run again.
        max_steps: Steps at most (re-runs included).
        floor: Give up after a missed step at or below this rate (the incumbent's capacity).
        on_step: Called after each step.

    Raises:
        SpecError: No SLO, or rates that do not make a range.
    """
    if not slos:
        raise SpecError("a capacity search needs at least one SLO", help="e.g. --slo p99_ttft_ms<=1000")
    if not 0 < min_rate <= start_rate <= max_rate and floor is None:
        raise SpecError(
            f"min_rate <= start_rate <= max_rate must hold, but got ({min_rate:g}, {start_rate:g}, {max_rate:g})"
        )
    if resolution <= 0:
        raise SpecError(f"the capacity resolution must be positive, but got {resolution:g}")
    t0 = time.monotonic()
    steps: list[CapacityStep] = []
    best: tuple[float, CapacityStep] | None = None
    lo: float | None = None
    hi: float | None = None

    def measure(rate: float) -> bool:
        requests = step_requests(rate, step_s, min_requests)
        runs = []
        for repeat in (0, 1):
            if len(steps) >= max_steps:
                break

            def certain(done: int, partial: Metrics) -> bool:
                report = partial.slo
                if report is None:
                    return False
                return any(s.certainly_missed(v.over, requests) for s, v in zip(slos, report.verdicts))

            t = time.monotonic()
            m = run_step(rate, requests, certain)
            met, why, achieved = _judge(rate, m, keep_up, max_failed)
            report = m.slo
            step = CapacityStep(
                rate=rate,
                requests=requests,
                met=met,
                why=why,
                achieved_rate=achieved,
                goodput=report.goodput if report else 0.0,
                attainment=report.attainment if report else 0.0,
                verdicts=[v.model_dump(mode="json") for v in report.verdicts] if report else [],
                completed=m.completed,
                failed=m.failed,
                stopped_early=m.stopped_early,
                repeat=repeat,
                bench_s=time.monotonic() - t,
                latency_ms=_latency(m),
            )
            steps.append(step)
            runs.append(step)
            if on_step is not None:
                on_step(step)
            if not met or not _near(m, rate, achieved, keep_up, noise_margin):
                break
        ok = bool(runs) and all(r.met for r in runs)
        nonlocal best
        if ok and (best is None or rate > best[0]):
            best = (rate, runs[-1])
        return ok

    def result(**extra: Any) -> Capacity:
        chosen = best[1] if best is not None else None
        return Capacity(
            slos=[str(s) for s in slos],
            request_rate=best[0] if best is not None else None,
            goodput=chosen.goodput if chosen else None,
            verdicts=chosen.verdicts if chosen else [],
            lowest_missed=hi,
            resolution=resolution,
            steps=steps,
            bench_s=time.monotonic() - t0,
            **extra,
        )

    rate = min(max(floor if floor is not None else start_rate, min_rate), max_rate)
    # bracket: double while met, halve while missed
    if measure(rate):
        lo = rate
        while hi is None and len(steps) < max_steps:
            nxt = min(lo * 2.0, max_rate)
            if nxt <= lo:
                return result(note=f"met every SLO at the highest rate allowed ({max_rate:g} req/s)")
            if measure(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        hi = rate
        if floor is not None and rate <= floor:
            return result(below_floor=True, note=f"missed at {rate:g} req/s, the incumbent's capacity")
        while lo is None and len(steps) < max_steps:
            nxt = hi / 2.0
            if nxt < min_rate:
                return result(cannot_meet=True, note=f"missed even at {hi:g} req/s, the lowest rate tried")
            if measure(nxt):
                lo = nxt
            else:
                hi = nxt
    # bisect (geometric: capacity ratios matter, not differences)
    while lo is not None and hi is not None and hi / lo - 1.0 > resolution and len(steps) < max_steps:
        mid = math.sqrt(lo * hi)
        if measure(mid):
            lo = mid
        else:
            hi = mid
    note = "" if lo is None or hi is None or hi / lo - 1.0 <= resolution else f"stopped after {max_steps} steps"
    return result(note=note)
