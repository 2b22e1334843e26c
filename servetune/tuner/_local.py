"""The local phase: one-field changes of the best config so far, before TPE takes over.

The baselines are not random points: the rule-resolved config is what the rules (and SGLang's
own per-model overrides) believe, and SGLang's defaults are tuned by its authors. The optimum
is often a field or two away from them. ParamILS and SMAC, the algorithm-configuration tools
this follows, start from the default configuration and search its *one-exchange
neighbourhood*: configs that differ from the incumbent in one field. Here the first sampled
trials of a TPE study are such neighbours, drawn at random, of the best finished trial so far
(first improvement: a neighbour that beats the incumbent becomes the incumbent); after
`local_budget` of them the sampler is TPE alone, which models every trial measured so far.

A baseline leaves fields to SGLang ("auto"). Its neighbours need those fields' values, so the
tuner reads what the server reports (`/server_info`) and snaps each value into the space
(`effective_params`); a field the server does not report makes that baseline no starting point
(the phase then starts from the best sampled trial). A neighbour keeps a field the incumbent
left to SGLang unset when it keeps its value (the trial's `auto`), so its launch differs from the
incumbent's in one field, and a winner's preset sets only what changed. On the stand-in landscape this phase took
TPE from 9 to 5 launches to 98% of the optimum (median, 50 seeds) and from 14.5 to 9 on the
second landscape (docs/tuning.md, benchmarks/tuner_efficiency.py part 1a).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from servetune.schema.space import ChoiceDistribution, Distribution, FloatDistribution, IntDistribution
from servetune.tuner import _model
from servetune.tuner._options import SOURCES_BASELINE
from servetune.tuner._params import _coerce, encode_params

if TYPE_CHECKING:
    from servetune.tuner._setup import StudySetup

NO_NEIGHBOUR = object()
"""A value `snap` cannot place in the distribution."""

REPORTED_AS: dict[str, tuple[str, ...]] = {
    # SGLang 0.5.17 on the H200 reported max_running_requests None (auto) and the scheduler's
    # figure under this key (tests/fixtures/h200/launch8b/server_info.json)
    "max_running_requests": ("effective_max_running_requests_per_dp",),
}
"""Fields SGLang reports under another /server_info key once resolved."""


def local_budget(n_params: int, trials: int) -> int:
    """Default length of the local phase: two neighbours per searched field, at most a quarter
    of the study's trials."""
    return max(0, min(2 * n_params, trials // 4))


def snap(value: Any, dist: Distribution) -> Any:
    """The candidate of `dist` nearest to `value` (NO_NEIGHBOUR when none is comparable): a choice
    as is, a number to the nearest numeric choice (on a log scale when all are positive), a
    range value clipped to the bounds and rounded onto the step grid."""
    if isinstance(dist, ChoiceDistribution):
        if dist.contains(value):
            return next(c for c in dist.choices if type(c) is type(value) and c == value) if value is not None else None
        numbers = [c for c in dist.choices if _is_number(c)]
        if not _is_number(value) or not numbers:
            return NO_NEIGHBOUR
        return min(numbers, key=lambda c: _distance(value, c, log=all(x > 0 for x in (*numbers, value))))
    if not _is_number(value):
        return NO_NEIGHBOUR
    low, high = dist.bounds
    v = min(max(float(value), low), high)
    if isinstance(dist, IntDistribution):
        return int(min(high, low + round((v - low) / dist.step) * dist.step))
    assert isinstance(dist, FloatDistribution)
    if dist.step:
        v = min(high, low + round((v - low) / dist.step) * dist.step)
    return round(v, 10)


def neighbours(space: Mapping[str, Distribution], values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every config that differs from `values` in exactly one field: each other choice; for a
    range, x/÷ 2 and x/÷ sqrt(2) (log: repeated moves reach values between the powers of two), or a
    quarter of the range down and up, snapped onto the grid."""
    out: list[dict[str, Any]] = []
    for name, dist in space.items():
        current = values[name]
        if isinstance(dist, ChoiceDistribution):
            moves = [c for c in dist.choices if not (type(c) is type(current) and c == current)]
        else:
            low, high = dist.bounds
            if dist.log:
                raw = [current / 2, current / math.sqrt(2), current * math.sqrt(2), current * 2]
            else:
                raw = [current - (high - low) / 4, current + (high - low) / 4]
            moves = []
            for r in raw:
                s = snap(r, dist)
                if s != current and s not in moves:
                    moves.append(s)
        out.extend({**values, name: m} for m in moves)
    return out


def effective_params(
    space: Mapping[str, Distribution],
    known: Mapping[str, Any],
    server_info: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> dict[str, Any] | None:
    """A baseline's full config in the space: its own values (`known`); a field it left to SGLang
    from what the server reports (top level, then its first `internal_states` entry, then
    `REPORTED_AS`); an env var, or a field the server does not report, from `defaults` (what the
    launch set, else the catalog's declared default, None for "auto"). Each is snapped into the
    space. None when a value is unknown (and "auto" is not a choice) or cannot be placed."""
    states = server_info.get("internal_states")
    inner = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
    out: dict[str, Any] = {}
    for name, dist in space.items():
        if name in known:
            value = known[name]
        elif name.startswith("SGLANG_"):
            value = defaults.get(name)
        else:
            value = next(
                (
                    src[key]
                    for key in (name, *REPORTED_AS.get(name, ()))
                    for src in (server_info, inner)
                    if src.get(key) is not None
                ),
                defaults.get(name),
            )
        if value is None and not (isinstance(dist, ChoiceDistribution) and dist.contains(None)):
            return None  # not reported, and "auto" is not a choice
        placed = snap(_number_from_text(_coerce(value, dist)), dist)
        if placed is NO_NEIGHBOUR:
            return None
        out[name] = placed
    return out


def propose(
    space: Mapping[str, Distribution],
    incumbent: Mapping[str, Any],
    tried: list[Mapping[str, Any]],
    rng: random.Random,
    score: Callable[[Mapping[str, Any]], float] | None = None,
) -> dict[str, Any] | None:
    """A neighbour of `incumbent` not among `tried`, drawn with `rng` (None: all were tried). With
    `score` (the server model's predicted capacity), every other draw takes the best-scored neighbour
    instead, where one scores above the incumbent: moves go where the model points, and the rest
    explore the fields it does not model."""
    seen = {_key(t) for t in tried}
    fresh = [n for n in neighbours(space, incumbent) if _key(n) not in seen]
    if not fresh:
        return None
    if score is not None and rng.random() < 0.5:
        own = score(incumbent)
        best = max(fresh, key=score)
        if score(best) > own:
            return best
    return rng.choice(fresh)


# ------------------------------------------------------------------ in a study


def study_budget(setup: StudySetup) -> int:
    """Trials of the local phase this study runs (0 for random search and Pareto studies)."""
    o = setup.options
    if o.sampler != "tpe" or len(setup.objectives) > 1:
        return 0
    return local_budget(len(setup.space.params), o.trials) if o.local_trials is None else max(0, o.local_trials)


def enqueue_neighbour(setup: StudySetup, trials: list, budget: int) -> None:
    """Queue a one-field change of the best finished trial, until `budget` such trials exist;
    nothing while another queued trial waits (baselines, retries). `trials`: the study's, as just read."""
    from optuna.trial import TrialState

    if not budget:
        return
    if (
        any(t.state == TrialState.WAITING for t in trials)
        or sum(t.user_attrs.get("source") == "local" for t in trials) >= budget
    ):
        return
    sign = 1.0 if setup.objectives[0].direction == "maximize" else -1.0
    finished = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.values
        and full_values(t) is not None
        and all(v <= 0 for v in t.user_attrs.get("constraints") or [])
    ]
    if not finished:
        return
    incumbent = max(finished, key=lambda t: sign * t.values[0])
    seed = setup.options.seed
    rng = random.Random(f"{seed}-{len(trials)}") if seed is not None else random.Random()
    record = _model.load(setup.study) if setup.capacity else None
    space = {n: p.distribution for n, p in _model.search_space(setup.space, record).params.items()}
    start = full_values(incumbent)
    values = propose(
        space, start, [v for t in trials if (v := full_values(t)) is not None], rng, score=_model.scorer(setup, record)
    )
    if values is not None:
        # fields the incumbent left to SGLang stay unset where the neighbour keeps their value, so
        # it differs from the incumbent's launch in one field, and a winner's preset sets only that
        # (a field the server model froze is in neither: it stays the incumbent's, left to SGLang)
        auto = sorted(n for n in incumbent.user_attrs.get("auto") or [] if values.get(n) == start.get(n))
        setup.study.enqueue_trial(
            encode_params(setup.space, values),
            user_attrs={"source": "local", "local_of": incumbent.number, "auto": auto},
        )


def baseline_values(
    setup: StudySetup, params: dict[str, Any], fixed: dict[str, Any], env: dict[str, str], server_info: dict[str, Any]
) -> dict[str, Any] | None:
    """A baseline's full config in the space, from what the server reported (`effective_params`)."""
    catalog = setup.catalog
    space = {n: p.distribution for n, p in setup.space.params.items()}
    known = {**{k: v for k, v in fixed.items() if v is not None}, **params}
    defaults = {
        n: env[n]
        if n in env
        else getattr((catalog.env if n.startswith("SGLANG_") else catalog.fields).get(n), "default", None)
        for n in space
    }
    return effective_params(space, known, server_info, defaults)


def full_values(t) -> dict[str, Any] | None:
    """A trial's full config in the space (real values): a baseline's `effective_params`, else
    its sampled `params` (None while unknown)."""
    if t.user_attrs.get("source") in SOURCES_BASELINE:
        return t.user_attrs.get("effective_params")
    return t.user_attrs.get("params")


def _key(values: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in values.items()))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _distance(a: float, b: float, *, log: bool) -> float:
    return abs(math.log(a) - math.log(b)) if log else abs(a - b)


def _number_from_text(value: Any) -> Any:
    """Text that `_coerce` left as text (a value outside a choice list): "200" is 200, to be snapped."""
    if isinstance(value, str):
        for conv in (int, float):
            try:
                return conv(value)
            except ValueError:
                pass
    return value
