"""Workloads: the traffic a benchmark drives, as data (`servetune/data/workloads/*.yaml`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from servetune.limits import MAX_REQUESTS, MAX_WARMUP_REQUESTS
from servetune.schema.space import ChoiceDistribution, FloatDistribution, IntDistribution

_KINDS = {"int": IntDistribution, "float": FloatDistribution, "choice": ChoiceDistribution}


def _distribution_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return next((cls.__name__ for key, cls in _KINDS.items() if key in value), None)
    return type(value).__name__ if isinstance(value, tuple(_KINDS.values())) else None


TunedDistribution = Annotated[
    Union[
        Annotated[IntDistribution, Tag("IntDistribution")],
        Annotated[FloatDistribution, Tag("FloatDistribution")],
        Annotated[ChoiceDistribution, Tag("ChoiceDistribution")],
    ],
    Discriminator(
        _distribution_kind,
        custom_error_type="distribution_kind",
        custom_error_message="a distribution needs one key of `int`, `float` or `choice`",
    ),
]
"""A search-space distribution, told apart by its key, so errors name only the branch meant."""


class ImageSpec(BaseModel):
    """Images attached to each request of a multimodal workload."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)

    per_request: int = Field(default=1, ge=1)
    """Images in each request."""
    resolution: str = Field(default="720p", pattern=r"^(4k|1080p|720p|360p|[1-9][0-9]*x[1-9][0-9]*)$")
    """`4k`, `1080p`, `720p`, `360p` or `HxW` (height x width, e.g. `720x1280`), as SGLang's client spells it."""
    format: Literal["jpeg", "png"] = "jpeg"
    """Encoding of the images sent."""
    reuse: Literal["unique", "pool"] = "unique"
    """`unique`: every image is new (never repeated within or across runs); `pool`: drawn from a
    small fixed set, so media caches can hit."""
    pool_size: int = Field(default=8, ge=1)
    """Distinct images when `reuse: pool`."""

    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        if self.resolution in _RESOLUTIONS:
            return _RESOLUTIONS[self.resolution]
        height, width = (int(part) for part in self.resolution.split("x"))
        return width, height


_RESOLUTIONS = {"4k": (3840, 2160), "1080p": (1920, 1080), "720p": (1280, 720), "360p": (640, 360)}


class TraceSpec(BaseModel):
    """Requests replayed from a file: the user's own traffic instead of synthetic prompts."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    path: str
    """The trace file, relative to the workload file's folder (or absolute)."""
    format: Literal["jsonl", "sharegpt"] = "jsonl"
    """`jsonl`: one request per line, `{"prompt": ...}` or `{"messages": [...]}`, optional `images`
    (paths or URLs), `output_tokens` and `arrival_s`; `sharegpt`: a ShareGPT file (a JSON list, or
    JSONL, of `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}`)."""
    replay: Literal["rate", "recorded"] = "rate"
    """`rate`: send in the workload's shape (`request_rate` / `max_concurrency`); `recorded`: at the
    trace's own `arrival_s` times, divided by `time_scale`."""
    time_scale: float = Field(default=1.0, gt=0)
    """With `replay: recorded`, 2.0 replays twice as fast as recorded."""


class Workload(BaseModel):
    """A named benchmark workload: request shapes, load shape, warmup and seed."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Kebab-case name, e.g. `single-image-stream`."""
    summary: str
    """One line: what traffic this stands for."""
    kind: Literal["text", "multimodal"] = "text"
    """`multimodal` workloads send images."""
    requests: int = Field(default=256, ge=1, le=MAX_REQUESTS)
    """Measured requests per run (`--requests N` overrides); at most `servetune.limits.MAX_REQUESTS`."""
    tune_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    """Measured requests per trial of `servetune tune` (`--requests N` overrides); None = `requests`.
    For a study that should measure at another length than one benchmark run. Longer trials give
    the pruner more room (it decides after two waves whatever the length), but on the H200 they
    did not measure tighter (docs/h200-results.md section 6), so the shipped workloads leave it unset."""
    max_concurrency: int | None = Field(default=64, ge=1)
    """Requests in flight at most; None = unbounded."""
    request_rate: float | None = Field(default=None, gt=0)
    """Poisson arrival rate in req/s; None = send as fast as concurrency allows."""
    input_tokens: int = Field(default=128, ge=1)
    """Text input length in tokens."""
    output_tokens: int = Field(default=128, ge=1)
    """Output length in tokens (EOS ignored)."""
    range_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """Lengths are drawn uniformly from `[max(1, int(len * range_ratio)), len]`, as SGLang's
    `--random-range-ratio`; 1.0 keeps them fixed."""
    warmup_requests: int = Field(default=8, ge=0, le=MAX_WARMUP_REQUESTS)
    """Requests sent and discarded before measuring; at most `servetune.limits.MAX_WARMUP_REQUESTS`."""
    seed: int = 1
    """Seed for prompt text and lengths (images stay unique across runs regardless)."""
    images: ImageSpec | None = None
    """Images per request; required when `kind: multimodal`."""
    steady_trim: float = Field(default=0.1, ge=0.0, lt=0.5)
    """Fraction of completions left out at each end of the steady-state window (ramp-up, drain)."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """A request that takes longer counts as failed."""
    tune: dict[str, TunedDistribution] = Field(default_factory=dict)
    """Default search space for `servetune tune` with this workload."""
    trace: TraceSpec | None = None
    """Replay requests from a trace file instead of synthetic prompts (lengths and images then come
    from the trace; a trace shorter than `requests` is cycled)."""

    @model_validator(mode="after")
    def _check_images(self) -> Workload:
        if self.kind == "multimodal" and self.images is None and self.trace is None:
            raise ValueError("`images` must be set when `kind: multimodal`, but got none")
        if self.kind == "text" and self.images is not None:
            raise ValueError("`images` needs `kind: multimodal`, but got `kind: text`")
        return self
