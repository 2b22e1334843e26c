"""Search spaces: where they come from and how they are checked (`_params` maps them to Optuna's).

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

from servetune.catalog.ranges import value_range
from servetune.errors import SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.schema.catalog import Catalog
from servetune.schema.space import (
    ChoiceDistribution,
    Distribution,
    FloatDistribution,
    IntDistribution,
)
from servetune.yamlio import load_yaml_with_spans

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
    location: SourceLocation | None = None
    """Where a file declared it (file, line, column); None for `--space-set` and shipped data."""
    key: str | None = None
    """Its key path in that file (`tune.NAME`)."""

    def where(self) -> dict[str, Any]:
        """The `SpecError` position of a problem with this name: file:line:col and key path when a
        file declared it, else the source and the name."""
        if self.location is not None:
            return {"location": self.location, "key_path": self.key or self.name}
        return {"key_path": f"{self.source}: {self.name}"}

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


def parse_distribution(value: Any, *, where: str, location: SourceLocation | None = None) -> Distribution:
    """A YAML mapping (`{int: [1, 8]}`) or compact string (`int(1,8)`) as a distribution; a bad one is
    a `SpecError` saying what is wrong in the space's own words (at `location` when it comes from a file)."""
    if isinstance(value, str):
        return parse_compact(f"x={value}", where=where)[1]
    try:
        return _DISTRIBUTION.validate_python(value)
    except ValidationError as exc:
        raise SpecError(
            f"invalid distribution {_shown(value)}: {_distribution_problem(value, exc)}",
            location=location,
            key_path=where,
            help="write {int: [low, high]}, {float: [low, high], step: 0.01}, {choice: [a, b]} (optional log: true)",
        ) from None


_KIND_MODELS = {"int": IntDistribution, "float": FloatDistribution, "choice": ChoiceDistribution}


_PLAIN = {
    "int_parsing": "not an integer",
    "int_type": "not an integer",
    "int_from_float": "not an integer",
    "float_parsing": "not a number",
    "float_type": "not a number",
    "bool_parsing": "not true or false",
    "bool_type": "not true or false",
}
"""Validator messages in the space's own words (no library phrasing in a user's error)."""


def _shown(value: Any) -> str:
    """A distribution as the YAML spells it (`{int: [a, 64]}`), not as a Python repr."""
    try:
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    except yaml.YAMLError:
        return repr(value)


def _distribution_problem(value: Any, exc: ValidationError) -> str:
    """What is wrong with a distribution, with no validator names: the kind key, a bound, an option."""
    if not isinstance(value, dict):
        return f"expected a mapping such as {{int: [low, high]}}, but got {type(value).__name__}"
    kinds = [k for k in _KIND_MODELS if k in value]
    if len(kinds) != 1:
        return f"a distribution has exactly one of the keys int, float, choice, but got {', '.join(map(str, value))}"
    model = _KIND_MODELS[kinds[0]]
    try:
        model.model_validate(value)
    except ValidationError as inner:
        exc = inner
    err = exc.errors()[0]
    path = [part for part in err.get("loc", ()) if isinstance(part, int) or part in value or part in _KIND_MODELS]
    where = "".join(
        f"[{part}]" if isinstance(part, int) else (f".{part}" if i else part) for i, part in enumerate(path)
    )
    kind = err.get("type")
    if kind == "extra_forbidden":
        allowed = ", ".join(f.alias or n for n, f in model.model_fields.items())
        return f"unknown key '{path[-1] if path else '?'}' (`{kinds[0]}` distributions take {allowed})"
    if kinds[0] == "choice" and kind == "too_short":
        return "`choice` needs at least one value"
    if kind in ("missing", "too_short", "too_long"):
        return f"`{kinds[0]}` takes two bounds, [low, high]"
    got = err.get("input")
    message = _PLAIN.get(str(kind), str(err.get("msg", "invalid")).replace("Value error, ", ""))
    shown = f", but got {got!r}" if not isinstance(got, (dict, list, tuple)) and "but got" not in message else ""
    return f"{where + ': ' if where else ''}{message}{shown}"


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
    """The `tune:` block of a YAML file (a space file, a preset or a workload), or of a shipped space
    named instead of a path (`capacity-vlm`); a bare mapping also works. Errors name the file, line and
    column and the key path (`tune.NAME`)."""
    return {name: param.distribution for name, param in load_space_params(path).items()}


def load_space_params(path: str | Path) -> dict[str, SpaceParam]:
    """`load_space_file` with where each name was declared (file, line, column, key path), so the
    checks against the catalog point at the line too."""
    p = Path(path)
    if not p.exists() and not p.is_symlink() and str(path) in shipped_spaces():
        return {n: SpaceParam(n, d, str(path)) for n, d in load_shipped_space(str(path)).items()}
    if not p.exists() and not p.is_symlink():
        raise SpecError(
            f"search-space file not found: {p}",
            help=f"pass a YAML file with a `tune:` mapping, or a shipped space: {', '.join(shipped_spaces())}",
        )
    data, spans = load_yaml_with_spans(p)  # bounded: a user's file (aliases, size and nodes capped)
    data = data or {}
    nested = isinstance(data, dict) and "tune" in data
    tune = data.get("tune", data) if isinstance(data, dict) else None
    if not isinstance(tune, dict) or not tune:
        raise SpecError(
            f"{p}: expected a non-empty `tune:` mapping",
            location=SourceLocation(str(p), 1, 1),
            help="see servetune/data/spaces/*.yaml",
        )
    prefix = ("tune",) if nested else ()
    params = {}
    for name, value in tune.items():
        key, location = ".".join([*prefix, str(name)]), spans.nearest((*prefix, name), SourceLocation(str(p)))
        dist = parse_distribution(value, where=key, location=location)
        params[str(name)] = SpaceParam(str(name), dist, str(path), location=location, key=key)
    return params


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
        merged = load_space_params(space_file)
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
                **param.where(),
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
    where = param.where()
    if param.is_env:
        if name not in catalog.env:
            hint = did_you_mean(name, catalog.env)
            return UnknownNameError(
                f"unknown env var {name!r} for SGLang {catalog.sglang_version}",
                **where,
                help=f"did you mean {hint!r}?" if hint else "see `servetune catalog show --env`",
            )
        return None
    spec = catalog.fields.get(name)
    if spec is None:
        hint = did_you_mean(name, catalog.fields)
        return UnknownNameError(
            f"unknown SGLang field {name!r} for SGLang {catalog.sglang_version}",
            **where,
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
                **where,
                help=f"valid: {', '.join(map(str, spec.choices))}",
            )
    if spec.type == "bool" and not isinstance(dist, ChoiceDistribution):
        return SpecError(f"{name} is a switch; search it as choice(true,false)", **where)
    if spec.type == "int" and isinstance(dist, FloatDistribution):
        return SpecError(
            f"{name} takes an integer, but the space gives a float range",
            **where,
            help="use {int: [low, high]}",
        )
    return _range_problem(name, dist, where)


def _range_problem(name: str, dist: Any, where: dict[str, Any]) -> SpecError | None:
    """A range or choice that leaves the values SGLang can use (`servetune.catalog.ranges`)."""
    bounds = value_range(name)
    if bounds is None:
        return None
    if isinstance(dist, ChoiceDistribution):
        bad = [c for c in dist.choices if isinstance(c, (int, float)) and not bounds.holds(c)]
    else:  # the whole interval must be usable: a sentinel (-1 = off) is a choice, not a range end
        bad = [v for v in dist.bounds if not bounds.holds(v, sentinels=False)]
    if not bad:
        return None
    return SpecError(
        f"{name}: {', '.join(map(str, bad))} out of range: it must be {bounds.text()} ({bounds.why})",
        **where,
        help="narrow the range" + (", and search the sentinel as a choice" if bounds.also else ""),
    )


def _scalar(text: str) -> Any:
    value = yaml.safe_load(text) if text else None
    return value if value is None or isinstance(value, (str, int, float, bool)) else text
