"""One trial: suggest its params, resolve it from the study's `Context`, measure it through the
runner (pruning through `should_stop`), and tell the study: values, PRUNED, or FAIL with the
failure record. A config whose hash matches a measured or config-failed one is not launched again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.bench.servermodel import server_limits
from servetune.errors import ConflictError, TuningError
from servetune.runner import Failure
from servetune.secrets import redact
from servetune.tuner import _local, _model, _storage
from servetune.tuner._evaluate import Outcome, Slot, config_hash, evaluate, evaluate_capacity, failure_record
from servetune.tuner._options import SOURCES_BASELINE
from servetune.tuner._params import suggest
from servetune.tuner._result import pick_best, summarize_trial
from servetune.tuner.events import BestSoFar, TrialFinished, TrialStarted

if TYPE_CHECKING:
    from servetune.runner import BaseRunner
    from servetune.tuner._setup import StudySetup


def reference_rate(s: StudySetup) -> float | None:
    """The request rate (req/s) of the best finished trial on a throughput objective (None: no
    such trial yet, or another objective): the runaway guard's reference."""
    objective = s.objectives[0]
    if s.capacity or not objective.is_throughput:
        return None
    best = pick_best(s.summaries(), s.objectives)
    if best is None or not best.metrics:
        return None
    m = best.metrics
    rate = m.get("comparable_request_throughput") or m.get("steady_request_throughput") or m.get("request_throughput")
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def runaway_guard(s: StudySetup, reference_rate: float):
    """A `RunawayGuard` for one run of the study's workload against `reference_rate` (req/s)."""
    from servetune.runner import RunawayGuard

    return RunawayGuard.from_rate(reference_rate, requests=s.requests, concurrency=s.workload.max_concurrency)


def guard_record(guard, reference_rate: float) -> dict[str, Any]:
    """A guard's reference and deadlines as a trial stores them (`user_attrs["guard"]`)."""
    return {
        "reference_rate": round(reference_rate, 4),
        "wave": guard.wave,
        "first_wave_s": round(guard.first_wave_s, 3),
        "total_s": round(guard.total_s, 3),
    }


def launches(trials: list, *, running: bool = True) -> int:
    """Trials that count towards `--trials`: launched ones (COMPLETE, PRUNED, config failures), and
    RUNNING ones when `running`; a reused duplicate, a config the server model ruled out and a lost or
    interrupted launch do not count."""
    from optuna.trial import TrialState

    used = 0
    for t in trials:
        if t.state == TrialState.RUNNING and running:
            used += 1
        elif "duplicate_of" in t.user_attrs or t.user_attrs.get("not_launched"):
            continue
        elif t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
            t.state == TrialState.FAIL and _storage.is_config_failure(t)
        ):
            used += 1
    return used


class TrialDriver:
    """Runs trials of one study (from any slot's thread) and tells the study their outcome.

    Args:
        setup: The prepared study.
        runner: Measures a resolution (launch + benchmark).
        on_event: Receives `TrialStarted` / `TrialFinished`.
        stop: Set on Ctrl-C (or by a caller) to end the running benchmark and the study.
        lock: Held while asking for a trial; guards `reproposals`.
        local_budget: Trials of the local phase (baselines then record their full config).
    """

    def __init__(
        self,
        setup: StudySetup,
        runner: BaseRunner,
        *,
        on_event: Callable[[Any], None],
        stop: threading.Event,
        lock: threading.Lock,
        local_budget: int,
    ) -> None:
        self.s = setup
        self.runner = runner
        self.on_event = on_event
        self.stop = stop
        self.lock = lock
        self.local_budget = local_budget
        self.reproposals = 0
        """Trials in a row (this process) whose config was measured before: reused, not launched."""

    @property
    def prunable(self) -> bool:
        """Pruning is on and the study has one objective."""
        return self.s.options.prune and len(self.s.objectives) == 1

    def run(self, trial, slot: Slot) -> None:
        """Resolve, measure and tell one asked trial."""
        s = self.s
        source = trial.user_attrs.get("source", "sampler")
        if source in SOURCES_BASELINE:
            # a baseline samples only what it was enqueued with (what the rules or defaults set in the space)
            enqueued = _storage.frozen_trial(s.study, trial.number).system_attrs.get("fixed_params") or {}
            params = suggest(trial, s.space, only=enqueued)
            layer: dict[str, Any] = {}
        else:
            record = _model.load(s.study) if s.capacity else None
            auto = set(trial.user_attrs.get("auto") or ())  # a local trial: left to SGLang as in its incumbent
            params = suggest(trial, _model.search_space(s.space, record, keep=auto))
            layer = {k: v for k, v in params.items() if v is not None and k not in auto}
            trial.set_user_attr("source", source)
        trial.set_user_attr("layer", layer)
        trial.set_user_attr("params", params)  # real values (Optuna stores an ordinal choice's index)
        trial_dir = s.run_dir / f"trial-{trial.number:04d}"
        trial.set_user_attr("run_dir", str(trial_dir.resolve()))
        self.on_event(TrialStarted(number=trial.number, source=source, params=params, slot=slot.index))
        try:
            res = s.resolve(layer, source=source)
        except ConflictError as exc:
            return self.fail(trial, Failure(cls="require", message=exc.message, log_tail="\n".join(exc.notes)))
        argv, env = list(res.argv()), dict(res.env())
        h = config_hash(argv, env)
        trial.set_user_attr("config_hash", h)
        trial.set_user_attr("argv", redact(argv))
        trial.set_user_attr("env", redact(env))

        prior = self._same_config(h, trial.number)
        with self.lock:
            self.reproposals = self.reproposals + 1 if prior is not None and source not in SOURCES_BASELINE else 0
        if prior is not None:
            return self._reuse(trial, prior)

        if s.capacity and source not in SOURCES_BASELINE:
            predicted = _model.prediction(s, params)
            if predicted is not None:
                trial.set_user_attr("predicted", predicted)
                veto = _model.veto(s, predicted["capacity"], self.incumbent_value(), source)
                if veto is not None:
                    return self._not_launched(trial, veto)
        m = self._measure(trial, res, source, slot, trial_dir)
        floored = trial.user_attrs.get("floor") is not None
        trial.set_user_attr("timing", _rounded({**m.timing, **_search_split(m.capacity, floored)}))
        if m.capacity is not None:
            trial.set_user_attr("capacity", m.capacity)
            trial.set_user_attr("server_limits", server_limits(m.server_info))
        if m.below_floor is not None:
            trial.set_user_attr("pruned", {"why": "below_floor", "floor": m.below_floor})
        if self.stop.is_set() and (m.stopped_early or m.failure is not None):
            raise KeyboardInterrupt
        if m.failure is not None:
            if m.failure.cls in ("bad_command", "wrong_server") and source in SOURCES_BASELINE:
                self.fail(trial, m.failure)
                raise TuningError(
                    f"the baseline launch failed ({m.failure.cls}): {m.failure.message}",
                    help="check --sglang-cmd and that SGLang is installed; every trial would fail the same way",
                    notes=[f"log tail:\n{m.failure.log_tail}"] if m.failure.log_tail else (),
                )
            return self.fail(trial, m.failure)
        if source in SOURCES_BASELINE and (self.local_budget or s.capacity):
            fixed = trial.user_attrs.get("fixed") or {}
            trial.set_user_attr("effective_params", _local.baseline_values(s, params, fixed, env, m.server_info))
            trial.set_user_attr("auto", sorted(n for n, v in fixed.items() if v is None))
        return self._tell_measured(trial, m)

    def _measure(self, trial, res, source: str, slot: Slot, trial_dir) -> Outcome:
        """One measurement: a capacity search (floored at the incumbent's capacity, except for a
        baseline), or a benchmark run (guarded against runaways, except for a baseline)."""
        s = self.s
        baseline = source in SOURCES_BASELINE
        if s.capacity:
            # screening: one step at the incumbent's capacity plus the resolution; a config that cannot
            # meet it cannot beat the incumbent by a margin the search resolves (PRUNED below_floor)
            incumbent = None if baseline else self.incumbent_value()
            floor = incumbent * (1.0 + s.search.resolution) if incumbent else None
            trial.set_user_attr("floor", floor)
            return evaluate_capacity(
                self.runner,
                res,
                workload=s.workload,
                slos=s.latency_slos,
                search=s.search,
                slot=slot,
                run_dir=trial_dir,
                floor=floor,
                stop=self.stop.is_set,
                resume=self._resume_dir(trial),
            )
        rate = None if baseline else reference_rate(s)
        guard = runaway_guard(s, rate) if rate is not None else None
        if guard is not None:
            trial.set_user_attr("guard", guard_record(guard, rate))
        return evaluate(
            self.runner,
            res,
            workload=s.workload,
            slot=slot,
            run_dir=trial_dir,
            requests=s.requests,
            should_stop=self._should_stop(trial),
            guard=guard,
        )

    def _resume_dir(self, trial) -> Path | None:
        """The run directory of this config's latest launch that was stopped part-way (Ctrl-C, a job's
        time limit, a lost worker: not a failure of the config), where it is on this machine: the
        capacity search keeps the steps it finished (`search_server`'s `resume`) instead of measuring
        them again. Found by the config's hash, so a retry and a baseline enqueued twice both find it."""
        from optuna.trial import TrialState

        h = trial.user_attrs.get("config_hash")
        stopped = [
            t
            for t in self.s.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if t.number != trial.number
            and h is not None
            and t.user_attrs.get("config_hash") == h
            and not _storage.is_config_failure(t)
            and (Path(t.user_attrs.get("run_dir") or "/nonexistent") / "steps").is_dir()
        ]
        if not stopped:
            return None
        prior = max(stopped, key=lambda t: t.number).user_attrs["run_dir"]
        trial.set_user_attr("resumed_from", prior)
        return Path(prior)

    def incumbent_value(self) -> float | None:
        """The best feasible trial's primary value so far (a capacity trial's floor), else None."""
        best = pick_best(self.s.summaries(), self.s.objectives)
        return best.values[0] if best is not None and best.values else None

    def _should_stop(self, trial) -> Callable[[int, Any], bool]:
        """The benchmark's `should_stop`: Ctrl-C, or the pruner at a checkpoint.

        The pruner is asked at a few checkpoints only (every twelfth of the run): each ask reads
        the study, and on a small box that work would slow the benchmark client it shares the CPU
        with. It is asked only once the steady window holds a full wave (`window_ready`)."""
        from servetune.tuner._pruning import Checkpoints
        from servetune.tuner.objectives import flatten_metrics

        objective = self.s.objectives[0]
        points = Checkpoints(
            self.s.requests, self.s.workload.max_concurrency, first_wave=objective.direction == "maximize"
        )

        def should_stop(step: int, snapshot: Any) -> bool:
            if self.stop.is_set():
                return True
            if snapshot is None or not self.prunable or not points.grid or step < points.grid[0]:
                return False
            flat = flatten_metrics(snapshot.metrics())  # computed here only: a checkpoint may be due
            checkpoint = points.due(step, flat)
            value = objective.value(flat)
            if checkpoint is None or value is None:
                return False
            trial.report(value, checkpoint)
            if not trial.should_prune():
                return False
            trial.set_user_attr(
                "pruned_at", {"step": checkpoint, "value": value, "steady_completed": flat.get("steady_completed")}
            )
            return True

        return should_stop

    def _tell_measured(self, trial, m: Outcome) -> None:
        from optuna.trial import TrialState

        metrics = m.metrics or {}
        trial.set_user_attr("metrics", metrics)
        self._constrain(trial, metrics)
        if m.stopped_early:
            self.s.study.tell(trial, state=TrialState.PRUNED)
            return self.finished(trial.number)
        values = [ob.value(metrics) for ob in self.s.objectives]
        if any(v is None for v in values):
            missing = [ob.metric for ob, v in zip(self.s.objectives, values) if v is None]
            message = f"the benchmark did not report {', '.join(missing)}"
            return self.fail(trial, Failure(cls="bench_error", message=message))
        self.s.study.tell(trial, values)
        self.finished(trial.number)

    def _constrain(self, trial, metrics: dict[str, Any]) -> None:
        """SLO violations (<= 0 met) in user_attrs, and as Optuna constraints for the sampler."""
        values = [slo.violation(metrics) for slo in self.s.slos]
        trial.set_user_attr("constraints", values)
        if hasattr(trial, "set_constraint"):
            for slo, value in zip(self.s.slos, values):
                trial.set_constraint(f"slo {slo}", value)

    def _not_launched(self, trial, veto: dict[str, Any]) -> None:
        """A config the server model rules out (`_model.veto`): PRUNED without a launch (it does not
        count towards `--trials`), with the prediction and the incumbent it fell short of."""
        from optuna.trial import TrialState

        trial.set_user_attr("pruned", veto)
        trial.set_user_attr("not_launched", True)
        self.s.study.tell(trial, state=TrialState.PRUNED)
        self.finished(trial.number)

    def fail(self, trial, failure: Failure) -> None:
        """Tell the study the trial failed, with its failure record."""
        from optuna.trial import TrialState

        trial.set_user_attr("failure", failure_record(failure))
        self.s.study.tell(trial, state=TrialState.FAIL)
        self.finished(trial.number)

    def interrupted(self, trial) -> None:
        """Ctrl-C during `trial`: FAIL it as `interrupted` and queue a retry."""
        from optuna.trial import TrialState

        study = self.s.study
        failure = {"class": "interrupted", "message": "stopped by Ctrl-C; a retry was queued", "log_tail": ""}
        trial.set_user_attr("failure", failure)
        study.tell(trial, state=TrialState.FAIL)
        _storage.retry_lost_trial(study, _storage.frozen_trial(study, trial.number))
        self.on_event(
            TrialFinished(
                number=trial.number,
                state="FAIL",
                failure=failure,
                source=trial.user_attrs.get("source", "sampler"),
                done=launches(study.get_trials(deepcopy=False), running=False),
                total=self.s.options.trials,
            )
        )

    def _same_config(self, h: str, number: int):
        from optuna.trial import TrialState

        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        for t in self.s.study.get_trials(deepcopy=False, states=states):
            if t.number == number or t.user_attrs.get("config_hash") != h:
                continue
            if t.state == TrialState.FAIL and not _storage.is_config_failure(t):
                continue
            return t
        return None

    def _reuse(self, trial, prior) -> None:
        """A config measured (or failed) before is not launched again; its outcome is copied."""
        from optuna.trial import TrialState

        trial.set_user_attr("duplicate_of", prior.number)
        if prior.state == TrialState.FAIL:
            f = prior.user_attrs.get("failure") or {}
            return self.fail(
                trial,
                Failure(
                    cls=f.get("class", "crash"),
                    message=f"same config as failed trial {prior.number}: {f.get('message', '')}",
                    log_tail=f.get("log_tail", ""),
                ),
            )
        trial.set_user_attr("metrics", prior.user_attrs.get("metrics"))
        for key in ("capacity", "pruned"):
            if key in prior.user_attrs:
                trial.set_user_attr(key, prior.user_attrs[key])
        self._constrain(trial, prior.user_attrs.get("metrics") or {})
        if prior.state == TrialState.PRUNED:
            self.s.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.s.study.tell(trial, list(prior.values))
        self.finished(trial.number)

    def finished(self, number: int) -> None:
        """Send `TrialFinished` for a told trial, with the best so far and the launches counted."""
        s = self.s
        t = _storage.frozen_trial(s.study, number)
        space = s.space.as_dict()
        summary = summarize_trial(t, s.objectives, s.slos, space)
        trials = s.study.get_trials(deepcopy=False)
        best = pick_best([summarize_trial(x, s.objectives, s.slos, space) for x in trials], s.objectives)
        self.on_event(
            TrialFinished(
                number=number,
                state=summary.state,
                source=summary.source,
                values=None if summary.values is None else tuple(summary.values),
                failure=summary.failure,
                feasible=summary.feasible,
                params=summary.params,
                duplicate_of=t.user_attrs.get("duplicate_of"),
                best=None if best is None else BestSoFar(best.number, tuple(best.values or ())),
                done=launches(trials, running=False),
                total=s.options.trials,
            )
        )


def _search_split(capacity: dict[str, Any] | None, floored: bool) -> dict[str, Any]:
    """A capacity trial's bench time split (s): the screening step (its first, where the search started
    at a floor), the search's other steps, and its soaks."""
    if not capacity or not capacity.get("steps"):
        return {}
    steps = capacity["steps"]
    screening = steps[0].get("bench_s", 0.0) if floored else 0.0
    search = sum(x.get("bench_s", 0.0) for x in steps) - screening
    soak = sum(x.get("bench_s", 0.0) for x in capacity.get("soaks") or [])
    return {"screening_s": screening, "search_s": search, "soak_s": soak}


def _rounded(timing: dict[str, Any]) -> dict[str, Any]:
    """A `RunTimings` dump with its seconds to the millisecond (what the trial's `timing` attribute keeps)."""
    return {
        k: _rounded(v) if isinstance(v, dict) else round(v, 3) if isinstance(v, float) else v for k, v in timing.items()
    }
