"""The study: ask → resolve (tuner layer) → launch → benchmark → tell, until the budget is spent.

    from servetune.tuner import TuneOptions, Tuner
    tuner = Tuner(TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=20))
    result = tuner.run()          # TuneResult: best, baseline, trials, confirmation

The first trials are the rule-resolved config (`source=rules`) and SGLang's own defaults
(`source=defaults`), enqueued so every study measures the baseline. Failures (OOM, crash,
start-up timeout, bench error, a broken `require` rule) are FAIL trials with the class and
the log tail in `user_attrs["failure"]`; a config whose hash matches a failed one is not
launched again. Several processes may share one study through an RDB URL.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servetune.errors import ConflictError, SpecError, TuningError
from servetune.tuner import _storage
from servetune.tuner._evaluate import Failure, Measurement, Slot, config_hash, measure
from servetune.tuner.objectives import Objective, Slo, parse_objectives, parse_slo
from servetune.tuner.space import (
    ResolvedSpace,
    baseline_params,
    build_space,
    decode_params,
    default_space_name,
    encode_params,
    load_shipped_space,
    ordinal_values,
    suggest,
)

SOURCES_BASELINE = ("rules", "defaults")
MAX_REPROPOSALS = 20
"""Trials in a row whose config was measured before (reused, not launched) after which a study
stops: the sampler keeps proposing what it has measured (converged, or the space is used up).
Such trials do not count towards `--trials`, which counts launches."""


@dataclass
class TuneOptions:
    """Everything `servetune tune` takes; the CLI maps its options onto this one to one."""

    model: str
    gpu: str | None = None
    hardware: str | None = None
    workload: Any = "text-chat"
    sglang_version: str | None = None
    preset: str | None = None
    sets: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    tp: int | None = None
    trials: int = 20
    objective: str = "throughput"
    slos: tuple[str, ...] = ()
    space_file: str | None = None
    space_sets: tuple[str, ...] = ()
    storage: str | None = None
    study: str | None = None
    run_dir: Path | None = None
    gpus: tuple[str, ...] = ()
    requests: int | None = None
    seed: int | None = 0
    sglang_cmd: str | None = None
    client: str = "auto"
    sampler: str = "tpe"
    prune: bool = True
    confirm_rounds: int = 2
    finalists: int = 1
    startup_timeout_s: float | None = None
    n_startup_trials: int = 2  # the two enqueued baselines (see _sampler.TPE_SETUP)
    enqueue_baselines: bool = True
    local_trials: int | None = None
    """TPE only: trials of the local phase (`_local`), one-field changes of the best so far;
    None: `_local.local_budget` (two per searched field, at most a quarter of `trials`); 0: off."""


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

    def as_json(self) -> dict[str, Any]:
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
            "pareto_front": self.pareto,
            "trials": [t.as_json() for t in self.trials],
            "meta": self.meta,
        }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")[:80] or "study"


class Tuner:
    """One worker process of a study (it may run several GPU slots in threads)."""

    def __init__(self, options: TuneOptions, *, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.o = options
        self.on_event = on_event or (lambda kind, data: None)
        self._ask_lock = threading.Lock()
        self._stop = threading.Event()
        self._reproposals = 0  # trials in a row that reused a measured config (this process)
        self._converged = False
        self._prepared = False

    # ---------------------------------------------------------------- setup

    def prepare(self) -> None:
        """Resolve the baseline, build and check the space, open or create the study."""
        import optuna

        from servetune.bench import load_workload

        o = self.o
        if o.trials < 1:
            raise SpecError(f"--trials must be >= 1, but got {o.trials}")
        self.workload = load_workload(o.workload)
        self.objectives: tuple[Objective, ...] = parse_objectives(o.objective)
        self.slos: tuple[Slo, ...] = tuple(parse_slo(s) for s in o.slos)
        self.rules_res = self.resolve({}, use_rules=True)
        self.catalog = self.rules_res.catalog
        self.space: ResolvedSpace = self._build_space()
        self.tp = int(self.rules_res.requested().get("tp_size") or o.tp or 1)
        self.slots = self._slots()

        name = o.study or _slug(f"{Path(str(o.model)).name}-{o.gpu or 'local'}-{self.workload.name}")
        self.study_name = name
        self.run_dir = Path(o.run_dir) if o.run_dir else Path("runs") / "tune" / name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.storage_url = o.storage or f"sqlite:///{(self.run_dir / 'study.db').resolve()}"
        self.storage = _storage.open_storage(self.storage_url)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        directions = [obj.direction for obj in self.objectives]
        sampler = self._sampler()
        pruner = self._pruner()
        try:
            self.study = optuna.create_study(
                storage=self.storage, study_name=name, directions=directions, sampler=sampler, pruner=pruner
            )
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            self.study = optuna.load_study(storage=self.storage, study_name=name, sampler=sampler, pruner=pruner)
            created = False
            self._check_compatible()
        if created:
            for key, value in self._meta().items():
                self.study.set_user_attr(key, value)
            if o.enqueue_baselines:
                self._enqueue_baselines()
        lost = _storage.fail_lost_trials(self.study)
        if lost:
            self.on_event("lost", {"trials": lost})
        self._prepared = True

    @property
    def requests(self) -> int:
        """Measured requests per trial: `--requests`, else the workload's `tune_requests`, else its `requests`."""
        return self.o.requests or self.workload.tune_requests or self.workload.requests

    def resolve(self, trial_layer: dict[str, Any], *, use_rules: bool):
        """`resolve_launch` with this study's facts and pins, plus a tuner layer."""
        from servetune.api import resolve_launch

        o = self.o
        return resolve_launch(
            o.model,
            gpu=o.gpu,
            hardware=o.hardware,
            workload=getattr(self, "workload", o.workload),
            sglang_version=o.sglang_version,
            preset=o.preset,
            sets=o.sets,
            envs=o.envs,
            tp=o.tp,
            trial=trial_layer or None,
            use_rules=use_rules,
        )

    def _build_space(self) -> ResolvedSpace:
        o = self.o
        preset_tune = _preset_tune(o.preset)
        default = None
        if not self.workload.tune and not preset_tune:
            label = default_space_name(self.workload.name, self.workload.kind)
            default = (label, load_shipped_space(label))
        from servetune.bench.workloads import list_workloads
        from servetune.presets import preset_files

        shipped = []
        if isinstance(o.workload, str) and o.workload in {w.name for w in list_workloads()}:
            shipped.append("workload")
        if isinstance(o.preset, str) and o.preset in preset_files():
            shipped.append("preset")
        return build_space(
            catalog=self.catalog,
            pinned=self.rules_res.pinned,
            default=default,
            workload_tune=self.workload.tune,
            preset_tune=preset_tune,
            space_file=o.space_file,
            space_sets=o.space_sets,
            shipped_blocks=shipped,
        )

    def _slots(self) -> list[Slot]:
        gpus = [g.strip() for g in self.o.gpus if g.strip()]
        if not gpus:
            return [Slot(0)]
        if len(gpus) % self.tp:
            raise SpecError(
                f"--gpus lists {len(gpus)} GPU(s), which does not split into sets of tp={self.tp}",
                help=f"give a multiple of {self.tp} GPUs, e.g. --gpus {','.join(map(str, range(self.tp * 2)))}",
            )
        return [Slot(i, tuple(gpus[i * self.tp : (i + 1) * self.tp])) for i in range(len(gpus) // self.tp)]

    def _sampler(self):
        import optuna

        seed = self.o.seed
        if self.o.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if self.o.sampler != "tpe":
            raise SpecError(f"unknown sampler {self.o.sampler!r}", help="use tpe or random")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            from servetune.tuner._sampler import make_tpe_sampler

            # optuna >= 5 takes constraints per trial (`Trial.set_constraint`), older ones a constraints_func
            legacy = self.slos and not hasattr(optuna.trial.Trial, "set_constraint")
            return make_tpe_sampler(
                seed, n_startup_trials=self.o.n_startup_trials, constraints_func=_constraints if legacy else None
            )

    def _pruner(self):
        import optuna

        if not self.o.prune or len(self.objectives) > 1:
            return optuna.pruners.NopPruner()
        from servetune.tuner._pruning import BestRelativePruner

        return BestRelativePruner(concurrency=self.workload.max_concurrency)

    def _meta(self) -> dict[str, Any]:
        facts = getattr(self.rules_res, "facts", None)
        return {
            "servetune": {
                "model": str(self.o.model),
                "gpu": self.o.gpu,
                "workload": self.workload.name,
                "requests": self.requests,
                "sglang_version": self.catalog.sglang_version,
                "objectives": [
                    {"name": ob.name, "metric": ob.metric, "direction": ob.direction, "unit": ob.unit}
                    for ob in self.objectives
                ],
                "slos": [str(s) for s in self.slos],
                "space": self.space.as_dict(),
                "dropped": self.space.dropped,
                "pins": {"sets": list(self.o.sets), "envs": list(self.o.envs)},
                "preset": self.o.preset,
                "facts": _jsonable(facts),
                "hardware": _jsonable(getattr(self.rules_res, "hardware", None)),
            }
        }

    def _check_compatible(self) -> None:
        meta = self.study.user_attrs.get("servetune") or {}
        theirs = [x.get("name") for x in meta.get("objectives", [])]
        mine = [ob.name for ob in self.objectives]
        problems = []
        if theirs and theirs != mine:
            problems.append(f"objectives {theirs} vs {mine}")
        if meta.get("slos") is not None and meta.get("slos") != [str(s) for s in self.slos]:
            problems.append(f"SLOs {meta.get('slos')} vs {[str(s) for s in self.slos]}")
        if meta.get("space") is not None and meta.get("space") != json.loads(json.dumps(self.space.as_dict())):
            problems.append("search space differs")
        if meta.get("workload") not in (None, self.workload.name):
            problems.append(f"workload {meta.get('workload')!r} vs {self.workload.name!r}")
        if meta.get("requests") not in (None, self.requests):
            problems.append(f"{meta.get('requests')} vs {self.requests} requests per trial")
        stored_as_categories = self._categorical_ordinals()
        if stored_as_categories:
            problems.append(
                f"{', '.join(stored_as_categories)} stored as categories (a study made before numeric "
                "choices were searched through an ordered index)"
            )
        if problems:
            raise TuningError(
                f"study {self.study_name!r} in {self.storage_url} was created with other settings: "
                f"{'; '.join(problems)}",
                help="resume with the same options, or pass a new --study NAME",
            )

    def _categorical_ordinals(self) -> list[str]:
        """Ordinal choices (`ordinal_values`) that this study's trials store as categories."""
        from optuna.distributions import CategoricalDistribution

        names = {n for n, p in self.space.params.items() if ordinal_values(p.distribution) is not None}
        old = set()
        for t in self.study.get_trials(deepcopy=False):
            old |= {n for n in names if isinstance(t.distributions.get(n), CategoricalDistribution)}
        return sorted(old)

    def _enqueue_baselines(self) -> None:
        defaults_res = self.resolve({}, use_rules=False)
        for source, res in (("rules", self.rules_res), ("defaults", defaults_res)):
            decided = {**res.requested(), **res.env()}
            params, fixed = baseline_params(self.space, decided)
            # an ordinal choice is stored as its index (`encode_params`); values outside the
            # space stay under `fixed`
            self.study.enqueue_trial(encode_params(self.space, params), user_attrs={"source": source, "fixed": fixed})

    # ---------------------------------------------------------------- loop

    def run(self) -> TuneResult:
        """Run trials until the study holds `trials` finished ones, then re-measure finalists."""
        if not self._prepared:
            self.prepare()
        self.on_event(
            "start",
            {
                "study": self.study_name,
                "storage": self.storage_url,
                "trials": self.o.trials,
                "space": self.space.as_dict(),
                "dropped": self.space.dropped,
                "slots": len(self.slots),
                "requests": self.requests,
                "done": self._budget_used(running=False),
            },
        )
        if len(self.slots) == 1:
            self._worker(self.slots[0])
        else:
            threads = [
                threading.Thread(target=self._worker_guarded, args=(slot,), name=f"slot-{slot.index}")
                for slot in self.slots
            ]
            for th in threads:
                th.start()
            try:
                while any(th.is_alive() for th in threads):
                    for th in threads:
                        th.join(timeout=0.2)
            except KeyboardInterrupt:
                self._stop.set()
                for th in threads:
                    th.join()
                raise
            if getattr(self, "_thread_error", None) is not None:
                raise self._thread_error
        if self.o.confirm_rounds > 0:
            self.confirm()
        return self.result()

    def _worker_guarded(self, slot: Slot) -> None:
        try:
            self._worker(slot)
        except BaseException as exc:
            self._thread_error = exc
            self._stop.set()

    def _budget_used(self, *, running: bool = True, trials: list | None = None) -> int:
        from optuna.trial import TrialState

        used = 0
        for t in self.study.get_trials(deepcopy=False) if trials is None else trials:
            if t.state == TrialState.RUNNING and running:
                used += 1
            elif "duplicate_of" in t.user_attrs:
                continue  # reused, not launched
            elif t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
                t.state == TrialState.FAIL and _storage.is_config_failure(t)
            ):
                used += 1
        return used

    def _worker(self, slot: Slot) -> None:
        while not self._stop.is_set():
            with self._ask_lock:
                _storage.fail_lost_trials(self.study)
                trials = self.study.get_trials(deepcopy=False)
                if self._budget_used(trials=trials) >= self.o.trials:
                    return
                if self._reproposals >= MAX_REPROPOSALS:
                    if not self._converged:  # said once, though every slot's worker stops here
                        self._converged = True
                        self.on_event(
                            "converged", {"reproposals": self._reproposals, "done": self._budget_used(running=False)}
                        )
                    return
                self._enqueue_neighbour(trials)
                with warnings.catch_warnings():
                    warnings.simplefilter(
                        "ignore", UserWarning
                    )  # "heartbeat is meant for optimize()": we beat ourselves
                    trial = self.study.ask()
                trial.set_user_attr("worker", {**_storage.worker_identity(), "slot": slot.index})
            with _storage.Heartbeat(self.storage, trial._trial_id):
                try:
                    self._run_trial(trial, slot)
                except KeyboardInterrupt:
                    self._interrupted(trial)
                    raise
            if self._stop.is_set():
                return

    @property
    def local_budget(self) -> int:
        """Trials of the local phase this study runs (0 for random search and Pareto studies)."""
        from servetune.tuner._local import local_budget

        if self.o.sampler != "tpe" or len(self.objectives) > 1:
            return 0
        return (
            local_budget(len(self.space.params), self.o.trials)
            if self.o.local_trials is None
            else max(0, self.o.local_trials)
        )

    def _enqueue_neighbour(self, trials: list) -> None:
        """The local phase (`_local`): queue a one-field change of the best finished trial, until
        `local_budget` such trials exist. Nothing while another queued trial waits (baselines, retries).
        `trials`: the study's trials, as just read."""
        from optuna.trial import TrialState

        from servetune.tuner import _local

        budget = self.local_budget
        if not budget:
            return
        if (
            any(t.state == TrialState.WAITING for t in trials)
            or sum(t.user_attrs.get("source") == "local" for t in trials) >= budget
        ):
            return
        sign = 1.0 if self.objectives[0].direction == "maximize" else -1.0
        finished = [
            t
            for t in trials
            if t.state == TrialState.COMPLETE
            and t.values
            and _full_values(t) is not None
            and all(v <= 0 for v in t.user_attrs.get("constraints") or [])
        ]
        if not finished:
            return
        incumbent = max(finished, key=lambda t: sign * t.values[0])
        rng = random.Random(f"{self.o.seed}-{len(trials)}") if self.o.seed is not None else random.Random()
        space = {n: p.distribution for n, p in self.space.params.items()}
        start = _full_values(incumbent)
        values = _local.propose(space, start, [v for t in trials if (v := _full_values(t)) is not None], rng)
        if values is not None:
            # fields the incumbent left to SGLang stay unset where the neighbour keeps their value, so
            # it differs from the incumbent's launch in one field, and a winner's preset sets only that
            auto = sorted(n for n in incumbent.user_attrs.get("auto") or [] if values[n] == start[n])
            self.study.enqueue_trial(
                encode_params(self.space, values),
                user_attrs={"source": "local", "local_of": incumbent.number, "auto": auto},
            )

    def _effective_params(
        self, params: dict[str, Any], fixed: dict[str, Any], env: dict[str, str], server_info: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A baseline's full config in the space, from what the server reported (`_local.effective_params`)."""
        from servetune.tuner import _local

        space = {n: p.distribution for n, p in self.space.params.items()}
        known = {**{k: v for k, v in fixed.items() if v is not None}, **params}
        defaults = {
            n: env[n]
            if n in env
            else getattr((self.catalog.env if n.startswith("SGLANG_") else self.catalog.fields).get(n), "default", None)
            for n in space
        }
        return _local.effective_params(space, known, server_info, defaults)

    def _interrupted(self, trial) -> None:
        from optuna.trial import TrialState

        failure = {"class": "interrupted", "message": "stopped by Ctrl-C; a retry was queued", "log_tail": ""}
        trial.set_user_attr("failure", failure)
        self.study.tell(trial, state=TrialState.FAIL)
        _storage.retry_lost_trial(self.study, self.study._storage.get_trial(trial._trial_id))
        self.on_event(
            "trial",
            {
                "number": trial.number,
                "state": "FAIL",
                "failure": failure,
                "source": trial.user_attrs.get("source", "sampler"),
                "done": self._budget_used(running=False),
                "total": self.o.trials,
            },
        )

    def _run_trial(self, trial, slot: Slot) -> None:

        source = trial.user_attrs.get("source", "sampler")
        if source in SOURCES_BASELINE:
            fixed_params = self.study._storage.get_trial(trial._trial_id).system_attrs.get("fixed_params") or {}
            params = suggest(trial, self.space, only=fixed_params)
            layer: dict[str, Any] = {}
        else:
            params = suggest(trial, self.space)
            auto = set(trial.user_attrs.get("auto") or ())  # a local trial: left to SGLang as in its incumbent
            layer = {k: v for k, v in params.items() if v is not None and k not in auto}
            trial.set_user_attr("source", source)
        trial.set_user_attr("layer", layer)
        trial.set_user_attr("params", params)  # real values (Optuna stores an ordinal choice's index)
        trial_dir = self.run_dir / f"trial-{trial.number:04d}"
        trial.set_user_attr("run_dir", str(trial_dir.resolve()))
        self.on_event("trial_start", {"number": trial.number, "source": source, "params": params, "slot": slot.index})
        try:
            res = self.resolve(layer, use_rules=source != "defaults")
        except ConflictError as exc:
            return self._fail(trial, Failure("require", exc.message, "\n".join(exc.notes)))
        argv, env = list(res.argv()), dict(res.env())
        h = config_hash(argv, env)
        trial.set_user_attr("config_hash", h)
        trial.set_user_attr("argv", argv)
        trial.set_user_attr("env", env)

        prior = self._same_config(h, trial.number)
        with self._ask_lock:
            self._reproposals = self._reproposals + 1 if prior is not None and source not in SOURCES_BASELINE else 0
        if prior is not None:
            return self._reuse(trial, prior)

        # The pruner is asked at a few checkpoints only (every twelfth of the run): each ask reads
        # the study, and on a small box that work would slow the benchmark client it shares the
        # CPU with. It is asked only once the steady window holds a full wave (`window_ready`, `MIN_WINDOW_WAVES`).
        from servetune.tuner._pruning import Checkpoints

        points = Checkpoints(
            self.requests, self.workload.max_concurrency, first_wave=self.objectives[0].direction == "maximize"
        )

        def should_stop(step: int, partial: Any) -> bool:
            if self._stop.is_set():
                return True
            if not self._prunable or not points.grid or step < points.grid[0]:
                return False
            from servetune.tuner.objectives import flatten_metrics

            flat = flatten_metrics(partial)
            checkpoint = points.due(step, flat)
            value = self.objectives[0].value(flat)
            if checkpoint is None or value is None:
                return False
            trial.report(value, checkpoint)
            if not trial.should_prune():
                return False
            trial.set_user_attr(
                "pruned_at", {"step": checkpoint, "value": value, "steady_completed": flat.get("steady_completed")}
            )
            return True

        m = measure(
            res,
            workload=self.workload,
            slot=slot,
            run_dir=trial_dir,
            requests=self.requests,
            sglang_cmd=self.o.sglang_cmd,
            client=self.o.client,
            startup_timeout_s=self.o.startup_timeout_s,
            should_stop=should_stop,
        )
        trial.set_user_attr("timing", {"launch_s": round(m.launch_s, 3), "bench_s": round(m.bench_s, 3)})
        if self._stop.is_set() and (m.stopped_early or m.failure is not None):
            raise KeyboardInterrupt
        if m.failure is not None:
            if m.failure.cls in ("bad_command", "wrong_server") and source in SOURCES_BASELINE:
                self._fail(trial, m.failure)
                raise TuningError(
                    f"the baseline launch failed ({m.failure.cls}): {m.failure.message}",
                    help="check --sglang-cmd and that SGLang is installed; every trial would fail the same way",
                    notes=[f"log tail:\n{m.failure.log_tail}"] if m.failure.log_tail else (),
                )
            return self._fail(trial, m.failure)
        assert m.metrics is not None
        if source in SOURCES_BASELINE and self.local_budget:
            fixed = trial.user_attrs.get("fixed") or {}
            trial.set_user_attr("effective_params", self._effective_params(params, fixed, env, m.server_info))
            trial.set_user_attr("auto", sorted(n for n, v in fixed.items() if v is None))
        return self._tell_measured(trial, m)

    @property
    def _prunable(self) -> bool:
        return self.o.prune and len(self.objectives) == 1

    def _tell_measured(self, trial, m: Measurement) -> None:
        from optuna.trial import TrialState

        metrics = m.metrics or {}
        trial.set_user_attr("metrics", metrics)
        self._constrain(trial, metrics)
        if m.stopped_early:
            self.study.tell(trial, state=TrialState.PRUNED)
            return self._emit(trial.number)
        values = [ob.value(metrics) for ob in self.objectives]
        if any(v is None for v in values):
            missing = [ob.metric for ob, v in zip(self.objectives, values) if v is None]
            return self._fail(trial, Failure("bench_error", f"the benchmark did not report {', '.join(missing)}"))
        self.study.tell(trial, values)
        self._emit(trial.number)

    def _constrain(self, trial, metrics: dict[str, Any]) -> None:
        """SLO violations (<= 0 met) in user_attrs, and as Optuna constraints for the sampler."""
        values = [s.violation(metrics) for s in self.slos]
        trial.set_user_attr("constraints", values)
        if hasattr(trial, "set_constraint"):
            for slo, value in zip(self.slos, values):
                trial.set_constraint(f"slo {slo}", value)

    def _fail(self, trial, failure: Failure) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("failure", failure.as_dict())
        self.study.tell(trial, state=TrialState.FAIL)
        self._emit(trial.number)

    def _same_config(self, h: str, number: int):
        from optuna.trial import TrialState

        for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        ):
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
            return self._fail(
                trial,
                Failure(
                    f.get("class", "crash"),
                    f"same config as failed trial {prior.number}: {f.get('message', '')}",
                    f.get("log_tail", ""),
                ),
            )
        trial.set_user_attr("metrics", prior.user_attrs.get("metrics"))
        self._constrain(trial, prior.user_attrs.get("metrics") or {})
        if prior.state == TrialState.PRUNED:
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, list(prior.values))
        self._emit(trial.number)

    def _emit(self, number: int) -> None:
        t = self.study._storage.get_trial(
            self.study._storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number)
        )
        s = summarize_trial(t, self.objectives, self.slos, self.space.as_dict())
        best = self._best_so_far()
        self.on_event(
            "trial",
            {
                "number": number,
                "state": s.state,
                "values": s.values,
                "failure": s.failure,
                "feasible": s.feasible,
                "params": s.params,
                "source": s.source,
                "duplicate_of": t.user_attrs.get("duplicate_of"),
                "best": None if best is None else {"number": best.number, "values": best.values},
                "done": self._budget_used(running=False),
                "total": self.o.trials,
            },
        )

    def _best_so_far(self) -> TrialSummary | None:
        space = self.space.as_dict()
        trials = [summarize_trial(t, self.objectives, self.slos, space) for t in self.study.get_trials(deepcopy=False)]
        return pick_best(trials, self.objectives)

    # ---------------------------------------------------------------- confirmation

    def confirm(self) -> dict[str, Any] | None:
        """Re-measure the finalists interleaved with the rules baseline (B F1 .. Fk, repeated)."""
        space = self.space.as_dict()
        trials = [summarize_trial(t, self.objectives, self.slos, space) for t in self.study.get_trials(deepcopy=False)]
        baseline = _baseline(trials, "rules") or _baseline(trials, "defaults")
        if baseline is None:
            self.on_event("confirm_skip", {"why": "the baseline has no measurement (it failed)"})
            return None
        ranked = rank_feasible(trials, self.objectives)
        if baseline.feasible and baseline.values:
            # a finalist must have beaten the baseline in the study: one ranked below it would
            # only win the re-measurement by noise
            ranked = ranked[: ranked.index(baseline)] if baseline in ranked else ranked
        finalists, seen = [], {baseline.config_hash}
        for t in ranked:
            if t.config_hash in seen:
                continue
            seen.add(t.config_hash)
            finalists.append(t)
            if len(finalists) >= self.o.finalists:
                break
        if not finalists:
            self.on_event("confirm_skip", {"why": "no feasible trial beats or differs from the baseline"})
            return None
        objective = self.objectives[0]
        order = [baseline, *finalists]
        values: dict[int, list[float | None]] = {t.number: [] for t in order}
        failures: dict[int, list[str]] = {t.number: [] for t in order}
        for rnd in range(self.o.confirm_rounds):
            for t in order:
                self.on_event("confirm", {"round": rnd + 1, "rounds": self.o.confirm_rounds, "trial": t.number})
                res = self.resolve(t.layer, use_rules=t.source != "defaults")
                m = measure(
                    res,
                    workload=self.workload,
                    slot=self.slots[0],
                    run_dir=self.run_dir / "confirm" / f"r{rnd + 1}-trial-{t.number:04d}",
                    requests=self.requests,
                    sglang_cmd=self.o.sglang_cmd,
                    client=self.o.client,
                    startup_timeout_s=self.o.startup_timeout_s,
                    should_stop=lambda step, partial: self._stop.is_set(),
                )
                if self._stop.is_set():
                    raise KeyboardInterrupt
                v = objective.value(m.metrics) if m.metrics else None
                values[t.number].append(v)
                if m.failure is not None:
                    failures[t.number].append(m.failure.cls)
        base_vals = values[baseline.number]
        out_finalists = []
        for t in finalists:
            ratios = [f / b for f, b in zip(values[t.number], base_vals) if f is not None and b]
            out_finalists.append(
                {
                    "trial": t.number,
                    "values": values[t.number],
                    "failures": failures[t.number],
                    "ratios": ratios,
                    **_spread(ratios),
                }
            )
        better = (lambda r: r > 1.0) if objective.direction == "maximize" else (lambda r: r < 1.0)
        usable = [f for f in out_finalists if f["median"] is not None and not f["failures"]]
        usable.sort(key=lambda f: f["median"], reverse=objective.direction == "maximize")
        chosen = usable[0] if usable and better(usable[0]["median"]) else None
        record = {
            "objective": objective.name,
            "direction": objective.direction,
            "rounds": self.o.confirm_rounds,
            "baseline_trial": baseline.number,
            "baseline_values": base_vals,
            "baseline_failures": failures[baseline.number],
            "finalists": out_finalists,
            "chosen_trial": chosen["trial"] if chosen else baseline.number,
            "chosen_ratio": chosen["median"] if chosen else 1.0,
            "note": "" if chosen else "no finalist beat the baseline when re-measured; the baseline is kept",
        }
        self.study.set_user_attr("confirmation", record)
        self.on_event("confirmed", record)
        return record

    def result(self) -> TuneResult:
        return load_result(self.study, self.storage_url)


# -------------------------------------------------------------------- reading a study back


def _constraints(frozen_trial) -> list[float]:
    return list(frozen_trial.user_attrs.get("constraints") or [])


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
    return TrialSummary(
        number=t.number,
        state=state,
        source=t.user_attrs.get("source", "sampler"),
        params=decode_params(t.params, t.distributions, space or {}),
        fixed=dict(t.user_attrs.get("fixed") or {}),
        values=list(t.values) if t.values is not None else None,
        metrics=t.user_attrs.get("metrics"),
        failure=_storage.failure_of(t),
        feasible=feasible,
        config_hash=t.user_attrs.get("config_hash"),
        layer=dict(t.user_attrs.get("layer") or {}),
        note=note,
    )


def _objectives_from_meta(meta: dict[str, Any]) -> tuple[Objective, ...]:
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


def _baseline(trials: list[TrialSummary], source: str) -> TrialSummary | None:
    measured = [t for t in trials if t.source == source and t.state == "COMPLETE"]
    if measured:
        return measured[-1]
    any_ = [t for t in trials if t.source == source]
    return any_[-1] if any_ else None


def load_result(study, storage_url: str) -> TuneResult:
    """Read a study back from storage into a `TuneResult`."""
    meta = study.user_attrs.get("servetune") or {}
    objectives = _objectives_from_meta(meta)
    if not objectives:
        raise TuningError(f"study {study.study_name!r} was not made by servetune tune (no metadata)")
    trials = [summarize_trial(t, objectives, (), meta.get("space") or {}) for t in study.get_trials(deepcopy=False)]
    confirmation = study.user_attrs.get("confirmation")
    best = pick_best(trials, objectives)
    if confirmation:
        chosen = next((t for t in trials if t.number == confirmation.get("chosen_trial")), None)
        best = chosen or best
    baseline = _baseline(trials, "rules")
    return TuneResult(
        study=study.study_name,
        storage=storage_url,
        objectives=meta.get("objectives", []),
        slos=meta.get("slos", []),
        trials=trials,
        best=best,
        baseline=baseline,
        defaults=_baseline(trials, "defaults"),
        pareto=[t.number for t in pareto_front(trials, objectives)] if len(objectives) > 1 else [],
        confirmation=confirmation,
        meta=meta,
    )


def _spread(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"median": None, "min": None, "max": None, "stdev": None}
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
    }


def _preset_tune(preset: str | None) -> dict[str, Any]:
    """The `tune:` block of a preset (a shipped name or a file), or {}."""
    if not preset:
        return {}
    from servetune.presets import load_preset

    loaded, _, _ = load_preset(preset)
    return dict(loaded.tune)


def _full_values(t) -> dict[str, Any] | None:
    """A trial's full config in the space (real values): a baseline's `effective_params`, else
    its sampled `params` (None while unknown)."""
    if t.user_attrs.get("source") in SOURCES_BASELINE:
        return t.user_attrs.get("effective_params")
    return t.user_attrs.get("params")


def _jsonable(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        try:
            return obj.model_dump(mode="json")
        except Exception:
            return str(obj)
    if isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return str(obj)


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
