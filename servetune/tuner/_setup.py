"""Setting a study up, once per worker process: the `Context` (all the reading), the space, the
GPU slots, the sampler and pruner, and the study itself (created with its metadata and the two
baselines enqueued, or loaded and checked for a compatible resume)."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.errors import SpecError, TuningError
from servetune.launch import runs_root
from servetune.secrets import is_secret_field, is_secret_name, redact
from servetune.tuner import _storage
from servetune.tuner._evaluate import Slot
from servetune.tuner._options import TuneOptions
from servetune.tuner._params import baseline_params, encode_params, ordinal_values
from servetune.tuner._result import TrialSummary, summarize_trial
from servetune.tuner.events import LostTrials, VoidRetries
from servetune.tuner.objectives import CAPACITY, Objective, parse_constraint, parse_objectives
from servetune.tuner.space import ResolvedSpace, build_space, default_space_name, load_shipped_space

if TYPE_CHECKING:
    from servetune.bench.slo import LatencySlo, MetricBound
    from servetune.context import Context, Resolution
    from servetune.runner import CapacitySearch
    from servetune.schema.catalog import Catalog
    from servetune.schema.workload import Workload


@dataclass
class StudySetup:
    """What `prepare` built; the workers and the confirmation read it, nothing re-reads files."""

    options: TuneOptions
    ctx: Context
    """Facts, catalog, rules, preset and pins, read once; every trial resolves from it."""
    workload: Workload
    objectives: tuple[Objective, ...]
    slos: tuple[MetricBound, ...]
    rules_res: Resolution
    """The `rules` baseline's resolution (the rules' launch, or SGLang's with `--no-rules`)."""
    space: ResolvedSpace
    slots: list[Slot]
    study_name: str
    run_dir: Path
    storage_url: str
    storage: Any
    study: Any
    """The Optuna study (created, or loaded for a resume)."""
    latency_slos: tuple[LatencySlo, ...] = ()
    """`--objective capacity`: the latency SLOs the capacity is searched against."""
    search: CapacitySearch | None = None
    """`--objective capacity`: the search's settings (each trial's start rate: the floor, or this one's)."""

    @property
    def confirm_search(self) -> CapacitySearch | None:
        """The confirmation's capacity search: the study's, with `--confirm-step-seconds` (default: the
        study's `--step-seconds`)."""
        if self.search is None:
            return None
        return dataclasses.replace(self.search, step_s=self.options.confirm_step_seconds or self.search.step_s)

    @property
    def capacity(self) -> bool:
        """Each trial is a capacity search (`--objective capacity`)."""
        return self.search is not None

    @property
    def slo_texts(self) -> list[str]:
        """The `--slo` bounds as stored: latency SLOs for a capacity study, else the constraints."""
        return [str(x) for x in (self.latency_slos if self.capacity else self.slos)]

    @property
    def catalog(self) -> Catalog:
        """The target SGLang version's field catalog."""
        return self.ctx.catalog

    @property
    def requests(self) -> int:
        """Measured requests per trial: `--requests`, else the workload's `tune_requests`, else its `requests`."""
        return self.options.requests or self.workload.tune_requests or self.workload.requests

    def resolve(self, layer: dict[str, Any], *, source: str) -> Resolution:
        """A trial's launch: `layer` at the tuner layer; the `defaults` baseline resolves without rules."""
        return self.ctx.resolve(layer or None, use_rules=False if source == "defaults" else None)

    def summaries(self) -> list[TrialSummary]:
        """Every trial of the study, read now."""
        space = self.space.as_dict()
        return [summarize_trial(t, self.objectives, self.slos, space) for t in self.study.get_trials(deepcopy=False)]


def prepare(options: TuneOptions, *, on_event: Callable[[Any], None]) -> StudySetup:
    """Read everything once, build and check the space, open or create the study."""
    import optuna

    from servetune.bench import load_workload
    from servetune.context import Context

    o = options
    if o.trials < 1:
        raise SpecError(f"--trials must be >= 1, but got {o.trials}")
    if not o.model:
        raise SpecError("a study needs a model", key_path="--model", help="e.g. servetune tune -m qwen3-8b --gpu h200")
    workload = load_workload(o.workload_or_default)
    objectives = parse_objectives(o.objective)
    latency_slos, search = _capacity(o, objectives, workload)
    slos = () if search is not None else tuple(parse_constraint(s) for s in o.slos)
    ctx = Context.build(o.model, **{**o.context_kwargs(), "workload": workload})
    rules_res = ctx.resolve()
    space = _space(o, ctx, workload, rules_res)
    tp = int(rules_res.requested().get("tp_size") or o.tp or 1)
    name = o.study or _slug(f"{Path(str(o.model)).name}-{o.gpu or 'local'}-{workload.name}")
    run_dir = Path(o.run_dir) if o.run_dir else runs_root() / "tune" / name
    if o.storage:
        _storage.check_storage_url(o.storage)  # refused before any directory is made
    made = _make_dirs(run_dir)
    storage_url = o.storage or f"sqlite:///{(run_dir / 'study.db').resolve()}"
    try:
        storage = _storage.open_storage(storage_url)
    except BaseException:
        _remove_empty(made)  # a refused study leaves no directory behind
        raise
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    setup = StudySetup(
        options=o,
        ctx=ctx,
        workload=workload,
        objectives=objectives,
        slos=slos,
        rules_res=rules_res,
        space=space,
        slots=_slots(o.gpus, tp),
        study_name=name,
        run_dir=run_dir,
        storage_url=storage_url,
        storage=storage,
        study=None,
        latency_slos=latency_slos,
        search=search,
    )
    sampler, pruner = _sampler(o, slos), _pruner(o, objectives, workload)
    directions = [obj.direction for obj in objectives]
    try:
        setup.study = optuna.create_study(
            storage=storage, study_name=name, directions=directions, sampler=sampler, pruner=pruner
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        setup.study = optuna.load_study(storage=storage, study_name=name, sampler=sampler, pruner=pruner)
        created = False
        _check_compatible(setup)
    if created:
        for key, value in _meta(setup).items():
            setup.study.set_user_attr(key, value)
        if o.enqueue_baselines:
            _enqueue_baselines(setup)
    lost = _storage.fail_lost_trials(setup.study, setup.storage)
    if lost:
        on_event(LostTrials(tuple(lost)))
    void = _storage.requeue_void_retries(setup.study)
    if void:
        on_event(VoidRetries(tuple(void)))
    return setup


def _make_dirs(path: Path) -> list[Path]:
    """`mkdir -p path`; the directories it made, deepest first."""
    made = []
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        made.append(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(made)
        raise SpecError(f"cannot create the study directory {path}: {exc.strerror or exc}") from None
    return made


def _remove_empty(made: list[Path]) -> None:
    """Remove the directories `_make_dirs` made, deepest first, while they are empty."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


def _capacity(o: TuneOptions, objectives: tuple[Objective, ...], workload: Workload):
    """(latency SLOs, search settings) of a capacity study; ((), None) for the others."""
    if objectives[0].name != CAPACITY:
        return (), None
    from servetune.bench.slo import parse_slos

    slos = parse_slos(o.slos)
    if not slos:
        raise SpecError(
            "--objective capacity needs at least one latency --slo",
            key_path="--slo",
            help="e.g. --objective capacity --slo p99_ttft_ms<=1000 --slo p99_tpot_ms<=50",
        )
    from servetune.runner import CapacitySearch

    search = CapacitySearch.from_options(o, workload)
    checks = {"--start-rate": search.start_rate, "--resolution": o.resolution, "--step-seconds": o.step_seconds,
              "--soak-horizon": o.soak_horizon, "--backlog-seconds": o.backlog_seconds}  # fmt: skip
    for option, value in checks.items():
        if not value > 0:
            raise SpecError(f"{option} must be positive, but got {value:g}", key_path=option)
    if not 0.5 <= o.confidence < 1.0:
        raise SpecError(f"0.5 <= --confidence < 1 must hold, but got {o.confidence:g}", key_path="--confidence")
    if o.step_warmup_seconds < 0 or o.warmup_wave < 0 or o.confirm_soak_seconds < 0:
        raise SpecError("--step-warmup-seconds, --warmup-wave and --confirm-soak-seconds must not be negative")
    return slos, search


def capacity_meta(s: StudySetup) -> dict[str, Any] | None:
    """What a capacity study stores about its search: the SLOs and the settings (None: not one)."""
    if s.search is None:
        return None
    return {"slos": s.slo_texts, "search": s.search.record()}


def preset_tune(preset: Any) -> dict[str, Any]:
    """The `tune:` block of a preset (a loaded `Preset`, a shipped name or a file), or {}."""
    if not preset:
        return {}
    if isinstance(preset, (str, Path)):
        from servetune.presets import load_preset

        preset, _, _ = load_preset(preset)
    return dict(preset.tune)


def _space(o: TuneOptions, ctx: Context, workload: Workload, rules_res: Resolution) -> ResolvedSpace:
    from servetune.bench.workloads import list_workloads
    from servetune.presets import preset_files

    from_preset = preset_tune(ctx.preset)
    default = None
    if not workload.tune and not from_preset:
        label = default_space_name(workload.name, workload.kind)
        default = (label, load_shipped_space(label))
    shipped = []
    if o.workload_or_default in {w.name for w in list_workloads()}:
        shipped.append("workload")
    if isinstance(o.preset, str) and o.preset in preset_files():
        shipped.append("preset")
    return build_space(
        catalog=ctx.catalog,
        pinned=rules_res.pinned,
        default=default,
        workload_tune=workload.tune,
        preset_tune=from_preset,
        space_file=o.space_file,
        space_sets=o.space_sets,
        shipped_blocks=shipped,
    )


def _slots(gpus_option: tuple[str, ...], tp: int) -> list[Slot]:
    gpus = [g.strip() for g in gpus_option if g.strip()]
    if not gpus:
        return [Slot(0)]
    if len(gpus) % tp:
        raise SpecError(
            f"--gpus lists {len(gpus)} GPU(s), which does not split into sets of tp={tp}",
            help=f"give a multiple of {tp} GPUs, e.g. --gpus {','.join(map(str, range(tp * 2)))}",
        )
    return [Slot(i, tuple(gpus[i * tp : (i + 1) * tp])) for i in range(len(gpus) // tp)]


def _sampler(o: TuneOptions, slos: tuple[MetricBound, ...]):
    import optuna

    if o.sampler == "random":
        return optuna.samplers.RandomSampler(seed=o.seed)
    if o.sampler != "tpe":
        raise SpecError(f"unknown sampler {o.sampler!r}", help="use tpe or random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        from servetune.tuner._sampler import make_tpe_sampler

        # optuna >= 5 takes constraints per trial (`Trial.set_constraint`), older ones a constraints_func
        legacy = slos and not hasattr(optuna.trial.Trial, "set_constraint")
        return make_tpe_sampler(
            o.seed, n_startup_trials=o.n_startup_trials, constraints_func=_constraints if legacy else None
        )


def _constraints(frozen_trial) -> list[float]:
    return list(frozen_trial.user_attrs.get("constraints") or [])


def _pruner(o: TuneOptions, objectives: tuple[Objective, ...], workload: Workload):
    import optuna

    if not o.prune or len(objectives) > 1 or objectives[0].name == CAPACITY:
        return optuna.pruners.NopPruner()  # a capacity trial is cut by its search's floor, not by Optuna
    from servetune.tuner._pruning import BestRelativePruner

    return BestRelativePruner(concurrency=workload.max_concurrency)


def _meta(s: StudySetup) -> dict[str, Any]:
    o = s.options
    return {
        "servetune": {
            "model": str(o.model),
            "gpu": o.gpu,
            "workload": s.workload.name,
            "requests": s.requests,
            "sglang_version": s.catalog.sglang_version,
            "objectives": [
                {"name": ob.name, "metric": ob.metric, "direction": ob.direction, "unit": ob.unit}
                for ob in s.objectives
            ],
            "slos": s.slo_texts,
            "capacity": capacity_meta(s),
            "space": s.space.as_dict(),
            "dropped": s.space.dropped,
            "pins": redact({"sets": list(o.sets), "envs": list(o.envs)}),  # servetune.secrets
            "preset": o.preset,
            "preset_set": _preset_values(s),
            "facts": _jsonable(s.rules_res.facts),
            "hardware": _jsonable(s.rules_res.hardware),
        }
    }


def _preset_values(s: StudySetup) -> dict[str, Any] | None:
    """The values the study's `--preset` put under every trial, secrets left out: `--out` writes them
    beneath the winner's, so the written preset launches what was measured (a secret is passed again
    with --set/--env, never stored)."""
    preset = s.ctx.preset
    if preset is None:
        return None
    return _jsonable({k: v for k, v in preset.set.items() if not (is_secret_name(k) or is_secret_field(k))})


def _check_compatible(s: StudySetup) -> None:
    meta = s.study.user_attrs.get("servetune") or {}
    theirs = [x.get("name") for x in meta.get("objectives", [])]
    mine = [ob.name for ob in s.objectives]
    problems = []
    if theirs and theirs != mine:
        problems.append(f"objectives {theirs} vs {mine}")
    if meta.get("slos") is not None and meta.get("slos") != s.slo_texts:
        problems.append(f"SLOs {meta.get('slos')} vs {s.slo_texts}")
    theirs_search = (meta.get("capacity") or {}).get("search")
    mine_search = (capacity_meta(s) or {}).get("search")
    if theirs_search != json.loads(json.dumps(mine_search)):
        problems.append(f"capacity search {theirs_search} vs {mine_search}")
    if meta.get("space") is not None and meta.get("space") != json.loads(json.dumps(s.space.as_dict())):
        problems.append("search space differs")
    if meta.get("workload") not in (None, s.workload.name):
        problems.append(f"workload {meta.get('workload')!r} vs {s.workload.name!r}")
    if meta.get("requests") not in (None, s.requests):
        problems.append(f"{meta.get('requests')} vs {s.requests} requests per trial")
    stored_as_categories = _categorical_ordinals(s)
    if stored_as_categories:
        problems.append(
            f"{', '.join(stored_as_categories)} stored as categories (a study made before numeric "
            "choices were searched through an ordered index)"
        )
    if problems:
        raise TuningError(
            f"study {s.study_name!r} in {s.storage_url} was created with other settings: {'; '.join(problems)}",
            help="resume with the same options, or pass a new --study NAME",
        )


def _categorical_ordinals(s: StudySetup) -> list[str]:
    """Ordinal choices (`ordinal_values`) that this study's trials store as categories."""
    from optuna.distributions import CategoricalDistribution

    names = {n for n, p in s.space.params.items() if ordinal_values(p.distribution) is not None}
    old = set()
    for t in s.study.get_trials(deepcopy=False):
        old |= {n for n in names if isinstance(t.distributions.get(n), CategoricalDistribution)}
    return sorted(old)


def _enqueue_baselines(s: StudySetup) -> None:
    defaults_res = s.resolve({}, source="defaults")
    for source, res in (("rules", s.rules_res), ("defaults", defaults_res)):
        decided = {**res.requested(), **res.env()}
        params, fixed = baseline_params(s.space, decided)
        # an ordinal choice is stored as its index (`encode_params`); values outside the space stay under `fixed`
        s.study.enqueue_trial(encode_params(s.space, params), user_attrs={"source": source, "fixed": fixed})


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")[:80] or "study"


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
