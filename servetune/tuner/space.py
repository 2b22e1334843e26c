"""Search spaces: where they come from, how they are checked, how a trial samples them.

Sources, lowest to highest (a later one replaces a name given by an earlier one):
the shipped default space for the workload (`servetune/data/spaces/`), the workload's own
`tune:` block, the preset's `tune:` block, a `--space FILE` (replaces everything before it),
and `--space-set NAME=SPEC` entries in the compact form

    max_running_requests=int(32,512,log)      chunked_prefill_size=int(1024,8192,step=1024)
    mem_fraction_static=float(0.75,0.92,step=0.01)    schedule_policy=choice(fcfs,lpm)

Pinned names are left out; every name must exist in the target SGLang catalog.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from servetune.errors import SpecError, UnknownNameError, did_you_mean
from servetune.schema.catalog import Catalog
from servetune.schema.space import (
    ChoiceDistribution,
    Distribution,
    FloatDistribution,
    IntDistribution,
)

_DISTRIBUTION = TypeAdapter(Distribution)
_COMPACT = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<kind>int|float|choice)\s*\((?P<args>.*)\)\s*$")
# Fields that change how many GPUs a launch takes or what it serves: never searched.
UNTUNABLE = frozenset({"model_path", "tp_size", "pp_size", "nnodes", "node_rank", "port", "host", "base_gpu_id"})


@dataclass(frozen=True)
class SpaceParam:
    """One searched name with its distribution and where it was declared."""

    name: str
    distribution: Distribution
    source: str

    @property
    def is_env(self) -> bool:
        return self.name.startswith("SGLANG_")


@dataclass
class ResolvedSpace:
    """The space a study searches, after pins and catalog checks."""

    params: dict[str, SpaceParam]
    dropped: dict[str, str] = field(default_factory=dict)
    """Names left out, with the reason (pinned, not in this SGLang version, ...)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: {name: {"int": [lo, hi], ...}} as the YAML spells it."""
        return {
            name: p.distribution.model_dump(by_alias=True, exclude_defaults=True) for name, p in self.params.items()
        }


def parse_distribution(value: Any, *, where: str) -> Distribution:
    """A YAML mapping (`{int: [1, 8]}`) or compact string (`int(1,8)`) as a distribution."""
    if isinstance(value, str):
        return parse_compact(f"x={value}", where=where)[1]
    try:
        return _DISTRIBUTION.validate_python(value)
    except ValidationError as exc:
        raise SpecError(
            f"invalid distribution {value!r}",
            key_path=where,
            help="write {int: [low, high]}, {float: [low, high], step: 0.01}, {choice: [a, b]} (optional log: true)",
            notes=[_first_error(exc)],
        ) from None


def parse_compact(text: str, *, where: str = "--space-set") -> tuple[str, Distribution]:
    """`NAME=int(lo,hi[,log][,step=S])`, `NAME=float(...)` or `NAME=choice(a,b,...)`."""
    match = _COMPACT.match(text)
    if match is None:
        raise SpecError(
            f"cannot parse search-space entry {text!r}",
            key_path=where,
            help="use NAME=int(32,512,log), NAME=float(0.7,0.9,step=0.01) or NAME=choice(fcfs,lpm)",
        )
    name, kind = match["name"], match["kind"]
    args = [a.strip() for a in match["args"].split(",")] if match["args"].strip() else []
    if kind == "choice":
        spec: dict[str, Any] = {"choice": [_scalar(a) for a in args]}
    else:
        positional = [a for a in args if "=" not in a and a != "log"]
        if len(positional) != 2:
            raise SpecError(f"{kind}(...) needs exactly two bounds, but got {positional}", key_path=f"{where}: {text}")
        spec = {kind: [_scalar(a) for a in positional]}
        for a in args:
            if a == "log":
                spec["log"] = True
            elif "=" in a:
                key, _, raw = a.partition("=")
                if key.strip() not in ("step", "log"):
                    raise SpecError(
                        f"unknown option {key.strip()!r} in {text!r}",
                        key_path=where,
                        help="options are `log` and `step=N`",
                    )
                spec[key.strip()] = _scalar(raw.strip())
    return name, parse_distribution(spec, where=f"{where}: {name}")


def load_space_file(path: str | Path) -> dict[str, Distribution]:
    """The `tune:` block of a YAML file (a space file, a preset or a workload); a bare mapping also works."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"search-space file not found: {p}", help="pass a YAML file with a `tune:` mapping")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SpecError(f"{p} is not valid YAML: {exc}") from None
    tune = data.get("tune", data) if isinstance(data, dict) else None
    if not isinstance(tune, dict) or not tune:
        raise SpecError(f"{p}: expected a non-empty `tune:` mapping", help="see servetune/data/spaces/*.yaml")
    return {str(name): parse_distribution(value, where=f"{p}: tune.{name}") for name, value in tune.items()}


def default_space_name(workload_name: str | None, workload_kind: str) -> str:
    """The shipped space used when nothing else is given."""
    names = shipped_spaces()
    if workload_name and workload_name in names:
        return workload_name
    return "multimodal" if workload_kind == "multimodal" else "text"


def shipped_spaces() -> list[str]:
    """Names of the spaces in `servetune/data/spaces/`."""
    root = resources.files("servetune") / "data" / "spaces"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def load_shipped_space(name: str) -> dict[str, Distribution]:
    """A shipped space by name (`text`, `multimodal`, or a workload name)."""
    names = shipped_spaces()
    if name not in names:
        hint = did_you_mean(name, names)
        raise UnknownNameError(
            f"no shipped search space named {name!r}",
            help=f"did you mean {hint!r}?" if hint else f"available: {', '.join(names)}",
        )
    with resources.as_file(resources.files("servetune") / "data" / "spaces" / f"{name}.yaml") as path:
        return load_space_file(path)


def build_space(
    *,
    catalog: Catalog,
    pinned: Iterable[str] = (),
    default: tuple[str, Mapping[str, Distribution]] | None = None,
    workload_tune: Mapping[str, Distribution] | None = None,
    preset_tune: Mapping[str, Distribution] | None = None,
    space_file: str | Path | None = None,
    space_sets: Iterable[str] = (),
    shipped_blocks: Iterable[str] = (),
) -> ResolvedSpace:
    """Merge the sources, drop pins, and check every name and choice against `catalog`.

    Names from shipped data (the default spaces, and the `tune:` blocks of shipped workloads and
    presets named in `shipped_blocks`: "workload", "preset") that the target version lacks are
    dropped with a note; names the user wrote (file, `--space-set`, their own workload or preset
    files) must exist, or it is an error.
    """
    merged: dict[str, SpaceParam] = {}
    lenient: set[str] = set()
    if space_file is not None:
        merged = {n: SpaceParam(n, d, str(space_file)) for n, d in load_space_file(space_file).items()}
    else:
        if default is not None:
            label, dists = default
            merged.update({n: SpaceParam(n, d, f"shipped space {label!r}") for n, d in dists.items()})
            lenient = set(merged)
        shipped = set(shipped_blocks)
        for kind, block in (("workload", workload_tune), ("preset", preset_tune)):
            for n, d in (block or {}).items():
                merged[n] = SpaceParam(n, d, f"{'shipped ' if kind in shipped else ''}{kind} tune:")
                if kind in shipped:
                    lenient.add(n)
                else:
                    lenient.discard(n)
    for text in space_sets:
        n, d = parse_compact(text)
        merged[n] = SpaceParam(n, d, "--space-set")
        lenient.discard(n)

    pinned = set(pinned)
    params: dict[str, SpaceParam] = {}
    dropped: dict[str, str] = {}
    for name, param in merged.items():
        if name in pinned:
            dropped[name] = "pinned by --set/--env"
            continue
        if name in UNTUNABLE:
            raise SpecError(
                f"{name!r} cannot be searched: it changes the GPUs or the server a trial uses",
                key_path=f"{param.source}: {name}",
                help="pin it with --set instead (tp is taken from the resolved config)",
            )
        problem = _check_name(name, param, catalog)
        if problem is None:
            params[name] = param
        elif name in lenient and isinstance(problem, UnknownNameError):
            dropped[name] = f"not in SGLang {catalog.sglang_version}"
        else:
            raise problem
    if not params:
        raise SpecError(
            "the search space is empty"
            + (f" (left out: {', '.join(f'{k}: {v}' for k, v in dropped.items())})" if dropped else ""),
            help="give --space FILE or --space-set NAME=int(lo,hi), or unpin a field",
        )
    return ResolvedSpace(params=params, dropped=dropped)


def _check_name(name: str, param: SpaceParam, catalog: Catalog) -> SpecError | None:
    where = f"{param.source}: {name}"
    if param.is_env:
        if name not in catalog.env:
            hint = did_you_mean(name, catalog.env)
            return UnknownNameError(
                f"unknown env var {name!r} for SGLang {catalog.sglang_version}",
                key_path=where,
                help=f"did you mean {hint!r}?" if hint else "see `servetune catalog show --env`",
            )
        return None
    spec = catalog.fields.get(name)
    if spec is None:
        hint = did_you_mean(name, catalog.fields)
        return UnknownNameError(
            f"unknown SGLang field {name!r} for SGLang {catalog.sglang_version}",
            key_path=where,
            help=f"did you mean {hint!r}?"
            if hint
            else "field names are SGLang's, with underscores (e.g. max_running_requests)",
        )
    dist = param.distribution
    if spec.choices and isinstance(dist, ChoiceDistribution):
        bad = [c for c in dist.choices if c is not None and c not in spec.choices]
        if bad:
            return SpecError(
                f"{name}: {bad} not among SGLang's choices",
                key_path=where,
                help=f"valid: {', '.join(map(str, spec.choices))}",
            )
    if spec.type == "bool" and not isinstance(dist, ChoiceDistribution):
        return SpecError(f"{name} is a switch; search it as choice(true,false)", key_path=where)
    if spec.type == "int" and isinstance(dist, FloatDistribution):
        return SpecError(
            f"{name} takes an integer, but the space gives a float range", key_path=where, help="use int(lo,hi)"
        )
    return None


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
            values[name] = trial.suggest_float(name, d.bounds[0], d.bounds[1], step=d.step, log=d.log)
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


def _scalar(text: str) -> Any:
    value = yaml.safe_load(text) if text else None
    return value if value is None or isinstance(value, (str, int, float, bool)) else text


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err['msg']}" if loc else err["msg"]
