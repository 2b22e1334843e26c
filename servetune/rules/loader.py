"""Loading rule files: schema validation with file:line errors, catalog checks, conflicts."""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servetune.catalog.values import coerce_env, coerce_field, is_env_name
from servetune.errors import ConflictError, SourceLocation, SpecError, UnknownNameError, did_you_mean
from servetune.rules.conditions import conditions_disjoint, overlap_candidates
from servetune.schema.catalog import Catalog
from servetune.schema.rule import Derived, Rule, condition_paths
from servetune.yamlio import display_path, format_key_path, load_yaml_with_spans, spec_error_from_validation

log = logging.getLogger("servetune.rules")


@dataclass(frozen=True)
class LoadedRule:
    """A validated rule and where it was written."""

    rule: Rule
    location: SourceLocation
    set_locations: dict[str, SourceLocation] = field(default_factory=dict)
    builtin: bool = True

    @property
    def id(self) -> str:
        """The rule id."""
        return self.rule.id


@dataclass(frozen=True)
class RuleSet:
    """All rules in effect, in file order."""

    rules: tuple[LoadedRule, ...]

    @functools.cached_property
    def by_id(self) -> dict[str, LoadedRule]:
        """Rules by id."""
        return {r.id: r for r in self.rules}

    def get(self, rule_id: str) -> LoadedRule:
        """A rule by id, or `UnknownNameError` with a did-you-mean."""
        if rule_id not in self.by_id:
            guess = did_you_mean(rule_id, self.by_id)
            raise UnknownNameError(
                f"unknown rule '{rule_id}'",
                help=(f"did you mean '{guess}'? " if guess else "") + "`servetune rules list` shows every rule",
            )
        return self.by_id[rule_id]


def builtin_rule_files() -> list[Path]:
    """The shipped rule files, sorted by name."""
    folder = resources.files("servetune.data").joinpath("rules")
    return sorted((Path(str(f)) for f in folder.iterdir() if f.name.endswith((".yaml", ".yml"))), key=lambda p: p.name)


class _KnownNames:
    """Union of names over the catalogs (a rule may target fields of some versions only)."""

    def __init__(self, catalogs: list[Catalog]) -> None:
        self.catalogs = sorted(catalogs, key=lambda c: _vkey(c.sglang_version), reverse=True)
        self.fields = {n for c in catalogs for n in c.fields}
        self.env = {n for c in catalogs for n in c.env}

    def field_spec(self, name: str):
        return next(c.fields[name] for c in self.catalogs if name in c.fields)

    def env_spec(self, name: str):
        return next((c.env[name] for c in self.catalogs if name in c.env), None)


def _vkey(v: str) -> tuple:
    from servetune.versions import version_key

    return version_key(v)


def load_rule_file(path: str | Path, known: _KnownNames, *, builtin: bool) -> list[LoadedRule]:
    """Load and validate one rules file (`rules: [...]`)."""
    shown = display_path(path)
    data, spans = load_yaml_with_spans(path)
    spans = type(spans)({k: SourceLocation(shown, v.line, v.column) for k, v in spans.items()})
    top = SourceLocation(shown, 1)
    if data is None:
        log.warning("rules file %s is empty: it adds no rules (start it with 'rules:' and a list)", shown)
        return []
    if not isinstance(data, dict) or "rules" not in data:
        raise SpecError(
            "a rules file must be a mapping with a 'rules:' list", location=top, help="start the file with 'rules:'"
        )
    extra = set(data) - {"rules", "requires_servetune"}
    if extra:
        key = sorted(extra)[0]
        raise SpecError(
            f"unknown top-level key '{key}' in rules file",
            location=spans.nearest((key,), top),
            help="a rules file holds 'rules:' (and optionally 'requires_servetune:')",
        )
    items = data["rules"]
    if not isinstance(items, list):
        raise SpecError("'rules' must be a list of rules", location=spans.nearest(("rules",), top), key_path="rules")
    if not items:
        log.warning("rules file %s has an empty 'rules:' list: it adds no rules", shown)
    loaded: list[LoadedRule] = []
    for index, raw in enumerate(items):
        prefix = ("rules", index)
        if not isinstance(raw, dict):
            raise SpecError(
                "each rule must be a mapping", location=spans.nearest(prefix, top), key_path=format_key_path(prefix)
            )
        try:
            rule = Rule.model_validate(raw)
        except ValidationError as exc:
            raise spec_error_from_validation(exc, data, spans, shown, prefix=prefix, model=Rule, what="rule") from None
        set_locs = {k: spans.nearest(prefix + ("set", k), top) for k in rule.set}
        loaded.append(LoadedRule(rule, spans.nearest(prefix + ("id",), top), set_locs, builtin))
        _check_names(loaded[-1], raw, spans, prefix, known, top)
    return loaded


def _check_names(lr: LoadedRule, raw: dict, spans: Any, prefix: tuple, known: _KnownNames, top: SourceLocation) -> None:
    rule = lr.rule
    for key, value in rule.set.items():
        where = lr.set_locations[key]
        key_path = format_key_path(prefix + ("set", key))
        if is_env_name(key):
            if key not in known.env:
                raise _unknown(key, known.env, "environment variable", where, key_path)
            if not isinstance(value, Derived):
                try:
                    coerce_env(known.env_spec(key), value)
                except ValueError as exc:
                    raise SpecError(f"bad value for {key}: {exc}", location=where, key_path=key_path) from None
            continue
        if key not in known.fields:
            raise _unknown(key, known.fields, "field", where, key_path)
        if isinstance(value, Derived):
            if value.source not in known.fields:
                raise _unknown(value.source, known.fields, "field", where, key_path + ".from")
            continue
        try:
            coerce_field(known.field_spec(key), value)
        except ValueError as exc:
            raise SpecError(f"bad value for {key}: {exc}", location=where, key_path=key_path) from None
    for atom in condition_paths(rule.when):
        refs = [atom.path] + ([atom.value.ref] if hasattr(atom.value, "ref") else [])
        for path in refs:
            group, _, name = path.partition(".")
            if group == "field" and name not in known.fields:
                raise _unknown(
                    name,
                    known.fields,
                    "field",
                    spans.nearest(prefix + ("when",), top),
                    format_key_path(prefix + ("when",)),
                )
            if group == "env" and name not in known.env:
                raise _unknown(
                    name,
                    known.env,
                    "environment variable",
                    spans.nearest(prefix + ("when",), top),
                    format_key_path(prefix + ("when",)),
                )


def _unknown(name: str, options: set[str], noun: str, where: SourceLocation, key_path: str) -> UnknownNameError:
    guess = did_you_mean(name, options)
    return UnknownNameError(
        f"'{name}' is not an SGLang {noun} in any catalogued version",
        location=where,
        key_path=key_path,
        help=f"did you mean '{guess}'?" if guess else "`servetune catalog show VERSION` lists the names",
        notes=["names come from servetune/data/catalog/<version>.json"],
    )


def check_conflicts(rules: list[LoadedRule]) -> None:
    """Two same-kind rules that set one key differently and can match together must be ordered
    by `supersedes` (a load-time error otherwise).

    Raises:
        UnknownNameError: A `supersedes` entry names no rule.
        ConflictError: The first such pair in file order (the earlier rule first).
    """
    by_id = {r.id: r for r in rules}
    for r in rules:
        for other in r.rule.supersedes:
            if other not in by_id:
                guess = did_you_mean(other, by_id)
                raise UnknownNameError(
                    f"rule '{r.id}' supersedes unknown rule '{other}'",
                    location=r.location,
                    help=f"did you mean '{guess}'?" if guess else "supersedes must name rule ids",
                )
    setters: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, r in enumerate(rules):
        if not r.rule.forbid:
            for key in r.rule.set:
                setters[(r.rule.kind, key)].append(index)
    first: tuple[int, int] | None = None
    for (_, key), members in setters.items():
        if len({repr(rules[i].rule.set[key]) for i in members}) < 2:
            continue
        for x, y in overlap_candidates([rules[i].rule.when for i in members]):
            pair = (members[x], members[y])
            if first is not None and pair >= first:
                continue
            a, b = rules[pair[0]], rules[pair[1]]
            if repr(a.rule.set[key]) == repr(b.rule.set[key]):
                continue
            if b.id in a.rule.supersedes or a.id in b.rule.supersedes:
                continue
            if not conditions_disjoint(a.rule.when, b.rule.when):
                first = pair
    if first is None:
        return
    a, b = rules[first[0]], rules[first[1]]
    key = min(k for k in set(a.rule.set) & set(b.rule.set) if repr(a.rule.set[k]) != repr(b.rule.set[k]))
    raise ConflictError(
        f"rules '{a.id}' and '{b.id}' both set '{key}' ({a.rule.set[key]!r} vs {b.rule.set[key]!r}) "
        "and can match the same facts",
        location=b.set_locations.get(key, b.location),
        help=f"add 'supersedes: [{a.id}]' to '{b.id}' (or the reverse), or make their 'when' disjoint",
        notes=[f"'{a.id}' is at {a.set_locations.get(key, a.location)}"],
    )


def load_rules(extra_files: list[str | Path] = (), *, catalogs: list[Catalog], include_builtin: bool = True) -> RuleSet:
    """Load built-in rules plus user rule files, validated against the catalogs.

    Raises:
        SpecError: Bad YAML, schema violations or unknown names, with file:line.
        ConflictError: Two rules of one kind disagree on a key for overlapping facts.
    """
    known = _KnownNames(catalogs)
    loaded: list[LoadedRule] = []
    if include_builtin:
        for path in builtin_rule_files():
            loaded.extend(load_rule_file(path, known, builtin=True))
    for path in extra_files:
        loaded.extend(load_rule_file(path, known, builtin=False))
    seen: dict[str, LoadedRule] = {}
    for r in loaded:
        if r.id in seen:
            raise SpecError(
                f"duplicate rule id '{r.id}'",
                location=r.location,
                help=f"rule ids are permanent and unique; the first is at {seen[r.id].location}",
            )
        seen[r.id] = r
    check_conflicts(loaded)
    return RuleSet(tuple(loaded))
