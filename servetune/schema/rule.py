"""Rules as data: a selector (`when`) plus a patch (`set`), documented like a lint rule.

    - id: qwen3-vl-hopper-prefill-decode-interval
      summary: Force 22 decode rounds between prefill batches for Qwen3-VL on large Hopper GPUs.
      why: >
        ...
      references: [https://github.com/sgl-project/sglang/pull/36411]
      kind: prefer                      # prefer (recommendation) | require (constraint)
      sglang: ">=0.5.10"                # optional SGLang version window
      when:                             # a mapping is an implicit `all`
        gpu.arch: sm90
        gpu.memory_mib: {gte: 61440}
        model.type: {in: [qwen3_vl, qwen3_vl_moe]}
        field.prefill_decode_interval: {is_set: false}
      set:
        prefill_decode_interval: 22

Condition keys are fact paths (`servetune.schema.facts.FACT_PATHS`), resolved SGLang fields
(`field.<name>`) or env vars (`env.<NAME>`), and the combinators `all`, `any`, `not`. A scalar
means `eq`; operators are a closed set (`OPERATORS`). An operand may refer to another fact or
field with `{ref: PATH}`. `set` values are literals, `{value: X}` for a literal mapping, or
`{from: FIELD}` to copy another resolved field (with optional `min`/`max`).
"""

from __future__ import annotations

import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servetune.schema.facts import FACT_PATHS

OPERATORS = ("eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "between", "is_set")
Operator = Literal["eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "between", "is_set"]
_ID = r"^[a-z0-9][a-z0-9-]*$"
_FROZEN = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)


class Ref(BaseModel):
    """An operand that names another fact or field instead of a literal."""

    model_config = _FROZEN

    ref: str
    """A fact path, `field.<name>` or `env.<NAME>`."""


class Atom(BaseModel):
    """One comparison of a fact, field or env var with a value."""

    model_config = _FROZEN

    path: str
    """Fact path (`gpu.arch`), `field.<name>` or `env.<NAME>`."""
    op: Operator
    """Comparison operator."""
    value: Any = None
    """Operand: a literal, a list (`in`, `not_in`, `between`), a bool (`is_set`) or a `Ref`."""

    def describe(self) -> str:
        """`gpu.memory_mib >= 61440`-style text."""
        symbol = {"eq": "==", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}.get(self.op)
        value = f"{{ref: {self.value.ref}}}" if isinstance(self.value, Ref) else self.value
        if isinstance(value, bool):
            value = "true" if value else "false"
        if self.op == "is_set":
            return f"{self.path} is {'set' if self.value else 'unset'}"
        if symbol:
            return f"{self.path} {symbol} {value}"
        return f"{self.path} {self.op.replace('_', ' ')} {value}"


class AllOf(BaseModel):
    """True when every condition holds (the empty `all` is true)."""

    model_config = _FROZEN

    all: tuple[Condition, ...] = ()
    """Conditions that must all hold."""


class AnyOf(BaseModel):
    """True when at least one condition holds."""

    model_config = _FROZEN

    any: tuple[Condition, ...]
    """Conditions of which one must hold."""


class Not(BaseModel):
    """True when the condition does not hold."""

    model_config = _FROZEN

    not_: Condition = Field(alias="not")
    """The negated condition."""


Condition = Union[Atom, AllOf, AnyOf, Not]
AllOf.model_rebuild()
AnyOf.model_rebuild()
Not.model_rebuild()


def condition_paths(cond: Condition) -> list[Atom]:
    """Every atom of a condition tree."""
    if isinstance(cond, Atom):
        return [cond]
    if isinstance(cond, AllOf):
        return [a for c in cond.all for a in condition_paths(c)]
    if isinstance(cond, AnyOf):
        return [a for c in cond.any for a in condition_paths(c)]
    return condition_paths(cond.not_)


def _check_path(path: str) -> None:
    if path in FACT_PATHS:
        return
    if re.fullmatch(r"field\.[a-z_][a-z0-9_]*", path) or re.fullmatch(r"env\.SGLANG_[A-Z0-9_]+", path):
        return
    from servetune.errors import did_you_mean

    guess = did_you_mean(path, list(FACT_PATHS))
    hint = f"; did you mean '{guess}'?" if guess else ""
    raise ValueError(
        f"unknown condition key '{path}'{hint} (use a fact path such as gpu.arch, field.<sglang field>, "
        f"env.SGLANG_<NAME>, or all/any/not)"
    )


def _operand(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"ref"}:
        _check_path(value["ref"])
        return Ref(ref=value["ref"])
    return value


def _atom(path: str, spec: Any) -> Atom:
    _check_path(path)
    if isinstance(spec, dict):
        if len(spec) != 1:
            raise ValueError(
                f"'{path}' must have exactly one operator, but got {sorted(spec)}; "
                "write several conditions under 'all:'"
            )
        op, value = next(iter(spec.items()))
        if op == "ref":
            return Atom(path=path, op="eq", value=_operand(spec))
        if op not in OPERATORS:
            from servetune.errors import did_you_mean

            guess = did_you_mean(str(op), OPERATORS)
            raise ValueError(
                f"unknown operator '{op}' for '{path}'"
                + (f"; did you mean '{guess}'?" if guess else "")
                + f" (operators: {', '.join(OPERATORS)})"
            )
        if op in ("in", "not_in") and not isinstance(value, list):
            raise ValueError(f"'{op}' needs a list, but got {value!r}")
        if op == "between" and not (isinstance(value, list) and len(value) == 2):
            raise ValueError(f"'between' needs [low, high], but got {value!r}")
        if op == "is_set" and not isinstance(value, bool):
            raise ValueError(f"'is_set' needs true or false, but got {value!r}")
        return Atom(path=path, op=op, value=_operand(value))
    if isinstance(spec, list):
        raise ValueError(f"'{path}' got a list; write {{in: [...]}} to match any of several values")
    return Atom(path=path, op="eq", value=spec)


def parse_condition(raw: Any) -> Condition:
    """Parse the YAML form of `when` into a condition tree."""
    if isinstance(raw, (Atom, AllOf, AnyOf, Not)):
        return raw
    if raw is None:
        return AllOf(all=())
    if isinstance(raw, list):
        return AllOf(all=tuple(parse_condition(item) for item in raw))
    if not isinstance(raw, dict):
        raise ValueError(f"a condition must be a mapping of fact paths to values, but got {raw!r}")
    parts: list[Condition] = []
    for key, spec in raw.items():
        if key == "all":
            if not isinstance(spec, list):
                raise ValueError("'all' needs a list of conditions")
            parts.append(AllOf(all=tuple(parse_condition(item) for item in spec)))
        elif key == "any":
            if not isinstance(spec, list) or not spec:
                raise ValueError("'any' needs a non-empty list of conditions")
            parts.append(AnyOf(any=tuple(parse_condition(item) for item in spec)))
        elif key == "not":
            parts.append(Not(**{"not": parse_condition(spec)}))
        else:
            parts.append(_atom(str(key), spec))
    return parts[0] if len(parts) == 1 else AllOf(all=tuple(parts))


class Derived(BaseModel):
    """A value copied from another resolved field (`{from: max_running_requests, max: 512}`)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True, populate_by_name=True
    )

    source: str = Field(alias="from")
    """The SGLang field whose resolved value is copied."""
    min: float | None = None
    """Lower clamp."""
    max: float | None = None
    """Upper clamp."""


class Literal_(BaseModel):
    """An explicit literal (needed for mapping values: `{value: {...}}`)."""

    model_config = _FROZEN

    value: Any
    """The literal value."""


SetValue = Union[Derived, Literal_, str, int, float, bool, list, None]


def parse_set_value(raw: Any) -> Any:
    """Normalise a `set:` value: `{from: ...}` → Derived, `{value: ...}` → its literal."""
    if isinstance(raw, dict):
        if "from" in raw:
            return Derived.model_validate(raw)
        if set(raw) == {"value"}:
            return raw["value"]
        raise ValueError(
            f"a mapping value must be {{from: FIELD}} (derived) or {{value: ...}} (literal), but got keys {sorted(raw)}"
        )
    return raw


def parse_set_mapping(value: Any) -> dict[str, Any]:
    """Normalise a whole `set:` block (rules and presets share the shape)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"'set' must be a mapping of SGLang fields / SGLANG_* env vars to values, but got {value!r}")
    return {str(k): parse_set_value(v) for k, v in value.items()}


class Rule(BaseModel):
    """One rule: when the facts and resolved fields match `when`, apply `set`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True, arbitrary_types_allowed=True
    )

    id: str = Field(pattern=_ID)
    """Permanent kebab-case id, scope first (e.g. `qwen3-vl-hopper-cuda-ipc-transport`)."""
    summary: str = Field(min_length=1)
    """One line: what the rule does."""
    why: str = Field(min_length=1)
    """The evidence and reasoning behind the rule: shown by `servetune rules show` and in docs/rules.md, and
    as a note when a pin, preset or trial breaks a `require` rule (`explain` shows the `summary`)."""
    references: tuple[str, ...] = ()
    """Links to the code, PR or benchmark behind the rule."""
    kind: Literal["prefer", "require"] = "prefer"
    """`prefer`: a recommendation (below presets, trials and pins). `require`: a constraint
    checked last; a pin or trial that breaks it is an error."""
    status: Literal["stable", "preview", "deprecated"] = "stable"
    """Maturity, as in ruff's rule registry."""
    since: str = "0.1.0"
    """servetune version that introduced the rule."""
    sglang: str | None = None
    """SGLang version window (`>=0.5.10,<0.6`); None = every version."""
    when: Any = Field(default=None, validate_default=True)
    """The selector: a condition tree (see the module docstring)."""
    set: dict[str, Any] = Field(default_factory=dict)
    """SGLang fields and `SGLANG_*` env vars to set, with exact names."""
    forbid: bool = False
    """`require` rules only: the combination in `when` is invalid (an error citing `why`)."""
    supersedes: tuple[str, ...] = ()
    """Ids of same-layer rules this one replaces when both match."""

    @field_validator("when", mode="before")
    @classmethod
    def _parse_when(cls, value: Any) -> Any:
        return parse_condition(value)

    @field_validator("set", mode="before")
    @classmethod
    def _parse_set(cls, value: Any) -> Any:
        return parse_set_mapping(value)

    @field_validator("sglang")
    @classmethod
    def _check_window(cls, value: str | None) -> str | None:
        if value is not None:
            from servetune.versions import parse_specifier

            parse_specifier(value)
        return value

    @model_validator(mode="after")
    def _check_shape(self) -> Rule:
        if self.forbid and self.kind != "require":
            raise ValueError("'forbid: true' is only allowed on 'kind: require' rules")
        if self.forbid and self.set:
            raise ValueError("a 'forbid' rule has no 'set'")
        if not self.forbid and not self.set:
            raise ValueError("a rule needs 'set' (or, for a require rule, 'forbid: true')")
        return self
