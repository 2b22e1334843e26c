"""Search-space declarations: Optuna distributions written as data.

    tune:
      max_running_requests: {int: [32, 512], log: true}
      mem_fraction_static: {float: [0.75, 0.92], step: 0.01}
      schedule_policy: {choice: [fcfs, lpm]}
      SGLANG_MM_FEATURE_CACHE_MB: {int: [512, 4096], step: 512}

Keys are SGLang field names or `SGLANG_*` env vars, validated against the target catalog.
A `choice` may hold `null`: the trial then leaves the field unset, so the lower layers (rules,
SGLang's own resolution) decide it.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class IntDistribution(BaseModel):
    """An integer range, like `optuna.distributions.IntDistribution`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True, populate_by_name=True
    )

    bounds: tuple[int, int] = Field(alias="int")
    """`[low, high]`, both included."""
    step: int = Field(default=1, ge=1)
    """Spacing between candidate values; cannot be combined with `log`."""
    log: bool = False
    """Sample on a log scale (low must be ≥ 1)."""

    @model_validator(mode="after")
    def _check(self) -> IntDistribution:
        low, high = self.bounds
        if low > high:
            raise ValueError(f"`low <= high` must hold, but got (low={low}, high={high})")
        if self.log and (self.step != 1 or low < 1):
            raise ValueError(f"`log: true` needs step 1 and low >= 1, but got (low={low}, step={self.step})")
        return self

    def contains(self, value: Any) -> bool:
        """True when `value` is one of the candidates (in range and on the step grid)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            return False
        low, high = self.bounds
        return low <= value <= high and (int(value) - low) % self.step == 0


class FloatDistribution(BaseModel):
    """A float range, like `optuna.distributions.FloatDistribution`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True, populate_by_name=True
    )

    bounds: tuple[float, float] = Field(alias="float")
    """`[low, high]`, both included."""
    step: float | None = Field(default=None, gt=0)
    """Spacing between candidate values; cannot be combined with `log`."""
    log: bool = False
    """Sample on a log scale (low must be > 0)."""

    @model_validator(mode="after")
    def _check(self) -> FloatDistribution:
        low, high = self.bounds
        if low > high:
            raise ValueError(f"`low <= high` must hold, but got (low={low}, high={high})")
        if self.log and (self.step is not None or low <= 0):
            raise ValueError(f"`log: true` needs no step and low > 0, but got (low={low}, step={self.step})")
        return self

    def contains(self, value: Any) -> bool:
        """True when `value` is in range (and on the step grid when there is one)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        low, high = self.bounds
        if not low <= value <= high:
            return False
        if self.step is None:
            return True
        k = (value - low) / self.step
        return abs(k - round(k)) < 1e-6


class ChoiceDistribution(BaseModel):
    """A categorical choice, like `optuna.distributions.CategoricalDistribution`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True, populate_by_name=True
    )

    choices: tuple[Any, ...] = Field(alias="choice", min_length=1)
    """The candidate values (scalars: str, int, float, bool or null; null leaves the field unset)."""

    @model_validator(mode="after")
    def _check(self) -> ChoiceDistribution:
        for value in self.choices:
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"choices must be scalars (str, int, float, bool or null), but got {value!r}")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices must be distinct, but got {list(self.choices)}")
        return self

    def contains(self, value: Any) -> bool:
        """True when `value` is one of the choices (with its type: `1` is not `true`)."""
        return any(type(value) is type(choice) and value == choice for choice in self.choices)


Distribution = Union[IntDistribution, FloatDistribution, ChoiceDistribution]

SearchSpace = dict[str, Distribution]
"""Field or env-var name → distribution."""
