"""A capacity study's server model: measure the baseline once, model it, spend launches checking the model.

Once the baselines have run their capacity searches, `update` fits a `ServerModel` (`bench.servermodel`)
on the best baseline's steps (their `StepProfile`s: per-request TPOT against the running batch and the
prefills during each request's life, SGLang's telemetry of running, queued and KV usage), then

- **prunes the space by evidence** (`evidence`): memory fraction is frozen when KV token usage stayed
  far below 1 (the pool never bound); where the baseline's batch never reached its running limit and
  nothing queued, a running limit or decode-graph size above twice the largest running batch it ever
  ran is cut off (it cannot bind on this server and traffic). Each
  change is stored with its reason (`STUDY_ATTR`) and applied to every later trial (`search_space`);
- **seeds the first sampled trial** with the config the model predicts best over the space's running
  limits and graph sizes (the baseline's other values kept), enqueued with `source: "model"`;
- **probes** instead, when the model predicts no gain the search resolves (`--resolution`) and the
  baseline's batch never met a limit: a running limit at the 90th percentile of the batch SGLang logged at
  the baseline's capacity (`probe`, `source: "probe"`), which binds in its bursts only. Once the probe ran,
  the model is refitted on both searches, each read at its own running limit (`_refit`: a search of an
  unbounded batch cannot tell decode growth from prefill stall, a pinned batch can), and the refit's seed
  is enqueued;
- **predicts every trial** (`prediction`): its running limit and graph size through the model, stored
  beside its measured capacity, so `tune report` prints the model's error.

No config is hand-picked: the seed comes from the measurement alone. A study whose space holds
neither a running limit nor a graph size, or whose baselines left fewer than two readable steps,
gets no model (the reason is stored) and searches as before.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from servetune.schema.space import ChoiceDistribution, Distribution, FloatDistribution, IntDistribution
from servetune.tuner._options import SOURCES_BASELINE
from servetune.tuner._params import encode_params, ordinal_values

if TYPE_CHECKING:
    from servetune.bench.servermodel import ServerModel
    from servetune.tuner._setup import StudySetup
    from servetune.tuner.space import ResolvedSpace

STUDY_ATTR = "server_model"
"""The study user attribute holding the model, its evidence and its seed."""
RUNNING = ("max_running_requests",)
"""The running-limit field."""
GRAPH = ("cuda_graph_max_bs_decode", "cuda_graph_max_bs")
"""The decode CUDA-graph size field (0.5.23's name, then 0.5.17's)."""
MEMORY = ("mem_fraction_static",)
"""The memory-fraction field."""
UNUSED_KV = 0.5
"""KV token usage below this in every step: the pool never bound, memory fraction is frozen."""
HEADROOM = 2.0
"""A running limit or graph size above this many times the largest running batch seen is cut off."""
LIMIT_GRID = 40
"""Running limits the seed's search tries across a log-scale integer range."""
SCREEN_REACH = 0.9
"""The seed's search reads every config with the model's first, cheaper reading (`ServerModel.capacity`,
`screen`), then reads in full those within this share of the best (at most `SCREEN_TOP`): on the stand-in
(`benchmarks/model_error.py --seed 2`) the full reading lowered configs with a running limit by 0-4% (the
unbounded baseline, not in the grid, by 13%)."""
SCREEN_TOP = 12


def field_of(space: Mapping[str, Any], names: Sequence[str]) -> str | None:
    """The first of `names` the space searches."""
    return next((n for n in names if n in space), None)


def load(study) -> dict[str, Any] | None:
    """The study's model record (None before the baselines ran, or without a capacity objective)."""
    record = study.user_attrs.get(STUDY_ATTR)
    return record if isinstance(record, dict) else None


def model_of(record: Mapping[str, Any] | None) -> ServerModel | None:
    """The `ServerModel` a record holds, or None."""
    from servetune.bench.servermodel import ServerModel

    if not record or not record.get("model"):
        return None
    return ServerModel(**record["model"])


def search_space(
    space: ResolvedSpace, record: Mapping[str, Any] | None, *, keep: Collection[str] = ()
) -> ResolvedSpace:
    """`space` with the record's evidence applied: frozen fields left out, cut ranges narrowed. A field
    in `keep` keeps its full range where it was narrowed: a local trial's field left to SGLang carries
    its incumbent's effective value, which may lie past the cut (a running limit of 267 past 152)."""
    import dataclasses

    if not record or not record.get("evidence"):
        return space
    params = dict(space.params)
    for change in record["evidence"]:
        name = change["field"]
        if name not in params:
            continue
        if change["action"] == "frozen":
            params.pop(name)
        elif change["action"] == "narrowed" and name not in keep:
            dist = _narrowed(params[name].distribution, change["to"])
            if dist is not None:
                params[name] = dataclasses.replace(params[name], distribution=dist)
    return dataclasses.replace(space, params=params)


def _narrowed(dist: Distribution, high: float) -> Distribution | None:
    """`dist` with its upper end cut to `high` (an ordinal choice list keeps its values up to it, so
    a stored index still means the same value); None where it cannot be cut."""
    if isinstance(dist, (IntDistribution, FloatDistribution)):
        low, top = dist.bounds
        cut = max(low, min(top, type(low)(high)))
        return dist.model_copy(update={"bounds": (low, cut)})
    ordered = ordinal_values(dist)
    if ordered is None:
        return None
    kept = [c for c in ordered if c <= high] or [ordered[0]]
    if len(kept) < 2:
        kept = list(ordered[:2])
    return ChoiceDistribution.model_validate({"choice": kept})


def evidence(space: ResolvedSpace, model: ServerModel) -> list[dict[str, Any]]:
    """What the baseline's measurement rules out, one change per field (module docstring)."""
    out: list[dict[str, Any]] = []
    memory = field_of(space.params, MEMORY)
    if memory and model.token_usage_max is not None and model.token_usage_max < UNUSED_KV:
        out.append({
            "field": memory, "action": "frozen",
            "why": f"KV token usage peaked at {model.token_usage_max:.0%} in the baseline's search: the pool "
                   f"never bound, so the memory fraction only resizes an unused pool",
        })  # fmt: skip
    cap = HEADROOM * model.running_max
    bound = model.running_max >= model.limit(None) or model.queued
    for names, what in ((RUNNING, "running limit"), (GRAPH, "decode graph size")):
        name = field_of(space.params, names)
        change = _limit_change(space.params[name].distribution, what, model, bound, cap) if name else None
        if change is not None:
            out.append({"field": name, **change})
    return out


def _limit_change(dist: Distribution, what: str, model: ServerModel, bound: bool, cap: float) -> dict[str, Any] | None:
    """What the evidence does to a running-limit or graph-size dimension (None: nothing to say)."""
    if bound:
        return {"action": "kept", "why": f"the baseline's running batch reached its limit ({model.running_max}) or "
                                        f"requests queued: a larger {what} may bind"}  # fmt: skip
    top = _top(dist)
    if top is None or top <= cap:
        return None
    if _narrowed(dist, cap) is None:
        return {"action": "kept", "why": f"a {what} above {cap:.0f} cannot bind, but a choice list with `null` "
                                        "cannot be narrowed in a study"}  # fmt: skip
    return {
        "action": "narrowed", "to": cap, "from": top,
        "why": f"the baseline never ran more than {model.running_max} requests at once: a {what} above {cap:.0f} "
               f"({HEADROOM:g}x that) cannot bind",
    }  # fmt: skip


def _top(dist: Distribution) -> float | None:
    if isinstance(dist, (IntDistribution, FloatDistribution)):
        return float(dist.bounds[1])
    values = [c for c in dist.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return float(max(values)) if values else None


def _candidates(dist: Distribution | None) -> list[Any]:
    """The values the seed tries of one dimension: a log grid over an integer range, the choices."""
    if dist is None:
        return [None]
    if isinstance(dist, IntDistribution):
        low, high = dist.bounds
        if high - low <= LIMIT_GRID:
            return list(range(low, high + 1, dist.step))
        out = sorted(
            {int(round(low * (high / low) ** (i / (LIMIT_GRID - 1)))) for i in range(LIMIT_GRID)} | {low, high}
        )
        return [v for v in out if (v - low) % dist.step == 0] or [low, high]
    if isinstance(dist, FloatDistribution):
        low, high = dist.bounds
        return [low + (high - low) * i / 10 for i in range(11)]
    return list(dist.choices)


def predict(
    model: ServerModel,
    slos: Sequence[Any],
    values: Mapping[str, Any],
    running: str | None,
    graph: str | None,
    *,
    screen: bool = False,
) -> float:
    """The model's capacity for a config's running limit and graph size (None/absent: the baseline's);
    `screen`: its first, cheaper reading (`ServerModel.capacity`)."""
    limit = values.get(running) if running else None
    size = values.get(graph) if graph else None
    return model.capacity(slos, running_limit=limit, graph_bs=size, screen=screen)


def seed(
    model: ServerModel,
    slos: Sequence[Any],
    space: ResolvedSpace,
    baseline: Mapping[str, Any],
    *,
    ran: Sequence[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], float, list[dict[str, Any]]] | None:
    """The config the model predicts best (the baseline's values with its running limit and graph size
    replaced), its predicted capacity, and the runners-up; None when the space has neither field or no
    config beats the baseline's own prediction. `ran`: configs already measured (a probe's values): none
    of them is proposed, and the seed must beat their predictions too."""
    running = field_of(space.params, RUNNING)
    graph = field_of(space.params, GRAPH)
    if running is None and graph is None:
        return None
    limits = _candidates(space.params[running].distribution if running else None)
    graphs = _candidates(space.params[graph].distribution if graph else None)
    measured = [{**baseline, **r} for r in ran]
    own = max(predict(model, slos, v, running, graph) for v in [baseline, *measured])
    done = {(v.get(running) if running else None, v.get(graph) if graph else None) for v in measured}
    ranked = []
    for limit in limits:
        for size in graphs:
            if (
                size is not None
                and limit is not None
                and size < limit
                and (model.eager_ms is None or model.eager_ms > 0)
            ):
                continue  # a graph smaller than the running limit only costs (or its cost is unknown)
            if (limit if running else None, size if graph else None) in done:
                continue
            values = {**baseline}
            if running:
                values[running] = limit
            if graph:
                values[graph] = size
            first = predict(model, slos, values, running, graph, screen=True)
            ranked.append((first, _change(values, baseline), values))
    ranked.sort(key=lambda x: (-x[0], x[1]))
    if ranked:  # the screen reads high near a limit's ceiling: the configs within its reach read in full
        reach = ranked[0][0] * SCREEN_REACH
        ranked = [(predict(model, slos, v, running, graph), c, v) for p, c, v in ranked[:SCREEN_TOP] if p >= reach]
        ranked.sort(key=lambda x: (-x[0], x[1]))
    if not ranked or ranked[0][0] <= own * 1.0001:
        return None
    best_cap, _, best = ranked[0]
    fields = [f for f in (running, graph) if f]
    runners, seen = [], {round(best_cap, 4)}
    for c, _, v in ranked[1:]:  # configs the model cannot tell apart (a graph it never outgrows) shown once
        if round(c, 4) not in seen and len(runners) < 5:
            seen.add(round(c, 4))
            runners.append({"capacity": round(c, 4), **{f: v.get(f) for f in fields}})
    return best, best_cap, runners


def _change(values: Mapping[str, Any], baseline: Mapping[str, Any]) -> float:
    """How far a config moves from the baseline (log distance over numeric fields): ties go to the nearer."""
    out = 0.0
    for k, v in values.items():
        b = baseline.get(k)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)) and v > 0 and b > 0:
            out += abs(math.log(v / b))
        elif v != b:
            out += 1.0
    return out


# ------------------------------------------------------------------ in a study


def update(setup: StudySetup, trials: list) -> dict[str, Any] | None:
    """Fit the model once the baselines are done, store it with its evidence, enqueue its seed (or, when
    it predicts no gain, a probe); once the probe ran, refit on both and enqueue the refit's seed. The
    record stored (None: nothing new; a study without a capacity objective, or nothing to do yet)."""
    from optuna.trial import TrialState

    from servetune.bench.servermodel import ServerModel

    if not setup.capacity or not setup.options.model_seed:
        return None
    record = load(setup.study)
    if record is not None:
        return _refit(setup, trials, record)
    baselines = [t for t in trials if t.user_attrs.get("source") in SOURCES_BASELINE]
    if not baselines or any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in baselines):
        return None
    done = [t for t in baselines if t.state == TrialState.COMPLETE and t.values and t.user_attrs.get("capacity")]
    record = {}
    if not done:
        record["note"] = "no baseline measured a capacity: no model"
        setup.study.set_user_attr(STUDY_ATTR, record)
        return record
    best = max(done, key=lambda t: t.values[0])
    steps = _steps(best)
    limits = best.user_attrs.get("server_limits") or {}
    model = ServerModel.fit(
        [s.profile for s in steps if s.profile is not None], running_limit=limits.get("running"),
        graph_bs=limits.get("graph"),
    )  # fmt: skip
    record["fitted_on"] = best.number
    searched = best.user_attrs.get("capacity") or {}
    if searched.get("engine"):  # SGLang's own clock over the same search (`engineclock`), printed beside the fit
        record["engine"] = searched["engine"]
    if searched.get("stalls"):  # when its front end held arrivals from the scheduler (`stalls`)
        record["stalls"] = searched["stalls"]
    if model is None:
        record["note"] = f"trial {best.number}'s search left fewer than two readable steps: no model"
        setup.study.set_user_attr(STUDY_ATTR, record)
        return record
    slos = setup.latency_slos
    space = setup.space
    record["model"] = model.summary()
    record["evidence"] = evidence(space, model)
    running, graph = field_of(space.params, RUNNING), field_of(space.params, GRAPH)
    baseline = _baseline_values(best, space)
    own = predict(model, slos, baseline, running, graph)
    record["baseline_predicted"] = round(own, 4)
    record["baseline_measured"] = best.values[0]
    narrowed = search_space(space, record)
    found = seed(model, slos, narrowed, baseline)
    resolved = found is not None and found[1] >= own * (1.0 + setup.options.resolution)
    probed = None if resolved else probe(model, narrowed, steps, best.values[0])
    if probed is None and found is not None:
        _enqueue_seed(setup, record, found, best, narrowed, running, graph)
        return record
    record["note"] = (
        f"the model's best ({found[1]:.4g} req/s) is within the search's resolution of the baseline's {own:.4g}"
        if found is not None
        else "the model predicts no running limit or graph size above the baseline's capacity"
    )
    if probed is not None:
        values, why = probed
        record["probe"] = {"values": values, "why": why}
        _enqueue(setup, narrowed, {**baseline, **values}, values, best, "probe")
    setup.study.set_user_attr(STUDY_ATTR, record)
    return record


def _steps(trial) -> list:
    """A trial's capacity steps (`CapacityStep`), from its stored search."""
    from servetune.bench.capacity import CapacityStep

    return [CapacityStep.model_validate(s) for s in (trial.user_attrs.get("capacity") or {}).get("steps", [])]


def _enqueue_seed(setup: StudySetup, record: dict[str, Any], found, best, narrowed: ResolvedSpace,
                  running: str | None, graph: str | None, into: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Store the model's seed in `into` (default `record`; a refit after the seed keeps the first seed
    there and stores its own in the refit) and enqueue it (`source: "model"`)."""
    values, capacity, runners = found
    changed = {k: v for k, v in values.items() if k in (running, graph)}
    (record if into is None else into)["seed"] = {"values": changed, "predicted": round(capacity, 4),
                                                  "runners_up": runners}  # fmt: skip
    if "probe" not in record:
        record.pop("note", None)  # a refit's seed keeps the note that made the probe
    setup.study.set_user_attr(STUDY_ATTR, record)
    _enqueue(setup, narrowed, values, changed, best, "model")


def _enqueue(setup: StudySetup, narrowed: ResolvedSpace, values: Mapping[str, Any], changed: Mapping[str, Any],
             best, source: str) -> None:  # fmt: skip
    """Enqueue `values` (the baseline's with `changed` replaced) as a trial of `source`: the baseline's
    fields left to SGLang stay so, but for those it changes."""
    auto = sorted(n for n in best.user_attrs.get("auto") or [] if n not in changed)
    full = {k: v for k, v in values.items() if k in narrowed.params}
    setup.study.enqueue_trial(
        encode_params(narrowed, full), user_attrs={"source": source, "auto": auto, "model_of": best.number}
    )


def probe(
    model: ServerModel, space: ResolvedSpace, steps: Sequence[Any], capacity: float
) -> tuple[dict[str, Any], str] | None:
    """The probe a baseline's search calls for when its model sees no gain the search resolves, or None.

    In a search of an unbounded batch the running batch and the prefill rate rise together (the batch is
    the rate times a life), so the fit cannot tell decode growth per running request from prefill stall,
    and it reads a burst (prefills piling into the batch, which then decodes slowly) as a Poisson spread.
    A running limit at the 90th percentile of the batch SGLang ran at the baseline's capacity binds in the
    bursts only: its search pins the batch while the rate moves (the measurement the refit needs), and it
    is the config that holds a burst's prefills back (on the H200 the defaults' batch reached 39-50 in the
    top decile at their capacity; a limit of 48 sustained 1.46x their rate). None when the space has no
    running limit, the baseline's limit already bound, its steps at capacity logged no batch (no
    telemetry), or the value would not bind (at or above the largest batch it ran)."""
    running = field_of(space.params, RUNNING)
    if running is None or model.running_max >= model.limit(None) or model.queued:
        return None
    at = [s.profile for s in steps if s.met and s.profile is not None and math.isclose(s.rate, capacity, rel_tol=1e-6)]
    p90 = [p.running_p90 for p in at if p.running_p90]
    if not p90:
        return None
    value = _snapped(space.params[running].distribution, max(p90))
    if value is None or value >= model.running_max:
        return None
    why = (
        f"the model sees no gain the search resolves, but the baseline's batch burst to {max(p90)} in the top decile "
        f"at its capacity ({capacity:.4g} req/s; mean {_mean_batch(at):.0f}, peak {model.running_max}): a limit of "
        f"{value} binds in the bursts only, and its search separates decode growth from prefill stall"
    )
    return {running: value}, why


def _mean_batch(profiles: Sequence[Any]) -> float:
    return sum(p.batch_mean for p in profiles) / len(profiles)


def _snapped(dist: Distribution, value: float) -> Any:
    """`value` on a dimension's grid (an integer range's step, the nearest numeric choice); None where it is
    outside the range."""
    if isinstance(dist, IntDistribution):
        low, high = dist.bounds
        if not low <= value <= high:
            return None
        return low + int(round((value - low) / dist.step)) * dist.step
    ordered = ordinal_values(dist)
    if not ordered or not ordered[0] <= value <= ordered[-1]:
        return None
    return min(ordered, key=lambda c: abs(math.log(c / value)) if c > 0 and value > 0 else abs(c - value))


def _refit(setup: StudySetup, trials: list, record: dict[str, Any]) -> dict[str, Any] | None:
    """Once the probe ran, or else the model's seed measured a capacity: refit on the baseline's search and
    that one (each at its own running limit: a pinned batch separates decode growth from prefill stall),
    store the refit and enqueue its seed: after a probe always, after the seed only where it predicts a
    config the seed did not run at least the resolution above the seed's measured capacity. None before
    (or without) either, or once refitted."""
    from optuna.trial import TrialState

    from servetune.bench.servermodel import Search, ServerModel

    if "refit" in record:
        return None
    of = "probe" if "probe" in record else "model" if "seed" in record else None
    if of is None:
        return None
    ran = [t for t in trials if t.user_attrs.get("source") == of]
    if of == "probe":
        checked = ran[0] if ran else None
        if checked is None or checked.state in (TrialState.WAITING, TrialState.RUNNING):
            return None
    else:  # the seed, as measured (a retry may have run it after a stopped launch)
        done = [t for t in ran if t.state == TrialState.COMPLETE and t.values and _steps(t)]
        if not done or any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in ran):
            return None
        checked = done[0]
    what = "probe" if of == "probe" else "seed"
    values = record[what]["values"]
    base = next((t for t in trials if t.number == record.get("fitted_on")), None)
    limits = checked.user_attrs.get("server_limits") or {}
    profiles = [s.profile for s in _steps(checked) if s.profile is not None]
    measured = checked.values[0] if checked.state == TrialState.COMPLETE and checked.values else None
    refit: dict[str, Any] = {"trial": checked.number, "of": of, "measured": measured}
    model = None
    if base is not None and profiles:
        base_limits = base.user_attrs.get("server_limits") or {}
        limit = limits.get("running") or next(iter(values.values()))
        model = ServerModel.fit(
            [s.profile for s in _steps(base) if s.profile is not None], running_limit=base_limits.get("running"),
            graph_bs=base_limits.get("graph"), pooled=[Search(profiles, limit, limits.get("graph"))],
        )  # fmt: skip
    if model is None:
        refit["note"] = f"the {what} trial left no readable step: the baseline's model stays"
        record["refit"] = refit
        setup.study.set_user_attr(STUDY_ATTR, record)
        return record
    space = setup.space
    slos = setup.latency_slos
    running, graph = field_of(space.params, RUNNING), field_of(space.params, GRAPH)
    baseline = _baseline_values(base, space)
    refit["alone"] = record["model"]
    refit["baseline_alone"] = record.get("baseline_predicted")  # what the fit on the baseline alone read it at
    refit["predicted"] = round(predict(model, slos, {**baseline, **values}, running, graph), 4)
    record["model"] = model.summary()
    record["refit"] = refit
    record["baseline_predicted"] = round(predict(model, slos, baseline, running, graph), 4)
    narrowed = search_space(space, record)
    found = seed(model, slos, narrowed, baseline, ran=[values])
    if found is None:
        refit["note"] = f"the refit predicts nothing above the baseline and the {what}"
        setup.study.set_user_attr(STUDY_ATTR, record)
        return record
    floor = (measured or 0.0) * (1.0 + setup.options.resolution)
    if of == "model" and found[1] < floor:
        best = ", ".join(f"{k}={v}" for k, v in found[0].items() if k in (running, graph))
        refit["note"] = (
            f"the refit's best ({best}: {found[1]:.4g} req/s) is not the resolution above the seed's measured "
            f"{measured:.4g}: nothing more to launch from the model"
        )
        setup.study.set_user_attr(STUDY_ATTR, record)
        return record
    _enqueue_seed(setup, record, found, base, narrowed, running, graph, into=refit if of == "model" else None)
    return record


def _baseline_values(trial, space: ResolvedSpace) -> dict[str, Any]:
    """A baseline's values in the space (its reported full config where known, else its params);
    the running limit and graph size as the server ran them."""
    values = dict(trial.user_attrs.get("effective_params") or trial.user_attrs.get("params") or {})
    limits = trial.user_attrs.get("server_limits") or {}
    running, graph = field_of(space.params, RUNNING), field_of(space.params, GRAPH)
    if running and limits.get("running"):
        values[running] = limits["running"]
    if graph and limits.get("graph"):
        values[graph] = limits["graph"]
    return values


def prediction(setup: StudySetup, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """A trial's predicted capacity (its running limit and graph size through the study's model), and
    which of its other fields differ from the baseline's (the model holds them at the baseline's)."""
    record = load(setup.study)
    model = model_of(record)
    if model is None:
        return None
    space = setup.space.params
    running, graph = field_of(space, RUNNING), field_of(space, GRAPH)
    base = next((t for t in setup.study.get_trials(deepcopy=False) if t.number == record.get("fitted_on")), None)
    baseline = _baseline_values(base, setup.space) if base is not None else {}
    values = {**baseline, **{k: v for k, v in params.items() if v is not None}}
    others = sorted(k for k, v in params.items() if k not in (running, graph) and v != baseline.get(k))
    return {
        "capacity": round(predict(model, setup.latency_slos, values, running, graph), 4),
        "others_changed": others,
    }


def scorer(setup: StudySetup, record: Mapping[str, Any] | None):
    """The local phase's score of a config: the model's predicted capacity (None without a model)."""
    model = model_of(record)
    if model is None:
        return None
    running, graph = field_of(setup.space.params, RUNNING), field_of(setup.space.params, GRAPH)
    slos = setup.latency_slos
    cache: dict[tuple, float] = {}

    def score(values: Mapping[str, Any]) -> float:
        key = (values.get(running) if running else None, values.get(graph) if graph else None)
        if key not in cache:
            cache[key] = predict(model, slos, values, running, graph)
        return cache[key]

    return score


VETO_SHARE = 0.5
"""A sampled config the model predicts below this share of the incumbent's capacity is not launched ..."""
VETO_TRUST = 0.15
"""... once the model's own seed landed within this share of its prediction (the model has earned it)."""


def veto(setup: StudySetup, predicted: float, incumbent: float | None, source: str) -> dict[str, Any] | None:
    """Why not to launch a sampled config (None: launch it): the model predicts it far below the
    incumbent, and the model's seed was measured within `VETO_TRUST` of its prediction. The seed
    itself is always launched (it is the model's check)."""
    if source == "model" or incumbent is None or predicted >= VETO_SHARE * incumbent:
        return None
    seeded = [t for t in setup.study.get_trials(deepcopy=False) if t.user_attrs.get("source") == "model" and t.values]
    if not seeded:
        return None
    seed = seeded[0]
    guess = (seed.user_attrs.get("predicted") or {}).get("capacity")
    if not guess or abs(guess / seed.values[0] - 1.0) > VETO_TRUST:
        return None
    return {
        "why": "predicted_below", "predicted": round(predicted, 4), "incumbent": round(incumbent, 4),
        "note": f"the server model predicts {predicted:.4g} req/s, under {VETO_SHARE:.0%} of the incumbent's "
                f"{incumbent:.4g}; its seed landed within {abs(guess / seed.values[0] - 1.0):.0%}: not launched",
    }  # fmt: skip
