"""A study's time budget (`tune --budget 30m`): stop launching when the next trial and the
confirmation no longer fit.

The estimates come from the study's own trials (their `timing`): the next trial takes the median of
the sampled trials so far (a screened trial that misses its floor is short, a full search long),
else of the baselines; the confirmation takes, per round, one full search of the baseline and one
of each finalist it will likely try (one), plus the soaks (`--confirm-soak-seconds` and a start
each). Before any trial has finished nothing is cut: the baselines always run.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from servetune.settings import parse_duration
from servetune.tuner._options import CONFIRM_SOAK_TRIES, SOURCES_BASELINE

__all__ = ["estimate", "fits", "parse_duration"]

if TYPE_CHECKING:
    from servetune.tuner._setup import StudySetup


def _total(t) -> float | None:
    value = (t.user_attrs.get("timing") or {}).get("total_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def estimate(setup: StudySetup, trials: list) -> dict[str, Any] | None:
    """Seconds the next trial and the confirmation will take, from the study's trials (None before
    any finished)."""
    baselines = [v for t in trials if t.user_attrs.get("source") in SOURCES_BASELINE and (v := _total(t))]
    sampled = [v for t in trials if t.user_attrs.get("source") not in SOURCES_BASELINE and (v := _total(t))]
    if not baselines and not sampled:
        return None
    full = statistics.median(baselines or sampled)
    trial = statistics.median(sampled) if sampled else full
    o = setup.options
    confirmation = o.confirm_rounds * 2 * full
    if setup.capacity and o.confirm_rounds > 0 and o.confirm_soak_seconds > 0:
        starts = [(t.user_attrs.get("timing") or {}).get("startup_s") for t in trials]
        start = statistics.median([s for s in starts if isinstance(s, (int, float))] or [0.0])
        confirmation += (CONFIRM_SOAK_TRIES + 1) * o.confirm_soak_seconds + 2 * start  # the winner's, the baseline's
    return {"trial_s": round(trial, 1), "confirmation_s": round(confirmation, 1)}


def fits(setup: StudySetup, trials: list, elapsed_s: float) -> tuple[bool, dict[str, Any] | None]:
    """Whether another trial and the confirmation fit the budget after `elapsed_s`; the estimate."""
    from optuna.trial import TrialState

    budget = setup.options.budget_s
    if budget is None:
        return True, None
    waiting = [t for t in trials if t.state == TrialState.WAITING and t.user_attrs.get("source") in SOURCES_BASELINE]
    if waiting:  # the baselines always run: every figure is relative to them
        return True, None
    est = estimate(setup, trials)
    if est is None:
        return True, None
    return elapsed_s + est["trial_s"] + est["confirmation_s"] <= budget, est
