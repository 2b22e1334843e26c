"""`resolve()`: frozen facts, rules and the user's layers in; `ResolvedConfig` out. Pure.

Layers, low to high: SGLang default (unset) < prefer rules < preset < tuner trial < pins.
Rule conditions see the merged config of every layer, except the rule's own decisions, and
resolution repeats until the set of applied rules stops changing (a repeating set is a cycle,
reported with the rules involved). `require` rules are checked last: they fill unset keys,
replace prefer-rule values, and make a preset, trial or pin that breaks them an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servetune.catalog.values import coerce_env, coerce_field, is_env_name, unknown_key_error, value_help
from servetune.errors import ConflictError, RequireViolation, SpecError
from servetune.rules.conditions import UNSET, evaluate
from servetune.rules.loader import LoadedRule, RuleSet
from servetune.schema.catalog import Catalog
from servetune.schema.decision import (
    LAYER_ORDER,
    ConditionResult,
    Decision,
    Resolved,
    ResolvedConfig,
    RuleOutcome,
    Skipped,
)
from servetune.schema.facts import FACT_PATHS, Facts, fact_value
from servetune.schema.rule import Derived
from servetune.versions import in_window

__all__ = ["MAX_DERIVATION_ROUNDS", "MAX_ITERATIONS", "LayerInput", "RequireViolation", "resolve"]

MAX_ITERATIONS = 32
MAX_DERIVATION_ROUNDS = 8


@dataclass(frozen=True)
class LayerInput:
    """Values of one layer above the rules (a preset, a tuner trial or the user's pins)."""

    layer: str
    source: str
    values: Mapping[str, Any]
    locations: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""
    strict: bool = True
    """Unknown names are errors (pins, trials); a preset's are skipped with a note."""
    from_text: bool = False
    """Values are CLI text (`--set a=1`) to be parsed by the field's type."""


@dataclass
class _Candidate:
    key: str
    value: Any
    layer: str
    source: str
    location: str | None
    reason: str
    matched: tuple[ConditionResult, ...] = ()


def _coerce(catalog: Catalog, key: str, value: Any, from_text: bool) -> Any:
    if isinstance(value, Derived):
        return value
    if is_env_name(key):
        return coerce_env(catalog.env.get(key), value, from_text=from_text)
    return coerce_field(catalog.fields[key], value, from_text=from_text)


def _known(catalog: Catalog, key: str) -> bool:
    if is_env_name(key):
        return key in catalog.env or not key.startswith("SGLANG_")
    return key in catalog.fields


class _Resolver:
    """One resolution's working state: the rules in the target's version window, split into `prefer`
    and `require`, and every candidate value they and the user's layers propose, coerced once.

    `run()` finds the fixed point of which prefer rules apply (each rule's condition sees the config
    the other active rules and the layers build); `build(active)` merges the candidates of those rules
    and of the layers into one value per key (highest layer wins, `Derived` values follow their
    source); `resolve()` and the require phase read only these public methods and fields:

    - `prefer`, `require`: the rules in the window; `outcomes`: rules outside it;
    - `rule_candidates[rule_id]`: what each prefer rule sets; `upper`: the preset, trial and pin values;
    - `skipped`: values this SGLang release lacks or refuses, with where they were written;
    - `superseded`: after `run()`, rule id -> the rule that superseded it.
    """

    def __init__(
        self, facts: Facts, rules: RuleSet, catalog: Catalog, layers: list[LayerInput], use_rules: bool
    ) -> None:
        self.facts = facts
        self.catalog = catalog
        self.version = catalog.sglang_version
        self.skipped: list[Skipped] = []
        self.outcomes: dict[str, RuleOutcome] = {}
        self.prefer: list[LoadedRule] = []
        self.require: list[LoadedRule] = []
        self.superseded: dict[str, str] = {}
        for lr in rules.rules if use_rules else ():
            if not in_window(self.version, lr.rule.sglang):
                self.outcomes[lr.id] = RuleOutcome(
                    rule_id=lr.id,
                    status="outside-version",
                    note=f"window {lr.rule.sglang} excludes SGLang {self.version}",
                )
                continue
            (self.require if lr.rule.kind == "require" else self.prefer).append(lr)
        self.rule_candidates: dict[str, list[_Candidate]] = {}
        for lr in self.prefer:
            self.rule_candidates[lr.id] = self.candidates_of(lr, "rule")
        self.upper: list[_Candidate] = []
        for layer in sorted(layers, key=lambda item: LAYER_ORDER[item.layer]):
            self.upper.extend(self._layer_candidates(layer))

    def candidates_of(self, lr: LoadedRule, layer: str) -> list[_Candidate]:
        """The values `lr` sets as candidates of `layer`; a key this release lacks or a value it refuses
        is a `Skipped` instead."""
        out = []
        for key, value in lr.rule.set.items():
            if not _known(self.catalog, key):
                noun = "environment variable" if is_env_name(key) else "field"
                self.skipped.append(
                    Skipped(
                        key=key,
                        source=lr.id,
                        location=str(lr.set_locations.get(key, lr.location)),
                        reason=f"SGLang {self.version} has no {noun} '{key}'",
                    )
                )
                continue
            try:
                coerced = _coerce(self.catalog, key, value, False)
            except ValueError as exc:
                self.skipped.append(
                    Skipped(
                        key=key,
                        source=lr.id,
                        location=str(lr.set_locations.get(key, lr.location)),
                        reason=f"SGLang {self.version} does not accept {key}={value!r}: {exc}",
                    )
                )
                continue
            out.append(
                _Candidate(key, coerced, layer, lr.id, str(lr.set_locations.get(key, lr.location)), lr.rule.summary)
            )
        return out

    def _layer_candidates(self, layer: LayerInput) -> list[_Candidate]:
        out = []
        for key, value in layer.values.items():
            where = layer.locations.get(key)
            if not _known(self.catalog, key):
                if layer.strict:
                    raise unknown_key_error(key, self.catalog, what=f"{layer.layer} from {layer.source}")
                self.skipped.append(
                    Skipped(
                        key=key, source=layer.source, location=where, reason=f"SGLang {self.version} has no '{key}'"
                    )
                )
                continue
            try:
                coerced = _coerce(self.catalog, key, value, layer.from_text)
            except ValueError as exc:
                if not layer.strict:
                    self.skipped.append(
                        Skipped(
                            key=key,
                            source=layer.source,
                            location=where,
                            reason=f"SGLang {self.version} does not accept {key}={value!r}: {exc}",
                        )
                    )
                    continue
                shown = f"{key}={value}" if layer.from_text else key
                raise SpecError(
                    f"bad value for {shown} ({layer.layer} {layer.source}): {exc}", help=value_help(self.catalog, key)
                ) from None
            out.append(_Candidate(key, coerced, layer.layer, layer.source, where, layer.reason))
        return out

    # --- merging -------------------------------------------------------------------------
    def build(self, active: list[str], matched: Mapping[str, tuple[ConditionResult, ...]] | None = None):
        candidates: list[_Candidate] = []
        for rid in active:
            for c in self.rule_candidates[rid]:
                if matched and rid in matched:
                    c = _Candidate(c.key, c.value, c.layer, c.source, c.location, c.reason, matched[rid])
                candidates.append(c)
        candidates.extend(self.upper)
        chains: dict[str, list[_Candidate]] = {}
        for c in candidates:
            chains.setdefault(c.key, []).append(c)
        merged: dict[str, Any] = {}
        for _ in range(MAX_DERIVATION_ROUNDS):
            changed = False
            for key, chain in chains.items():
                value = self._top_value(chain, merged, None)
                if value is not UNSET and merged.get(key, UNSET) != value:
                    merged[key] = value
                    changed = True
            if not changed:
                break
        derived_skips: list[Skipped] = []
        for chain in chains.values():
            self._top_value(chain, merged, derived_skips)
        return merged, chains, derived_skips

    def _top_value(self, chain: list[_Candidate], merged: dict[str, Any], skips: list[Skipped] | None) -> Any:
        for c in reversed(chain):
            if not isinstance(c.value, Derived):
                return c.value
            value = self.derive(c, merged)
            if value is not UNSET:
                return value
            if skips is not None:
                skips.append(
                    Skipped(
                        key=c.key,
                        source=c.source,
                        location=c.location,
                        reason=f"derived from '{c.value.source}', which is unset",
                    )
                )
        return UNSET

    def derive(self, c: _Candidate, merged: dict[str, Any]) -> Any:
        """A `Derived` candidate's value from its source in `merged`, clamped and coerced; UNSET while
        the source is unset."""
        d: Derived = c.value
        value = merged.get(d.source, UNSET)
        if value is UNSET:
            return UNSET
        if d.min is not None:
            value = max(value, d.min)
        if d.max is not None:
            value = min(value, d.max)
        return _coerce(self.catalog, c.key, value, False)

    def lookup(self, merged: Mapping[str, Any]):
        def get(path: str) -> Any:
            if path in FACT_PATHS:
                value = fact_value(self.facts, path)
                return UNSET if value is None else value
            group, _, name = path.partition(".")
            return merged.get(name, UNSET)

        return get

    # --- the fixed point -----------------------------------------------------------------
    def run(self) -> tuple[list[str], dict[str, tuple[ConditionResult, ...]], int]:
        active: list[str] = []
        history: list[frozenset[str]] = [frozenset()]
        traces: dict[str, tuple[ConditionResult, ...]] = {}
        for iteration in range(1, MAX_ITERATIONS + 1):
            matched: list[str] = []
            traces = {}
            for lr in self.prefer:
                others = [r for r in active if r != lr.id]
                merged, _, _ = self.build(others)
                trace: list[ConditionResult] = []
                ok = evaluate(lr.rule.when, self.lookup(merged), trace)
                traces[lr.id] = tuple(trace)
                if ok:
                    matched.append(lr.id)
            superseded = {
                s: lr.id for lr in self.prefer if lr.id in matched for s in lr.rule.supersedes if s in matched
            }
            new_active = [rid for rid in matched if rid not in superseded]
            self.superseded = superseded
            if set(new_active) == set(active):
                return new_active, traces, iteration
            state = frozenset(new_active)
            if state in history:
                start = history.index(state)
                toggled = sorted(set().union(*history[start:]) - set.intersection(*map(set, history[start:])))
                raise ConflictError(
                    "rule resolution does not settle: these rules switch each other on and off: " + ", ".join(toggled),
                    help="each rule's condition depends on a value another one sets; "
                    "make one condition independent of the other's output",
                )
            history.append(state)
            active = new_active
        raise ConflictError(f"rule resolution did not settle after {MAX_ITERATIONS} rounds")


def resolve(
    facts: Facts,
    rules: RuleSet,
    catalog: Catalog,
    layers: list[LayerInput] = (),
    *,
    use_rules: bool = True,
) -> ResolvedConfig:
    """Resolve SGLang fields and env vars with provenance.

    Args:
        facts: Hardware, model, workload, deployment and target-SGLang facts.
        rules: Loaded rules (built-in and user).
        catalog: The target SGLang version's catalog; every decision is checked against it.
        layers: Preset, tuner and pin layers.
        use_rules: False gives SGLang's own defaults plus the layers (the tuner's baseline).

    Raises:
        ConflictError: A cycle, or a pin/preset breaking a `require` rule.
        RequireViolation: A tuner trial breaking a `require` rule.
        SpecError / UnknownNameError: Bad pins or trial values.
    """
    r = _Resolver(facts, rules, catalog, list(layers), use_rules)
    active, traces, iterations = r.run()
    merged, chains, derived_skips = r.build(active, traces)
    decided = _require_phase(r, merged, chains)
    for lr in r.prefer:
        if lr.id in active:
            status = "applied"
        elif lr.id in getattr(r, "superseded", {}):
            status = "superseded"
        else:
            status = "not-matched"
        note = f"superseded by {r.superseded[lr.id]}" if status == "superseded" else ""
        r.outcomes[lr.id] = RuleOutcome(rule_id=lr.id, status=status, conditions=traces.get(lr.id, ()), note=note)
    fields: dict[str, Resolved] = {}
    env: dict[str, Resolved] = {}
    for key, chain in sorted(decided.items()):
        value = merged.get(key, UNSET)
        if value is UNSET:
            continue
        decisions = tuple(
            _decision(c, merged, r)
            for c in chain
            if not isinstance(c.value, Derived) or r.derive(c, merged) is not UNSET
        )
        target = env if is_env_name(key) else fields
        target[key] = Resolved(key=key, kind="env" if target is env else "field", value=value, chain=decisions)
    pinned = frozenset(c.key for c in r.upper if c.layer == "pin")
    outcomes = tuple(r.outcomes[k] for k in sorted(r.outcomes))
    return ResolvedConfig(
        sglang_version=r.version,
        fields=fields,
        env=env,
        skipped=tuple(r.skipped) + tuple(derived_skips),
        outcomes=outcomes,
        pinned=pinned,
        iterations=iterations,
    )


def _decision(c: _Candidate, merged: Mapping[str, Any], r: _Resolver) -> Decision:
    value = r.derive(c, merged) if isinstance(c.value, Derived) else c.value
    reason = c.reason
    if isinstance(c.value, Derived):
        reason = f"{reason} (= {c.value.source})" if reason else f"= {c.value.source}"
    return Decision(
        key=c.key, value=value, layer=c.layer, source=c.source, location=c.location, reason=reason, matched=c.matched
    )


def _require_phase(
    r: _Resolver, merged: dict[str, Any], chains: dict[str, list[_Candidate]]
) -> dict[str, list[_Candidate]]:
    for lr in r.require:
        trace: list[ConditionResult] = []
        ok = evaluate(lr.rule.when, r.lookup(merged), trace)
        if not ok:
            r.outcomes[lr.id] = RuleOutcome(rule_id=lr.id, status="not-matched", conditions=tuple(trace))
            continue
        if lr.rule.forbid:
            names = [
                t.path.split(".", 1)[1] for t in trace if t.ok and t.path and t.path.startswith(("field.", "env."))
            ]
            culprits = [chains[name][-1] for name in names if name in chains]
            _raise_violation(lr, culprits, trace, None)
        for c in r.candidates_of(lr, "require"):
            current = merged.get(c.key, UNSET)
            chain = chains.setdefault(c.key, [])
            if current is UNSET or current == c.value:
                pass
            else:
                top = chain[-1]
                if top.layer != "rule":
                    _raise_violation(lr, [top], trace, c)
            c.matched = tuple(trace)
            chain.append(c)
            merged[c.key] = c.value
        r.outcomes[lr.id] = RuleOutcome(rule_id=lr.id, status="applied", conditions=tuple(trace))
    return chains


def _raise_violation(
    lr: LoadedRule, culprits: list[_Candidate], trace: list[ConditionResult], wanted: _Candidate | None
) -> None:
    layers = {c.layer for c in culprits}
    who = ", ".join(f"{c.key}={c.value!r} ({c.layer} {c.source})" for c in culprits) or "the resolved config"
    held = "; ".join(t.condition for t in trace if t.ok)
    if wanted is not None:
        message = f"{who} breaks require rule '{lr.id}', which needs {wanted.key}={wanted.value!r}"
    else:
        message = f"{who} breaks require rule '{lr.id}': {lr.rule.summary}"
    cls = RequireViolation if "tuner" in layers else ConflictError
    raise cls(
        message,
        location=lr.location,
        help="change or drop the conflicting value" + (f" (conditions that held: {held})" if held else ""),
        notes=[lr.rule.why.strip()],
    )
