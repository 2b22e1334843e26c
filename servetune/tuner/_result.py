"""A study read back from storage: one `TrialSummary` per trial, the best, the baselines, the Pareto
front and the confirmation, as `TuneResult` (what `tune`, `tune report` and `--json` show)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servetune.errors import TuningError
from servetune.tuner import _storage
from servetune.tuner._params import decode_params
from servetune.tuner.objectives import Objective

JOURNAL = "confirm_journal"
"""The study user attribute holding an unfinished confirmation: its plan, directory and measurements."""


@dataclass
class TrialSummary:
    """One trial as the report and `--json` show it."""

    number: int
    state: str
    source: str
    params: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)
    values: list[float] | None = None
    metrics: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    feasible: bool = False
    config_hash: str | None = None
    layer: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    capacity: dict[str, Any] | None = None
    """A capacity trial's search (`Capacity` as JSON: SLOs, capacity, steps), else None."""
    timing: dict[str, Any] = field(default_factory=dict)
    predicted: float | None = None
    """A capacity trial's capacity as the study's server model predicted it before it launched."""
    duplicate_of: int | None = None
    """The trial whose measurement this one reuses (same config, not relaunched)."""
    """Where the trial's time went (`RunTimings` as JSON); empty for a trial that launched nothing."""

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: state, source, params, and the metrics and values or the failure."""
        out: dict[str, Any] = {"number": self.number, "state": self.state, "source": self.source, "params": self.params}
        if self.fixed:
            out["fixed"] = self.fixed
        if self.failure is not None:
            out["failure"] = self.failure
        else:
            out["metrics"] = self.metrics
            out["values"] = self.values
            out["feasible"] = self.feasible
        if self.note:
            out["note"] = self.note
        if self.capacity is not None:
            out["capacity"] = self.capacity
        return out


@dataclass
class TuneResult:
    """The outcome of a study, read back from storage (so `tune report` sees the same)."""

    study: str
    storage: str
    objectives: list[dict[str, str]]
    slos: list[str]
    trials: list[TrialSummary]
    best: TrialSummary | None
    baseline: TrialSummary | None
    defaults: TrialSummary | None
    pareto: list[int]
    confirmation: dict[str, Any] | None
    meta: dict[str, Any]
    confirmations: list[dict[str, Any]] = field(default_factory=list)
    """Every confirmation the study ran, oldest first (a resumed study can confirm again, e.g. with
    longer steps); `confirmation` is the newest."""
    model: dict[str, Any] | None = None
    """A capacity study's server model record (`tuner._model`: the fit, its evidence, its seed)."""
    unfinished: dict[str, Any] | None = None
    """A confirmation a stopped run left part-way (`tuner._confirm`'s journal: its plan and what it measured),
    which the same command resumes; None when there is none."""

    def model_error(self) -> dict[str, Any] | None:
        """How far the model's predictions were from the measured capacities: per trial that has both
        (COMPLETE), the ratio predicted / measured - 1; the median of their sizes, and the seed's."""
        pairs = [
            (t.number, t.predicted / t.values[0] - 1.0)
            for t in self.trials
            if t.predicted and t.state == "COMPLETE" and t.values and t.values[0] and not t.duplicate_of
        ]
        if not pairs:
            return None
        seed = next((e for n, e in pairs if next(t for t in self.trials if t.number == n).source == "model"), None)
        return {
            "trials": len(pairs),
            "median_abs": statistics.median(abs(e) for _, e in pairs),
            "seed": seed,
            "each": {n: round(e, 4) for n, e in pairs},
        }

    def ratio(self) -> float | None:
        """best/baseline on the primary objective (the confirmed median when re-measured)."""
        if self.confirmation and self.confirmation.get("chosen_ratio") is not None:
            return self.confirmation["chosen_ratio"]
        if self.best and self.baseline and self.best.values and self.baseline.values and self.baseline.values[0]:
            return self.best.values[0] / self.baseline.values[0]
        return None

    def as_json(self) -> dict[str, Any]:
        def brief(t: TrialSummary | None) -> dict[str, Any] | None:
            if t is None:
                return None
            return {
                "number": t.number,
                "source": t.source,
                "params": t.params,
                "fixed": t.fixed,
                "set": t.layer,
                "metrics": t.metrics,
                "values": t.values,
            }

        return {
            "study": self.study,
            "storage": _storage.redact_url(self.storage),
            "objectives": self.objectives,
            "slos": self.slos,
            "best": brief(self.best),
            "baseline": brief(self.baseline),
            "defaults": brief(self.defaults),
            "ratio": self.ratio(),
            "confirmation": self.confirmation,
            "confirmations": self.confirmations,
            "pareto_front": self.pareto,
            "trials": [t.as_json() for t in self.trials],
            "trial_time": self.trial_time(),
            "model": self.model,
            "model_error": self.model_error(),
            "confirmation_unfinished": self.unfinished,
            "meta": self.meta,
        }

    def trial_time(self) -> dict[str, Any] | None:
        """Medians over the trials that launched a server: `trials`, and seconds of `startup_s`, its
        phases (`startup_phases`: imports, processes, engine, ...), `bench_s` (for a capacity study
        split into `screening_s`, `search_s`, `soak_s`), `stop_s`, `total_s`."""
        timed = [t.timing for t in self.trials if t.timing.get("total_s")]
        if not timed:
            return None

        def median(values: list[float]) -> float | None:
            return round(statistics.median(values), 1) if values else None

        keys = ("startup_s", "bench_s", "screening_s", "search_s", "soak_s", "stop_s", "total_s")
        out: dict[str, Any] = {"trials": len(timed)}
        out.update({k: median([t[k] for t in timed if isinstance(t.get(k), (int, float))]) for k in keys})
        phases = [t["startup_phases"] for t in timed if t.get("startup_phases")]
        names = ("imports_s", "processes_s", "engine_s", "cuda_graphs_s", "warmup_s", "ready_s")
        out["startup_phases"] = {k: median([p[k] for p in phases if isinstance(p.get(k), (int, float))]) for k in names}
        return out


def summarize_trial(t, objectives, slos=(), space: dict[str, Any] | None = None) -> TrialSummary:
    """A `FrozenTrial` as a `TrialSummary` (feasible = COMPLETE and every SLO met); `space` (the
    study's, as stored in its metadata) maps ordinal choices' indices back to their values."""
    state = t.state.name
    constraints = t.user_attrs.get("constraints") or []
    feasible = state == "COMPLETE" and all(c <= 0 for c in constraints)
    note = ""
    if "duplicate_of" in t.user_attrs:
        note = f"same config as trial {t.user_attrs['duplicate_of']} (not relaunched)"
    if "retry_of" in t.user_attrs:
        note = (note + "; " if note else "") + f"retry of trial {t.user_attrs['retry_of']}"
    if state == "COMPLETE" and not feasible:
        note = (note + "; " if note else "") + "violates an SLO"
    pruned, capacity = t.user_attrs.get("pruned") or {}, t.user_attrs.get("capacity")
    if state == "PRUNED" and pruned.get("why") == "below_floor":
        note = (note + "; " if note else "") + f"below_floor: missed at the incumbent's {pruned['floor']:.4g} req/s"
    if state == "PRUNED" and pruned.get("why") == "predicted_below":
        note = (note + "; " if note else "") + (
            f"not launched: predicted {pruned['predicted']:.4g} req/s, under half the incumbent's "
            f"{pruned['incumbent']:.4g}"
        )
    if capacity:
        note = (note + "; " if note else "") + _search_note(t, capacity)
    return TrialSummary(
        number=t.number,
        state=state,
        source=t.user_attrs.get("source", "sampler"),
        params=_launched(t, decode_params(t.params, t.distributions, space or {})),
        fixed=dict(t.user_attrs.get("fixed") or {}),
        values=list(t.values) if t.values is not None else None,
        metrics=t.user_attrs.get("metrics"),
        failure=_storage.failure_of(t),
        feasible=feasible,
        config_hash=t.user_attrs.get("config_hash"),
        layer=dict(t.user_attrs.get("layer") or {}),
        note=note,
        capacity=capacity,
        timing=dict(t.user_attrs.get("timing") or {}),
        predicted=(t.user_attrs.get("predicted") or {}).get("capacity"),
        duplicate_of=t.user_attrs.get("duplicate_of"),
    )


def objectives_from_meta(meta: dict[str, Any]) -> tuple[Objective, ...]:
    """The objectives a study's metadata (`user_attrs["servetune"]`) records."""
    return tuple(
        Objective(o["name"], o["metric"], o["direction"], o.get("unit", "")) for o in meta.get("objectives", [])
    )


def rank_feasible(trials: list[TrialSummary], objectives) -> list[TrialSummary]:
    """Feasible trials, best first on the primary objective (ties: lower trial number)."""
    sign = -1.0 if objectives[0].direction == "maximize" else 1.0
    ok = [t for t in trials if t.feasible and t.values]
    return sorted(ok, key=lambda t: (sign * t.values[0], t.number))


def pareto_front(trials: list[TrialSummary], objectives) -> list[TrialSummary]:
    """Feasible trials no other feasible trial dominates."""
    ok = [t for t in trials if t.feasible and t.values]
    signs = [1.0 if o.direction == "minimize" else -1.0 for o in objectives]

    def key(t):
        return [s * v for s, v in zip(signs, t.values)]

    front = []
    for t in ok:
        kt = key(t)
        if not any(all(a <= b for a, b in zip(key(u), kt)) and key(u) != kt for u in ok):
            front.append(t)
    return sorted(front, key=lambda t: t.number)


def pick_best(trials: list[TrialSummary], objectives) -> TrialSummary | None:
    """Best feasible trial on the primary objective (for Pareto runs: the front's best on it)."""
    pool = pareto_front(trials, objectives) if len(objectives) > 1 else trials
    ranked = rank_feasible(pool, objectives)
    return ranked[0] if ranked else None


def baseline_of(trials: list[TrialSummary], source: str) -> TrialSummary | None:
    """The last measured trial of a baseline `source` (rules, defaults), else its last trial."""
    measured = [t for t in trials if t.source == source and t.state == "COMPLETE"]
    if measured:
        return measured[-1]
    any_ = [t for t in trials if t.source == source]
    return any_[-1] if any_ else None


def confirmation_history(user_attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """A study's confirmations, oldest first (one stored before the history was kept counts)."""
    history = user_attrs.get("confirmations")
    if history is None:
        history = [c for c in [user_attrs.get("confirmation")] if c]
    return list(history)


def load_result(study, storage_url: str) -> TuneResult:
    """Read a study back from storage into a `TuneResult`."""
    meta = study.user_attrs.get("servetune") or {}
    objectives = objectives_from_meta(meta)
    if not objectives:
        raise TuningError(f"study {study.study_name!r} was not made by servetune tune (no metadata)")
    trials = [summarize_trial(t, objectives, (), meta.get("space") or {}) for t in study.get_trials(deepcopy=False)]
    confirmation = study.user_attrs.get("confirmation")
    best = pick_best(trials, objectives)
    if confirmation:
        chosen = next((t for t in trials if t.number == confirmation.get("chosen_trial")), None)
        best = chosen or best
    baseline = baseline_of(trials, "rules")
    return TuneResult(
        study=study.study_name,
        storage=storage_url,
        objectives=meta.get("objectives", []),
        slos=meta.get("slos", []),
        trials=trials,
        best=best,
        baseline=baseline,
        defaults=baseline_of(trials, "defaults"),
        pareto=[t.number for t in pareto_front(trials, objectives)] if len(objectives) > 1 else [],
        confirmation=confirmation,
        meta=meta,
        confirmations=confirmation_history(study.user_attrs),
        model=study.user_attrs.get("server_model"),
        unfinished=study.user_attrs.get(JOURNAL) or None,
    )


def _launched(t, params: dict[str, Any]) -> dict[str, Any]:
    """`params` as the trial launched them: a field a local or model trial left to SGLang (`auto`) is
    None (unset), not the placeholder its sampler drew."""
    auto = set(t.user_attrs.get("auto") or ())
    return {k: None if k in auto else v for k, v in params.items()}


def _search_note(t, capacity: dict[str, Any]) -> str:
    """A capacity trial's search in a few words: its steps, those kept from a stopped launch of the same
    config, and a bracket left uncertified."""
    steps = capacity.get("steps") or []
    kept = sum(1 for x in steps if x.get("resumed_from"))
    where = Path(t.user_attrs.get("resumed_from") or "").name or "another run"
    uncertified = capacity.get("request_rate") is not None and capacity.get("certified") is False
    return (
        f"{len(steps)} steps"
        + (f", {kept} kept from the stopped launch in {where}" if kept else "")
        + ("; the bracket not certified" if uncertified else "")
    )
