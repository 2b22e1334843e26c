"""A search space's values in Optuna: distributions, sampling a trial, and the ordinal encoding
(an all-numeric choice list is searched through an ordered index, stored as that index)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from servetune.schema.space import ChoiceDistribution, Distribution, FloatDistribution, IntDistribution
from servetune.tuner.space import _DISTRIBUTION, ResolvedSpace

__all__ = ["baseline_params", "decode_params", "encode_params", "ordinal_values", "suggest", "to_optuna"]


def ordinal_values(dist: Distribution) -> tuple[Any, ...] | None:
    """The sorted values of an all-numeric choice list (searched through an ordered index), else None.

    `{choice: [2048, 4096, 8192]}` is sampled as `suggest_int(name, 0, 2)` over the sorted values,
    so TPE learns that neighbours behave alike (64 beating 32 says something about 128); the
    index is mapped back to the value everywhere a user sees it. Choices with a string, a bool
    or null among them stay categorical.
    """
    if not isinstance(dist, ChoiceDistribution) or len(dist.choices) < 2:
        return None
    if not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in dist.choices):
        return None
    return tuple(sorted(dist.choices))


def to_optuna(dist: Distribution):  # -> optuna.distributions.BaseDistribution
    """The Optuna distribution for a declared one (imports optuna); an all-numeric choice is an
    int index over its sorted values (`ordinal_values`)."""
    from optuna.distributions import CategoricalDistribution
    from optuna.distributions import FloatDistribution as OFloat
    from optuna.distributions import IntDistribution as OInt

    if isinstance(dist, IntDistribution):
        return OInt(dist.bounds[0], dist.bounds[1], step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return OFloat(dist.bounds[0], dist.bounds[1], step=dist.step, log=dist.log)
    ordered = ordinal_values(dist)
    if ordered is not None:
        return OInt(0, len(ordered) - 1)
    return CategoricalDistribution(list(dist.choices))


def suggest(trial, space: ResolvedSpace, only: Iterable[str] | None = None) -> dict[str, Any]:
    """Sample (or replay enqueued values for) the space's params on an Optuna trial; the real
    values (an ordinal choice's index mapped back to its value)."""
    keep = None if only is None else set(only)
    values: dict[str, Any] = {}
    for name, param in space.params.items():
        if keep is not None and name not in keep:
            continue
        d = param.distribution
        if isinstance(d, IntDistribution):
            values[name] = trial.suggest_int(name, d.bounds[0], d.bounds[1], step=d.step, log=d.log)
        elif isinstance(d, FloatDistribution):
            value = trial.suggest_float(name, d.bounds[0], d.bounds[1], step=d.step, log=d.log)
            # on a step grid, the grid's value (Optuna's arithmetic gives 0.8799999999999999 for 0.88)
            values[name] = round(value, 10) if d.step else value
        elif (ordered := ordinal_values(d)) is not None:
            values[name] = ordered[trial.suggest_int(name, 0, len(ordered) - 1)]
        else:
            values[name] = trial.suggest_categorical(name, list(d.choices))
    return values


def encode_params(space: ResolvedSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    """Real values as Optuna stores them (for `enqueue_trial`): an ordinal choice's value becomes
    its index. Names outside the space pass through; a value not among the choices is an error
    (`baseline_params` records those under `fixed` instead)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        param = space.params.get(name)
        ordered = ordinal_values(param.distribution) if param is not None else None
        if ordered is None:
            out[name] = value
            continue
        index = next((i for i, c in enumerate(ordered) if type(c) is type(value) and c == value), None)
        if index is None:
            raise ValueError(f"{name}={value!r} is not among the choices {list(ordered)}")
        out[name] = index
    return out


def decode_params(
    params: Mapping[str, Any], distributions: Mapping[str, Any], space: Mapping[str, Any]
) -> dict[str, Any]:
    """A stored trial's params as real values. `distributions` are the trial's own (Optuna's);
    `space` is the study's space as stored in its metadata (`ResolvedSpace.as_dict()`). A param
    stored as an int index of an all-numeric choice is mapped back; one stored as a category
    (studies made before the ordinal encoding) is already its value."""
    from optuna.distributions import IntDistribution as OInt

    out: dict[str, Any] = {}
    for name, value in params.items():
        spec = space.get(name)
        ordered = None
        if isinstance(spec, Mapping) and "choice" in spec and isinstance(distributions.get(name), OInt):
            try:
                ordered = ordinal_values(_DISTRIBUTION.validate_python(dict(spec)))
            except ValidationError:
                ordered = None
        if ordered is not None and isinstance(value, int) and 0 <= value < len(ordered):
            out[name] = ordered[value]
        else:
            out[name] = value
    return out


def baseline_params(space: ResolvedSpace, decided: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a resolved config's values into (in-space params, fixed values outside the space).

    `decided` holds what the resolution set (fields and env vars). A searched name the
    resolution left unset (SGLang decides at launch) is fixed as None; a value the distribution
    cannot produce is fixed as that value. Both are recorded, never bent into the space.
    """
    params: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    for name, param in space.params.items():
        if name not in decided:
            if isinstance(param.distribution, ChoiceDistribution) and param.distribution.contains(None):
                params[name] = None
            else:
                fixed[name] = None
            continue
        value = _coerce(decided[name], param.distribution)
        if param.distribution.contains(value):
            params[name] = value
        else:
            fixed[name] = value
    return params, fixed


def _coerce(value: Any, dist: Distribution) -> Any:
    """Env values arrive as strings; read them as the distribution's type."""
    if not isinstance(value, str):
        return value
    if isinstance(dist, IntDistribution):
        try:
            return int(value)
        except ValueError:
            return value
    if isinstance(dist, FloatDistribution):
        try:
            return float(value)
        except ValueError:
            return value
    for choice in dist.choices:
        if choice is not None and str(choice).lower() == value.lower():
            return choice
        if isinstance(choice, bool) and value in ("1", "0"):
            return value == "1"
    return value
