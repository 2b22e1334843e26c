"""Command-line options declared once, beside the field each one fills.

A settings dataclass carries its options on its fields' types:

    @dataclass(kw_only=True)
    class CapacityOptions:
        resolution: Annotated[
            float, opt("--resolution", min=0.01, max=1.0, panel=CAPACITY_PANEL, help="Stop bisecting when ...")
        ] = 0.05

`servetune.cli._declare` turns such fields into the command's Typer options and the parsed values
back into the dataclass, so an option is written in one place (its type, default, flags, help and
panel) and what a command, a runner or a study receives is that dataclass. Adding an option is one
field plus its use. A flag several settings share (`--slo`, `--sglang-cmd`, `--client`, `--json`)
is one `Opt` constant here, used by each field that takes it.

Stdlib only: every layer may declare options (`servetune.settings`: the capacity search's
`CapacityOptions` and a study's `TuneOptions`; the context's `ResolveOptions`); only the CLI imports Typer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLIENT",
    "JSON",
    "OBJECTIVE",
    "OUT",
    "QUIET",
    "RUN_DIR",
    "SGLANG_CMD",
    "SLO",
    "STARTUP_TIMEOUT",
    "Opt",
    "opt",
    "requests_opt",
]


@dataclass(frozen=True)
class Opt:
    """One command-line option: its flags, help, help panel and bounds."""

    flags: tuple[str, ...]
    """`("--model", "-m")`, or a switch pair `("--model-seed/--no-model-seed",)`."""
    help: str
    panel: str | None = None
    """The `--help` panel it is listed under (None: Options)."""
    min: float | None = None
    max: float | None = None
    parse: Callable[[Any], Any] | None = None
    """Turns what the command line gave (after Typer's own parsing) into the field's value, e.g. a
    duration `30m` into seconds; not called for an option left out."""
    cli_type: Any = None
    """The type Typer parses when it is not the field's own (`str` for a duration stored as seconds)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further `typer.Option` keywords (`show_default`, `metavar`, ...)."""


def opt(
    *flags: str,
    help: str,
    panel: str | None = None,
    min: float | None = None,
    max: float | None = None,
    parse: Callable[[Any], Any] | None = None,
    cli_type: Any = None,
    **extra: Any,
) -> Opt:
    """An `Opt` (the keyword form reads best in a field's `Annotated`)."""
    return Opt(tuple(flags), help, panel, min, max, parse, cli_type, extra)


SLO_PANEL = "SLO and capacity"

SLO = opt(
    "--slo",
    help="A bound STAT_METRIC_ms<=N on a latency (repeatable): STAT p50/p90/p95/p99/mean, METRIC ttft/tpot/itl/e2e, "
    "e.g. --slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=25. A run reports each verdict and the goodput, a capacity "
    "search finds the highest rate at which all hold; tune's throughput objectives also take any reported metric "
    "with <= or >= as a constraint (e.g. steady_request_throughput>=10).",
    panel=SLO_PANEL,
)
SGLANG_CMD = opt(
    "--sglang-cmd",
    help="Command that starts SGLang (the argv is appended); default $SERVETUNE_SGLANG_CMD or "
    "`python -m sglang.launch_server`.",
)
CLIENT = opt("--client", help="Benchmark client: auto, builtin (no SGLang needed) or sglang (SGLang's bench_serving).")
JSON = opt(
    "--json",
    help="Print the result as JSON on stdout (bench: with --url the metrics, request_throughput at the top level; a "
    "managed run {metrics, run_dir, timings}; with --capacity or --soak-seconds {capacity or soak, run_dir, plots}).",
)
QUIET = opt(
    "--quiet",
    "-q",
    help="Print less: no progress lines (tune); the server log not copied to stdout (launch; it is "
    "still written to the run directory).",
)
RUN_DIR = opt(
    "--run-dir",
    help="Directory for the run's files: logs, metrics, every request (default: a new one under "
    "$SERVETUNE_RUNS_DIR or ./runs; tune: tune/<study> there, with the study's SQLite file).",
)
OUT = opt(
    "--out",
    "-o",
    help="Write the result to this file: resolve's launch in --format; tune's best config as a preset YAML.",
)
STARTUP_TIMEOUT = opt("--startup-timeout", min=0.001, help="Seconds a launch may take to become ready.")
OBJECTIVE = opt(
    "--objective",
    help="throughput (steady req/s), token_throughput, capacity (the highest Poisson rate at which every latency "
    "--slo holds), or, for tune, a Pareto pair like throughput,p99_ttft.",
)


def requests_opt(maximum: int) -> Opt:
    """`--requests`, bounded by the runs' stated maximum (`servetune.limits.MAX_REQUESTS`)."""
    return opt(
        "--requests", "-n", min=1, max=maximum,
        help="Measured requests per run: bench's, compare's throughput runs, a study's trial (default: the "
        f"workload's count; a study: its tune_requests, else its requests); at most {maximum:,}. Runs of "
        "different length are not comparable.",
    )  # fmt: skip
