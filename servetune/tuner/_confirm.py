"""Confirmation: re-measure the finalists interleaved with the baseline (B F, repeated), so a winner
by noise in one measurement does not replace the baseline. Finalists go in rank order: the first
confirmed `better` is adopted, and one that is not hands over to the next (the baseline's rounds are
measured once and reused); none confirmed better keeps the baseline, and the record says why. Each
round is a measurement through the same runner as the trials, in the first slot.

`run_interleaved` is the shared part (rounds, ratios to the first config, their spread, a verdict);
`servetune compare` calls it too.

A capacity confirmation is long (on the H200 each round is a launch and a search of 5-8 minutes, each soak
6 minutes), longer than a lent GPU window. Each measurement is written to the study as it ends (`JOURNAL`,
keyed by the confirmation's plan); a run stopped part-way (Ctrl-C, a killed process, a job's time limit)
and run again with the same study goes on where it stopped, reusing what was measured, in the same
directory. A search cut short goes on from the steps it finished (its partial directory kept aside as
`NAME.interrupted-K`, the kept steps copied from there); so do a config's soaks (a winner's soak that
did not hold and was followed by one a resolution lower is kept; the soak it was stopped in runs again).
Each measurement is stored with the machine it ran on, and a round's pair shares one: a baseline's round
measured on another machine than the one its finalist's round runs on is measured again there (the earlier
one kept in the journal's `elsewhere`), because a rate does not travel between machines.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.tuner._evaluate import evaluate, evaluate_capacity
from servetune.tuner._options import CONFIRM_SOAK_TRIES
from servetune.tuner._result import JOURNAL, TrialSummary, baseline_of, confirmation_history, rank_feasible
from servetune.tuner._trial import reference_rate, runaway_guard
from servetune.tuner.events import Confirmed, ConfirmResumed, ConfirmRound, ConfirmSkipped, ConfirmUnpaired

if TYPE_CHECKING:
    from servetune.runner import BaseRunner
    from servetune.tuner._evaluate import Outcome
    from servetune.tuner._setup import StudySetup

NOISE_FLOOR = 0.03
"""A ratio within this distance of 1 is never called better or worse, whatever the measured noise."""
BETTER, WORSE, NOISE = "better", "worse", "not distinguishable from noise"

Measure = Callable[[Hashable], tuple[float | None, str | None]]
"""`measure(key) -> (value, failure class)`: one fresh measurement of one config."""
PairedMeasure = Callable[[Hashable, int, Hashable], tuple[float | None, str | None]]
"""`measure(key, round, finalist) -> (value, failure class)`: `key`'s measurement in that round of the
baseline's pairing with `finalist` (`in_turn`)."""


def run_interleaved(
    keys: Sequence[Hashable],
    rounds: int,
    measure: Measure,
    *,
    direction: str,
    on_round: Callable[[int, Hashable], None] | None = None,
) -> dict[str, Any]:
    """Measure `keys` in turn, `rounds` times (A B C A B C ...), and judge each against the first.

    Returns `{"base": {"values", "failures", "noise"}, "others": {key: {"values", "failures",
    "ratios", "median", "min", "max", "stdev", "verdict"}}}`. A ratio is one round's value over the
    base's in the same round. The noise is the base's own spread (A vs A: the largest relative
    distance of a base value from their median), at least `NOISE_FLOOR`; the verdict is `better` or
    `worse` when every ratio lies beyond it on one side of 1, else `not distinguishable from noise`.
    """
    values: dict[Hashable, list[float | None]] = {k: [] for k in keys}
    failures: dict[Hashable, list[str]] = {k: [] for k in keys}
    for rnd in range(rounds):
        for key in keys:
            if on_round is not None:
                on_round(rnd + 1, key)
            value, failure = measure(key)
            values[key].append(value)
            if failure is not None:
                failures[key].append(failure)
    base = keys[0]
    noise = self_noise(values[base])
    others = {}
    for key in keys[1:]:
        ratios = [v / b for v, b in zip(values[key], values[base]) if v is not None and b]
        others[key] = {
            "values": values[key],
            "failures": failures[key],
            "ratios": ratios,
            **spread(ratios),
            "verdict": _verdict(ratios, failures[key], direction, noise),
        }
    return {"base": {"values": values[base], "failures": failures[base], "noise": noise}, "others": others}


def _verdict(ratios: Sequence[float], failures: Sequence[str], direction: str, noise: float) -> str:
    if "too_slow" in failures:  # stopped by the runaway guard: many times slower than the reference
        return WORSE
    if failures:
        return f"failed ({', '.join(sorted(set(failures)))})"
    return verdict(ratios, direction, noise)


def self_noise(values: Sequence[float | None]) -> float:
    """The spread of one config's own measurements (largest |v / median - 1|), at least `NOISE_FLOOR`."""
    vals = [v for v in values if v]
    if len(vals) < 2:
        return NOISE_FLOOR
    mid = statistics.median(vals)
    return max(NOISE_FLOOR, max(abs(v / mid - 1.0) for v in vals))


def verdict(ratios: Sequence[float], direction: str, noise: float = NOISE_FLOOR) -> str:
    """`better` / `worse` when every ratio of two rounds or more is beyond `noise` on one side of 1
    (for `direction`), else `not distinguishable from noise`: one round has no spread to judge by (on
    the H200 one config's capacity varied 12.3-16.0 req/s from launch to launch)."""
    if len(ratios) < 2:
        return NOISE
    lo, hi = min(ratios), max(ratios)
    up, down = lo > 1.0 + noise, hi < 1.0 - noise
    if direction == "minimize":
        up, down = down, up
    return BETTER if up else WORSE if down else NOISE


def spread(ratios: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and stdev of the ratios (None each when there are none)."""
    if not ratios:
        return {"median": None, "min": None, "max": None, "stdev": None}
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
    }


def confirm(
    s: StudySetup, runner: BaseRunner, *, on_event: Callable[[Any], None], stop: threading.Event
) -> dict[str, Any] | None:
    """Re-measure the finalists and the baseline; store and return the record (None: skipped)."""
    trials = s.summaries()
    baseline = baseline_of(trials, "rules") or baseline_of(trials, "defaults")
    if baseline is None:
        on_event(ConfirmSkipped("the baseline has no measurement (it failed)"))
        return None
    finalists = _finalists(s, trials, baseline)
    if not finalists:
        on_event(ConfirmSkipped("no feasible trial beats or differs from the baseline"))
        return None
    objective = s.objectives[0]
    rounds = s.options.confirm_rounds
    by_number = {t.number: t for t in [baseline, *finalists]}
    reference = reference_rate(s)
    history = confirmation_history(s.study.user_attrs)
    plan = {
        "objective": objective.name, "baseline": baseline.number, "finalists": [t.number for t in finalists],
        "rounds": rounds, "soak_s": s.options.confirm_soak_seconds if s.capacity else 0,
    }  # fmt: skip
    journal = _journal(s, plan)
    if journal["done"]:
        on_event(ConfirmResumed(measured=len(journal["done"]), run_dir=journal["run_dir"]))
    out_dir = Path(journal["run_dir"]) if journal["run_dir"] else _confirm_dir(s.run_dir, len(history))
    journal["run_dir"] = str(out_dir)
    s.study.set_user_attr(JOURNAL, journal)  # before the first measurement: one stopped in it resumes here

    def measure(number: Hashable, rnd: int, partner: Hashable) -> tuple[float | None, str | None]:
        t = by_number[number]
        key, here = f"{t.number}/{rnd}", runner.machine()
        stored = _paired(journal, key, f"{partner}/{rnd}", here) if t is baseline else journal["done"].get(key)
        if stored is not None:
            return stored[0], stored[1]
        run_dir = out_dir / f"r{rnd}-trial-{t.number:04d}"
        if key in journal["done"]:  # the baseline's round ran on another machine than its partner's runs on
            on_event(ConfirmUnpaired(trial=t.number, round=rnd, there=_elsewhere(s, journal, key, run_dir), here=here))
        run_dir, partial = _set_aside(run_dir)  # what a measurement stopped here left
        m = _remeasure(
            s, runner, t, run_dir, guarded=t is not baseline, reference=reference, stop=stop,
            round_=rnd, resume=partial,
        )  # fmt: skip
        if stop.is_set():
            raise KeyboardInterrupt
        value = objective.value(m.metrics) if m.metrics and not m.stopped_early else None
        failure = m.failure.cls if m.failure is not None else "below_floor" if m.stopped_early else None
        _write(s, journal, key, [value, failure], machine=here)
        return value, failure

    base, out_finalists, chosen = in_turn(
        baseline.number, [t.number for t in finalists], rounds, measure, direction=objective.direction,
        on_round=lambda rnd, number: on_event(ConfirmRound(round=rnd, rounds=rounds, trial=int(number))),
    )  # fmt: skip
    record = {
        "objective": objective.name,
        "direction": objective.direction,
        "rounds": rounds,
        "noise": base["noise"],
        "baseline_trial": baseline.number,
        "baseline_values": base["values"],
        "baseline_failures": base["failures"],
        "finalists": out_finalists,
        "chosen_trial": chosen["trial"] if chosen else baseline.number,
        "chosen_ratio": chosen["median"] if chosen else 1.0,
        "note": "" if chosen else _kept_note(out_finalists),
    }
    if s.confirm_search is not None:
        record["step_s"] = s.confirm_search.step_s
        soaks = _soaks(s, runner, record, by_number, out_dir, stop, journal)
        if soaks:
            record["soaks"] = soaks
    record["run_dir"] = str(out_dir)
    record.update({k: journal[k] for k in ("machines", "elsewhere") if journal.get(k)})  # which ran where
    s.study.set_user_attr("confirmations", [*history, record])
    s.study.set_user_attr("confirmation", record)
    s.study.set_user_attr(JOURNAL, None)  # finished: a later confirmation starts afresh
    on_event(Confirmed(record))
    return record


def _journal(s: StudySetup, plan: dict[str, Any]) -> dict[str, Any]:
    """The unfinished confirmation of this plan an earlier run left (its measurements by key), else a new one."""
    journal = s.study.user_attrs.get(JOURNAL)
    if isinstance(journal, dict) and journal.get("plan") == plan and isinstance(journal.get("done"), dict):
        return journal
    return {"plan": plan, "run_dir": None, "done": {}}


def _write(s: StudySetup, journal: dict[str, Any], key: str, value: Any, *, machine: str | None = None) -> None:
    """One measurement into the journal, stored at once (what a stopped run leaves for the next); `machine`:
    the machine it ran on (`BaseRunner.machine`, in the journal's `machines`), where the runner can tell."""
    journal["done"][key] = value
    if machine is not None:
        journal.setdefault("machines", {})[key] = machine
    s.study.set_user_attr(JOURNAL, journal)


def _set_aside(run_dir: Path, why: str = "interrupted") -> tuple[Path, Path | None]:
    """(`run_dir`, where what an earlier measurement left there was moved: `NAME.interrupted-K`, or None).
    A capacity search resumes from it: the steps it finished are kept, the rest run again. `why`
    "elsewhere": a finished measurement from another machine, measured again here (`NAME.elsewhere-K`)."""
    if not run_dir.exists():
        return run_dir, None
    k = 1
    while run_dir.with_name(f"{run_dir.name}.{why}-{k}").exists():
        k += 1
    aside = run_dir.with_name(f"{run_dir.name}.{why}-{k}")
    run_dir.rename(aside)
    return run_dir, aside


def in_turn(
    base: Hashable,
    finalists: Sequence[Hashable],
    rounds: int,
    measure: PairedMeasure,
    *,
    direction: str,
    on_round: Callable[[int, Hashable], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """Finalists in rank order, each interleaved with the baseline for `rounds` (`run_interleaved`). The
    first finalist `better` is chosen and the rest are not measured; one that is not hands over to the
    next. `measure` is asked for the baseline's round in every finalist's pairing and shares what it stored
    (the baseline's rounds are measured once) where it can pair. Returns (the baseline's record, each
    finalist's record with its `trial`, the chosen one or None)."""
    records: list[dict[str, Any]] = []
    out: dict[str, Any] = {"base": {"values": [], "failures": [], "noise": NOISE_FLOOR}}
    for finalist in finalists:
        calls = {base: 0, finalist: 0}

        def one(key: Hashable, calls: dict[Hashable, int] = calls, finalist: Hashable = finalist) -> Any:
            calls[key] += 1
            return measure(key, calls[key], finalist)

        out = run_interleaved([base, finalist], rounds, one, direction=direction, on_round=on_round)
        records.append({"trial": finalist, **out["others"][finalist]})
        if records[-1]["verdict"] == BETTER:
            return out["base"], records, records[-1]
    return out["base"], records, None


def _paired(journal: dict[str, Any], key: str, partner: str, here: str | None) -> list[Any] | None:
    """The baseline's stored measurement `key` (a round) that pairs with `partner`'s in the same round: one
    from the machine `partner`'s ran on where it has run, else from `here`; None: none (measure it here).
    Where a side cannot tell its machine (None), any pairs."""
    machines = journal.get("machines") or {}
    stored = [(journal["done"][key], machines.get(key))] if key in journal["done"] else []
    stored += [(e["result"], e["machine"]) for e in (journal.get("elsewhere") or {}).get(key, [])]
    want = machines.get(partner) if partner in journal["done"] else here
    return next((result for result, there in stored if want is None or there is None or there == want), None)


def _elsewhere(s: StudySetup, journal: dict[str, Any], key: str, run_dir: Path) -> str:
    """Move the stored measurement `key` to the journal's `elsewhere` and its directory `run_dir` aside
    (`NAME.elsewhere-K`), to be measured again on this machine, and store the journal at once (a stop in
    the new measurement then resumes it, not the move); returns the machine it ran on."""
    there = journal["machines"][key]
    aside = _set_aside(run_dir, "elsewhere")[1]
    entry = {"result": journal["done"].pop(key), "machine": there, "run_dir": str(aside)}
    journal.setdefault("elsewhere", {}).setdefault(key, []).append(entry)
    s.study.set_user_attr(JOURNAL, journal)
    return there


def _kept_note(finalists: list[dict[str, Any]]) -> str:
    """Why the baseline stays: each finalist's verdict."""
    tried = ", ".join(f"trial {f['trial']}: {f['verdict']}" for f in finalists)
    return f"no finalist was confirmed better than the baseline ({tried}); the baseline is kept"


def _finalists(s: StudySetup, trials: list[TrialSummary], baseline: TrialSummary) -> list[TrialSummary]:
    """The configs to confirm, in rank order: feasible, above the baseline in the study, one per
    config; for a capacity study only certified capacities (a search that ran out of steps did not
    confirm its bracket)."""
    ranked = rank_feasible(trials, s.objectives)
    if s.capacity:
        ranked = [t for t in ranked if t is baseline or (t.capacity or {}).get("certified")]
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
    return finalists


def _confirm_dir(run_dir: Path, done: int) -> Path:
    """`confirm/` for the study's first confirmation, `confirm-2/`, `confirm-3/` ... for later ones,
    past any directory an interrupted one left: a study confirmed again keeps the earlier logs."""
    k = done + 1
    while True:
        out = run_dir / ("confirm" if k == 1 else f"confirm-{k}")
        if not (out.exists() and any(out.iterdir())):
            return out
        k += 1


def _soaks(
    s: StudySetup,
    runner: BaseRunner,
    record: dict[str, Any],
    by_number: dict[int, TrialSummary],
    out_dir: Path,
    stop: threading.Event,
    journal: dict[str, Any],
) -> list[dict[str, Any]]:
    """A capacity confirmation's last word, each a fresh launch of `--confirm-soak-seconds`: the winner
    soaked at its median confirmed capacity and, if that does not hold, one resolution lower
    (`CONFIRM_SOAK_TRIES`); then the baseline at the rate the winner held (else the lowest it tried), on
    the same arrivals, prompts and images as that soak. Sets `record["sustained"]`: the rate the winner
    held, or None.

    A rate does not travel between machines (on the H200 one config's capacity read 13.8 on one lent
    machine and 16.8-17.8 on another): the winner soaks at the median of its rounds measured on the
    machine it soaks on. Where none was (a confirmation resumed on another machine, or one whose rounds
    were stored without their machine), its soak's launch first searches its capacity there, from that
    median, and soaks at what it finds (`_soak_rate`)."""
    seconds = s.options.confirm_soak_seconds
    winner = record["chosen_trial"]
    values = (
        record["baseline_values"]
        if winner == record["baseline_trial"]
        else next((f["values"] for f in record["finalists"] if f["trial"] == winner), [])
    )
    here = runner.machine()
    rate, search_first = _soak_rate(values, winner, journal, here)
    if seconds <= 0 or rate is None:
        return []
    out = []
    for number in dict.fromkeys([winner, record["baseline_trial"]]):
        key = f"soak/{number}"
        entry = journal["done"].get(key)
        if entry is None:
            first = search_first and number == winner
            tries, seed = (CONFIRM_SOAK_TRIES, None) if number == winner else (1, out[0].get("seed") if out else None)
            entry = _soak(s, runner, by_number[number], rate, out_dir, stop, tries=tries, search_first=first, seed=seed)
            _write(s, journal, key, entry, machine=here)
        if number == winner:
            record["sustained"] = entry["rate"] if entry.get("state") == "met" else None
            rate = entry["rate"]  # the baseline meets the rate the winner held (or the lowest it tried)
        out.append(entry)
    return out


def _soak_rate(
    values: Sequence[float | None], winner: int, journal: dict[str, Any], here: str | None
) -> tuple[float | None, bool]:
    """(the rate the winner soaks at, whether its soak's launch searches first): the median of its rounds
    measured on `here` (all of them where the runner cannot tell its machine); none measured here: the
    median of all, searched from (True)."""
    machines = journal.get("machines") or {}
    rounds = [(v, machines.get(f"{winner}/{k}")) for k, v in enumerate(values, start=1) if v]
    if not rounds:
        return None, False
    mine = [v for v, m in rounds if here is None or m == here]
    return statistics.median(mine or [v for v, _ in rounds]), not mine


def _soak(
    s: StudySetup,
    runner: BaseRunner,
    t: TrialSummary,
    rate: float,
    out_dir: Path,
    stop: threading.Event,
    *,
    tries: int,
    search_first: bool = False,
    seed: int | None = None,
) -> dict[str, Any]:
    """One config's soak as the confirmation records it: at `rate`, on the sequence `seed` (default: the
    confirmation's), stepping down `tries` times at most; the entry's `seed` is its last soak's sequence.
    `search_first`: its launch first searches the capacity from `rate` (on a new sequence) and soaks at
    what it finds (`searched`, `certified`: the capacity found; a search that finds none soaks nothing)."""
    from servetune.runner import measure_capacity, measure_soak

    seconds = s.options.confirm_soak_seconds
    run_dir, aside = _set_aside(out_dir / f"soak-trial-{t.number:04d}")
    res, gpus = s.resolve(t.layer, source=t.source), s.slots[0].gpus
    entry: dict[str, Any] = {"trial": t.number, "rate": rate, "seconds": seconds}
    if search_first:
        search = dataclasses.replace(s.confirm_search, start_rate=rate, seed=s.options.confirm_rounds + 1,
                                     soak_s=seconds, soak_tries=tries)  # fmt: skip
        m = measure_capacity(runner, res, s.workload, s.latency_slos, run_dir=run_dir, search=search, gpus=gpus,
                             stop=stop.is_set, resume=aside)  # fmt: skip
        soaks = m.capacity.soaks if m.capacity is not None else []
        if m.capacity is not None:
            entry.update(searched=m.capacity.request_rate, certified=m.capacity.certified)
        if m.capacity is not None and m.capacity.request_rate is None:
            entry.update(state="failed", why=f"no capacity found on this machine ({m.capacity.note})")
    else:
        search = s.confirm_search if seed is None else dataclasses.replace(s.confirm_search, seed=seed)
        m = measure_soak(runner, res, s.workload, s.latency_slos, rate=rate, seconds=seconds, run_dir=run_dir,
                         search=search, tries=tries, gpus=gpus, stop=stop.is_set, resume=aside)  # fmt: skip
        soaks = m.soaks
    if stop.is_set():
        raise KeyboardInterrupt
    if soaks:
        last = soaks[-1]
        entry.update(rate=last.rate, state=last.state, why=last.why, at_s=last.at_s, latency_ms=last.latency_ms,
                     seed=last.seed)  # fmt: skip
        if len(soaks) > 1:
            entry["tried"] = [_tried(x) for x in soaks]
    elif "state" not in entry:
        entry.update(state="failed", why=m.failure.message if m.failure else "no result")
    return entry


def _tried(soak: Any) -> dict[str, Any]:
    """One of a winner's soaks, as its entry's `tried` lists it (`resumed_from`: kept from a stopped launch)."""
    out = {"rate": soak.rate, "state": soak.state, "at_s": soak.at_s}
    return {**out, "resumed_from": soak.resumed_from} if soak.resumed_from else out


def _remeasure(
    s: StudySetup,
    runner: BaseRunner,
    t: TrialSummary,
    run_dir: Path,
    *,
    guarded: bool,
    reference: float | None,
    stop: threading.Event,
    round_: int = 1,
    resume: Path | None = None,
) -> Outcome:
    """One confirmation round of trial `t`: a fresh capacity search (starting at its own capacity,
    seeded by the round: every config of one round meets the same step sequences; `resume`: the directory
    of this round's search stopped part-way, whose finished steps are kept) or a benchmark run (a
    finalist's guarded against runaways), in `run_dir`."""
    res = s.resolve(t.layer, source=t.source)
    if s.capacity:
        search = dataclasses.replace(s.confirm_search, seed=round_)
        if t.values and t.values[0] > 0:
            search = dataclasses.replace(search, start_rate=t.values[0])
        return evaluate_capacity(
            runner, res, workload=s.workload, slos=s.latency_slos, search=search, slot=s.slots[0],
            run_dir=run_dir, stop=stop.is_set, resume=resume,
        )  # fmt: skip
    return evaluate(
        runner,
        res,
        workload=s.workload,
        slot=s.slots[0],
        run_dir=run_dir,
        requests=s.requests,
        should_stop=lambda step, partial: stop.is_set(),
        guard=runaway_guard(s, reference) if guarded and reference is not None else None,
    )
