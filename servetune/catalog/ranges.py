"""Value ranges SGLang needs but its argument parser does not check.

SGLang's parser takes any integer for `--pp-size` and any float for `--mem-fraction-static`; a value
out of range fails later, at start-up (an assertion, a zero-sized pool, an out-of-memory) or not at
all (a server that never schedules). servetune refuses such values where they are written (a rule,
preset, pin or trial value, through `coerce_field`), with the range and the reason. A field missing
from a release's catalog is never checked here; fields not listed are only type-checked.
(`prefill_decode_interval >= 0` is the built-in `require` rule `prefill-decode-interval-non-negative`,
which names the rule that a value breaks.)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FIELD_RANGES", "ValueRange", "check_range", "distribution_problem", "value_range"]


@dataclass(frozen=True)
class ValueRange:
    """Allowed numbers: `min`/`max` inclusive, `gt`/`lt` exclusive; `also` are allowed besides (a sentinel)."""

    why: str
    min: float | None = None
    max: float | None = None
    gt: float | None = None
    lt: float | None = None
    also: tuple[float, ...] = ()

    def text(self) -> str:
        """`an integer >= 1`-style wording of the range: `>= 1`, `> 0 and < 1`, `-1 or >= 1`."""
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.gt is not None:
            parts.append(f"> {self.gt:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        if self.lt is not None:
            parts.append(f"< {self.lt:g}")
        bound = " and ".join(parts)
        return " or ".join([*(f"{a:g}" for a in self.also), bound]) if self.also else bound

    def holds(self, value: float, *, sentinels: bool = True) -> bool:
        """True when `value` is allowed (`sentinels=False`: only inside the range proper)."""
        if sentinels and value in self.also:
            return True
        return not (
            (self.min is not None and value < self.min)
            or (self.gt is not None and value <= self.gt)
            or (self.max is not None and value > self.max)
            or (self.lt is not None and value >= self.lt)
        )


_PARALLEL = "a number of GPUs or ranks, which SGLang divides the work by"

FIELD_RANGES: dict[str, ValueRange] = {
    "tp_size": ValueRange(_PARALLEL, min=1),
    "pp_size": ValueRange(_PARALLEL, min=1),
    "dp_size": ValueRange(_PARALLEL, min=1),
    "ep_size": ValueRange(_PARALLEL, min=1),
    "nnodes": ValueRange("a number of nodes", min=1),
    "mem_fraction_static": ValueRange(
        "a share of each GPU's memory for weights and the KV pool; 1 or more leaves nothing for activations",
        gt=0,
        lt=1,
    ),
    "max_running_requests": ValueRange("a count of requests running at once; 0 would never schedule one", min=1),
    "max_queued_requests": ValueRange("a count of waiting requests", min=1),
    "max_total_tokens": ValueRange("the KV pool's size in tokens", min=1),
    "max_prefill_tokens": ValueRange("tokens in one prefill batch", min=1),
    "chunked_prefill_size": ValueRange("tokens per prefill chunk; -1 turns chunking off", min=1, also=(-1,)),
    "context_length": ValueRange("a length in tokens", min=1),
    "page_size": ValueRange("tokens per KV page", min=1),
    "cuda_graph_max_bs": ValueRange("the largest batch captured in a CUDA graph", min=1),
    "cuda_graph_max_bs_decode": ValueRange("the largest decode batch captured in a CUDA graph", min=1),
    "num_continuous_decode_steps": ValueRange("decode steps run back to back", min=1),
    "stream_interval": ValueRange("tokens per streamed chunk", min=1),
    "schedule_conservativeness": ValueRange("a scale on the scheduler's token estimate", gt=0),
    "mm_processor_worker_num": ValueRange("a count of processor workers (0: in the tokenizer process)", min=0),
    "tokenizer_worker_num": ValueRange("a count of tokenizer processes", min=1),
    "watchdog_timeout": ValueRange("seconds before a stuck scheduler is killed", gt=0),
    "mm_preprocess_cache_size_mb": ValueRange("a cache size in MiB", min=0),
}
"""Checked ranges by field name. `servetune catalog show` and docs/rules.md list them."""


def value_range(name: str) -> ValueRange | None:
    """The checked range of field `name`, if it has one."""
    return FIELD_RANGES.get(name)


def check_range(name: str, value: object) -> None:
    """Raise ValueError naming the range and its reason when `value` is a number outside `name`'s range."""
    r = FIELD_RANGES.get(name)
    if r is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not r.holds(value):
        raise ValueError(f"{value!r} is out of range: {name} must be {r.text()} ({r.why})")


def distribution_problem(name: str, dist: object) -> str | None:
    """Why a search-space distribution of field `name` leaves the values SGLang can use, else None: a
    choice out of range, or an interval end out of the range proper (a sentinel such as -1 is a
    choice, never an interval end). `dist` has `choices`, or `bounds` (low, high)."""
    r = FIELD_RANGES.get(name)
    if r is None:
        return None
    choices = getattr(dist, "choices", None)
    if choices is not None:
        bad = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool) and not r.holds(c)]
    else:
        bad = [v for v in getattr(dist, "bounds", ()) if not r.holds(v, sentinels=False)]
    if not bad:
        return None
    return f"{name}: {', '.join(map(str, bad))} out of range: it must be {r.text()} ({r.why})"
