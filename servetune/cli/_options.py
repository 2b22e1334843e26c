"""Options shared by the commands that resolve a launch (resolve, explain, launch, bench, tune).

from servetune.cli._options import ResolveOpts, resolve_from_opts
def cmd(model: ModelOpt, gpu: GpuOpt = None, ...):
    res = resolve_from_opts(ResolveOpts(model=model, gpu=gpu, ...))
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

HW, MODEL, WORK, OUT, TUNE = "Hardware", "Model", "Workload", "Output", "Tuning"

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Bundled model name, HF id, or local model directory (holding config.json).",
        rich_help_panel=MODEL,
    ),
]
GpuOpt = Annotated[
    Optional[str],
    typer.Option(
        "--gpu",
        help="Named GPU profile, e.g. h200 or h100-sxm:8 (see `servetune hardware --list`). "
        "Without --gpu/--hardware, NVML detects this machine's GPUs.",
        rich_help_panel=HW,
    ),
]
HardwareOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--hardware", help="Hardware profile file written by `servetune hardware --save`.", rich_help_panel=HW
    ),
]
WorkloadOpt = Annotated[
    Optional[str],
    typer.Option(
        "--workload",
        "-w",
        help="Workload name or file; its facts (e.g. single-use vs repeated images) feed the rules.",
        rich_help_panel=WORK,
    ),
]
VersionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--sglang-version",
        help="Target SGLang version (default: the installed SGLang if it has a catalog, else the newest catalog).",
        rich_help_panel=MODEL,
    ),
]
PresetOpt = Annotated[
    Optional[str],
    typer.Option(
        "--preset", "-p", help="Preset name or file (applied above rules, below --set).", rich_help_panel=MODEL
    ),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        "-s",
        help="Pin an SGLang field: FIELD=VALUE (repeatable). Pins win over everything but `require` rules.",
        rich_help_panel=MODEL,
    ),
]
EnvOpt = Annotated[
    Optional[list[str]],
    typer.Option("--env", "-e", help="Pin an env var: NAME=VALUE (repeatable).", rich_help_panel=MODEL),
]
NnodesOpt = Annotated[
    Optional[int], typer.Option("--nnodes", min=1, help="Nodes the server spans (pins nnodes).", rich_help_panel=HW)
]
TpOpt = Annotated[
    Optional[int], typer.Option("--tp", min=1, help="Tensor-parallel size (pins tp_size).", rich_help_panel=HW)
]
RulesOpt = Annotated[
    Optional[list[Path]], typer.Option("--rules", help="Extra rule file (repeatable).", rich_help_panel=MODEL)
]
NoRulesOpt = Annotated[
    bool,
    typer.Option(
        "--no-rules", help="Apply no rules: SGLang's own defaults plus preset and pins.", rich_help_panel=MODEL
    ),
]


@dataclass
class ResolveOpts:
    """The resolve options, gathered (one per command run)."""

    model: str | None = None
    gpu: str | None = None
    hardware: Path | None = None
    workload: str | None = None
    sglang_version: str | None = None
    preset: str | None = None
    sets: list[str] = field(default_factory=list)
    envs: list[str] = field(default_factory=list)
    nnodes: int | None = None
    tp: int | None = None
    rules: list[Path] = field(default_factory=list)
    no_rules: bool = False

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `servetune.context.Context.build` (all but the model)."""
        return dict(
            gpu=self.gpu,
            hardware=self.hardware,
            workload=self.workload,
            sglang_version=self.sglang_version,
            preset=self.preset,
            sets=self.sets or [],
            envs=self.envs or [],
            nnodes=self.nnodes,
            tp=self.tp,
            rules_files=self.rules or [],
            use_rules=not self.no_rules,
        )

    def context(self, **overrides: Any):
        """Build the command's `Context` (detection, catalogs, rules, preset: all the reading, once)."""
        from servetune.context import Context

        kwargs = self.kwargs()
        kwargs.update(overrides)
        return Context.build(self.model, **kwargs)


_RESOLVE_PARAMS: dict[str, tuple[Any, Any]] = {
    "model": (ModelOpt, ...),
    "gpu": (GpuOpt, None),
    "hardware": (HardwareOpt, None),
    "workload": (WorkloadOpt, None),
    "sglang_version": (VersionOpt, None),
    "preset": (PresetOpt, None),
    "sets": (SetOpt, None),
    "envs": (EnvOpt, None),
    "nnodes": (NnodesOpt, None),
    "tp": (TpOpt, None),
    "rules": (RulesOpt, None),
    "no_rules": (NoRulesOpt, False),
}


def _option_group(
    arg: str, params: dict[str, tuple[Any, Any]], build: Callable[[dict[str, Any]], Any], exclude: tuple[str, ...]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that adds the options in `params` to a command and hands them to it gathered as
    one argument, `arg` (built by `build` from their values). Typer reads the wrapper's signature:
    the command's own parameters (less `arg`), then the group's. Decorators of two groups stack."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values() if p.name != arg]
        taken = {p.name for p in own}
        names = [n for n in params if n not in exclude and n not in taken]
        kw = inspect.Parameter.KEYWORD_ONLY
        shared = [inspect.Parameter(n, kw, annotation=params[n][0], default=params[n][1]) for n in names]
        own = [p.replace(kind=kw) for p in own]
        # parameters without a default first: Python's signature rules, though all are keyword-only
        params_out = [p for p in own + shared if p.default is inspect.Parameter.empty]
        params_out += [p for p in own + shared if p.default is not inspect.Parameter.empty]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            gathered = {n: kwargs.pop(n) for n in names}
            return func(**{arg: build(gathered)}, **kwargs)

        wrapper.__signature__ = inspect.Signature(params_out)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params_out}
        return wrapper

    return decorate


def _resolve_opts(values: dict[str, Any]) -> ResolveOpts:
    for key in ("sets", "envs", "rules"):
        if key in values:
            values[key] = values[key] or []
    return ResolveOpts(**values)


def resolve_options(*, exclude: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the resolve options, declared once here: the command takes `opts: ResolveOpts`.

        @app.command("resolve")
        @resolve_options()
        def resolve_cmd(opts: ResolveOpts, fmt: FormatOpt = ...):
            ctx = opts.context()

    Options in `exclude` are left out (a command that declares its own `--model` or `--workload`
    sets them on `opts` itself).
    """
    return _option_group("opts", _RESOLVE_PARAMS, _resolve_opts, exclude)


def resolve_from_opts(opts: ResolveOpts, **overrides: Any):
    """Resolve once from CLI options (`opts.context(**overrides).resolve()`)."""
    return opts.context(**overrides).resolve()


def check_url(url: str, option: str = "--url") -> str:
    """`url` if it is an http(s) URL with a host and a valid port.

    Raises:
        SpecError: naming `option`, with an example.
    """
    from urllib.parse import urlsplit

    from servetune.errors import SpecError

    example = f"e.g. {option} http://127.0.0.1:30000"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as exc:
        raise SpecError(f"{option} {url!r} is not a valid URL: {exc}", help=example) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{option} {url!r} is not an http:// or https:// URL with a host", help=example)
    return url


def parse_gpu_ids(text: str | None, option: str = "--gpus") -> tuple[str, ...]:
    """GPU ids from `0,1,2,3` (empty when `text` is None or empty).

    Raises:
        SpecError: an id that is not a non-negative integer, or one given twice.
    """
    from servetune.errors import SpecError

    if not text:
        return ()
    ids = tuple(part.strip() for part in text.split(","))
    bad = [i for i in ids if not i.isdigit()]
    if bad:
        raise SpecError(
            f"{option} takes GPU ids (non-negative integers), but got {', '.join(repr(b) for b in bad)}",
            help=f"e.g. {option} 0,1,2,3 (`nvidia-smi -L` lists them)",
        )
    if len(set(ids)) != len(ids):
        raise SpecError(f"{option} names a GPU twice: {text!r}", help=f"e.g. {option} 0,1,2,3")
    return ids


CAPACITY = "Capacity search"
StartRateOpt = Annotated[
    Optional[float],
    typer.Option(
        "--start-rate",
        min=0.001,
        help="First rate of the capacity search (req/s; default: the workload's request_rate, else 4). "
        "A tuning study's later trials start at the incumbent's capacity.",
        rich_help_panel=CAPACITY,
    ),
]
ResolutionOpt = Annotated[
    float,
    typer.Option(
        "--resolution",
        min=0.01,
        max=1.0,
        help="Stop bisecting when the highest met and lowest missed rates are this close (relative); "
        "the backlog test flags growth of half this share of the rate.",
        rich_help_panel=CAPACITY,
    ),
]
StepSecondsOpt = Annotated[
    float,
    typer.Option(
        "--step-seconds",
        min=1.0,
        help="Longest run of one capacity step (s): a step stops at its verdict, and at this length an open "
        "one is undecided (not met). Lengthened at low rates to reach the requests a verdict needs.",
        rich_help_panel=CAPACITY,
    ),
]
ConfidenceOpt = Annotated[
    float,
    typer.Option(
        "--confidence",
        min=0.5,
        max=0.999,
        help="Confidence of each step's SLO verdicts (a sequential binomial test). A p99 SLO is met at 95% "
        "after 433 judged requests with none over (685 with one, 882 with two), at 99% after 622; p90 at 95% "
        "after 41.",
        rich_help_panel=CAPACITY,
    ),
]
StepWarmupOpt = Annotated[
    float,
    typer.Option(
        "--step-warmup-seconds",
        min=0.0,
        help="Seconds of arrivals at each step's start that no verdict judges (the server fills its batch).",
        rich_help_panel=CAPACITY,
    ),
]
HorizonOpt = Annotated[
    float,
    typer.Option(
        "--soak-horizon",
        min=1.0,
        help="The backlog test extrapolates requests in flight and queueing delay to this many seconds after "
        "a step's start: a step whose queue would break the TTFT bound by then is missed.",
        rich_help_panel=CAPACITY,
    ),
]
BacklogOpt = Annotated[
    float,
    typer.Option(
        "--backlog-seconds",
        min=1.0,
        help="Seconds of judged arrivals before the backlog test first decides (a shorter window reads an "
        "arrival burst as a backlog); a step is met no sooner.",
        rich_help_panel=CAPACITY,
    ),
]
WaveOpt = Annotated[
    int,
    typer.Option(
        "--warmup-wave",
        min=0,
        help="Requests sent all at once after each launch, before the first step, and judged by nothing "
        "(kernels compile and caches fill on first use); 0: none.",
        rich_help_panel=CAPACITY,
    ),
]
SglangCmdOpt = Annotated[
    Optional[str],
    typer.Option(
        "--sglang-cmd",
        help="Command that starts SGLang (the argv is appended); default $SERVETUNE_SGLANG_CMD or "
        "`python -m sglang.launch_server`.",
    ),
]
ClientOpt = Annotated[
    str, typer.Option("--client", help="Benchmark client: auto, builtin (no SGLang needed) or sglang (bench_serving).")
]


@dataclass(frozen=True)
class CapacityOpts:
    """The capacity search options, gathered."""

    start_rate: float | None = None
    resolution: float = 0.05
    step_seconds: float = 120.0
    confidence: float = 0.95
    step_warmup_seconds: float = 5.0
    soak_horizon: float = 300.0
    backlog_seconds: float = 30.0
    warmup_wave: int = 64

    def search(self, workload: Any, **more: Any):
        """The `CapacitySearch` they describe (start: the option, the workload's rate, else 4 req/s)."""
        from servetune.runner import CapacitySearch

        return CapacitySearch.for_workload(
            workload,
            start_rate=self.start_rate,
            resolution=self.resolution,
            step_s=self.step_seconds,
            confidence=self.confidence,
            warmup_s=self.step_warmup_seconds,
            horizon_s=self.soak_horizon,
            backlog_s=self.backlog_seconds,
            wave=self.warmup_wave,
            **more,
        )


_CAPACITY_PARAMS: dict[str, tuple[Any, Any]] = {
    "start_rate": (StartRateOpt, None),
    "resolution": (ResolutionOpt, CapacityOpts.resolution),
    "step_seconds": (StepSecondsOpt, CapacityOpts.step_seconds),
    "confidence": (ConfidenceOpt, CapacityOpts.confidence),
    "step_warmup_seconds": (StepWarmupOpt, CapacityOpts.step_warmup_seconds),
    "soak_horizon": (HorizonOpt, CapacityOpts.soak_horizon),
    "backlog_seconds": (BacklogOpt, CapacityOpts.backlog_seconds),
    "warmup_wave": (WaveOpt, CapacityOpts.warmup_wave),
}


def capacity_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the capacity search options (`--start-rate`, `--resolution`, `--step-seconds`,
    `--confidence`, `--step-warmup-seconds`, `--soak-horizon`, `--backlog-seconds`, `--warmup-wave`), declared
    once here:
    the command takes `cap: CapacityOpts`."""
    return _option_group("cap", _CAPACITY_PARAMS, lambda values: CapacityOpts(**values), ())
