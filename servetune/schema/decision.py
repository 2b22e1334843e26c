"""Provenance: every resolved value carries the chain of decisions that produced it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)

Layer = Literal["rule", "preset", "tuner", "pin", "require"]
LAYER_ORDER: dict[str, int] = {"rule": 0, "preset": 1, "tuner": 2, "pin": 3, "require": 4}


class ConditionResult(BaseModel):
    """One evaluated condition atom, for `explain`."""

    model_config = _FROZEN

    condition: str
    """The condition as text, e.g. `gpu.memory_mib >= 61440`."""
    path: str | None = None
    """The fact, `field.<name>` or `env.<NAME>` it tested (None for a combinator)."""
    actual: Any = None
    """The value it was compared with (None when unset)."""
    ok: bool
    """Whether it held."""


class Decision(BaseModel):
    """One layer's decision about one SGLang field or env var."""

    model_config = _FROZEN

    key: str
    """SGLang field name or `SGLANG_*` env var."""
    value: Any
    """The value this layer decided."""
    layer: Layer
    """`rule` < `preset` < `tuner` < `pin`; `require` is checked last."""
    source: str
    """Rule id, preset name, `trial N`, or `cli`."""
    location: str | None = None
    """`file:line` of the rule or preset entry, when it comes from a file."""
    reason: str = ""
    """The rule's or preset's summary (its `why` is in `servetune rules show`)."""
    matched: tuple[ConditionResult, ...] = ()
    """The conditions that held for a rule."""


class Skipped(BaseModel):
    """A decision that was not applied, and why (e.g. the target SGLang lacks the flag)."""

    model_config = _FROZEN

    key: str
    """The field or env var."""
    source: str
    """Rule id or preset name."""
    reason: str
    """Why it was skipped."""
    location: str | None = None
    """Where the decision was written."""


class Resolved(BaseModel):
    """A resolved field or env var with its decision chain (lowest layer first)."""

    model_config = _FROZEN

    key: str
    """Field or env var name."""
    kind: Literal["field", "env"]
    """Server field or environment variable."""
    value: Any
    """The effective value (the last decision's)."""
    chain: tuple[Decision, ...]
    """Every decision for this key, lowest layer first; the last one won."""

    @property
    def decision(self) -> Decision:
        """The winning decision."""
        return self.chain[-1]


class RuleOutcome(BaseModel):
    """How one rule fared in a resolution."""

    model_config = _FROZEN

    rule_id: str
    """The rule."""
    status: Literal["applied", "not-matched", "superseded", "outside-version", "violated"]
    """What happened to it."""
    conditions: tuple[ConditionResult, ...] = ()
    """Its evaluated conditions (final iteration)."""
    note: str = ""
    """Extra detail (e.g. which rule superseded it)."""


class ResolvedConfig(BaseModel):
    """The output of `resolve()`: values with provenance, plus what was skipped."""

    model_config = _FROZEN

    sglang_version: str
    """Target SGLang version the config was validated against."""
    fields: dict[str, Resolved] = Field(default_factory=dict)
    """Resolved server fields."""
    env: dict[str, Resolved] = Field(default_factory=dict)
    """Resolved `SGLANG_*` env vars."""
    skipped: tuple[Skipped, ...] = ()
    """Decisions not applied (missing in the target version, unset derivation source, ...)."""
    outcomes: tuple[RuleOutcome, ...] = ()
    """What happened to each rule."""
    pinned: frozenset[str] = frozenset()
    """Names the user pinned (never tuned)."""
    iterations: int = 1
    """Rounds the fixed-point resolution took."""

    def get(self, key: str) -> Resolved | None:
        """The resolved field or env var named `key`, if any."""
        return self.fields.get(key) or self.env.get(key)

    def values(self) -> dict[str, Any]:
        """`{name: value}` for fields and env vars."""
        return {**{k: r.value for k, r in self.fields.items()}, **{k: r.value for k, r in self.env.items()}}
