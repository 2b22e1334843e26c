"""Confirmation: re-measure the finalists interleaved with the baseline (B F1 .. Fk, repeated),
so a winner by noise in one measurement does not replace the baseline. Each round is a measurement
through the same runner as the trials, in the first slot."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servetune.tuner._evaluate import evaluate
from servetune.tuner._result import baseline_of, rank_feasible
from servetune.tuner.events import Confirmed, ConfirmRound, ConfirmSkipped

if TYPE_CHECKING:
    from servetune.runner import BaseRunner
    from servetune.tuner._setup import StudySetup


def confirm(
    s: StudySetup, runner: BaseRunner, *, on_event: Callable[[Any], None], stop: threading.Event
) -> dict[str, Any] | None:
    """Re-measure the finalists and the baseline; store and return the record (None: skipped)."""
    trials = s.summaries()
    baseline = baseline_of(trials, "rules") or baseline_of(trials, "defaults")
    if baseline is None:
        on_event(ConfirmSkipped("the baseline has no measurement (it failed)"))
        return None
    ranked = rank_feasible(trials, s.objectives)
    if baseline.feasible and baseline.values:
        # a finalist must have beaten the baseline in the study: one ranked below it would only
        # win the re-measurement by noise
        ranked = ranked[: ranked.index(baseline)] if baseline in ranked else ranked
    finalists, seen = [], {baseline.config_hash}
    for t in ranked:
        if t.config_hash in seen:
            continue
        seen.add(t.config_hash)
        finalists.append(t)
        if len(finalists) >= s.options.finalists:
            break
    if not finalists:
        on_event(ConfirmSkipped("no feasible trial beats or differs from the baseline"))
        return None
    objective = s.objectives[0]
    rounds = s.options.confirm_rounds
    order = [baseline, *finalists]
    values: dict[int, list[float | None]] = {t.number: [] for t in order}
    failures: dict[int, list[str]] = {t.number: [] for t in order}
    for rnd in range(rounds):
        for t in order:
            on_event(ConfirmRound(round=rnd + 1, rounds=rounds, trial=t.number))
            m = evaluate(
                runner,
                s.resolve(t.layer, source=t.source),
                workload=s.workload,
                slot=s.slots[0],
                run_dir=s.run_dir / "confirm" / f"r{rnd + 1}-trial-{t.number:04d}",
                requests=s.requests,
                should_stop=lambda step, partial: stop.is_set(),
            )
            if stop.is_set():
                raise KeyboardInterrupt
            values[t.number].append(objective.value(m.metrics) if m.metrics else None)
            if m.failure is not None:
                failures[t.number].append(m.failure.cls)
    base_vals = values[baseline.number]
    out_finalists = []
    for t in finalists:
        ratios = [f / b for f, b in zip(values[t.number], base_vals) if f is not None and b]
        out_finalists.append(
            {"trial": t.number, "values": values[t.number], "failures": failures[t.number], "ratios": ratios}
            | _spread(ratios)
        )
    better = (lambda r: r > 1.0) if objective.direction == "maximize" else (lambda r: r < 1.0)
    usable = [f for f in out_finalists if f["median"] is not None and not f["failures"]]
    usable.sort(key=lambda f: f["median"], reverse=objective.direction == "maximize")
    chosen = usable[0] if usable and better(usable[0]["median"]) else None
    record = {
        "objective": objective.name,
        "direction": objective.direction,
        "rounds": rounds,
        "baseline_trial": baseline.number,
        "baseline_values": base_vals,
        "baseline_failures": failures[baseline.number],
        "finalists": out_finalists,
        "chosen_trial": chosen["trial"] if chosen else baseline.number,
        "chosen_ratio": chosen["median"] if chosen else 1.0,
        "note": "" if chosen else "no finalist beat the baseline when re-measured; the baseline is kept",
    }
    s.study.set_user_attr("confirmation", record)
    on_event(Confirmed(record))
    return record


def _spread(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"median": None, "min": None, "max": None, "stdev": None}
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
    }
