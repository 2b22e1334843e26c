"""`servetune compare`: two configs, fresh launches interleaved for N rounds, B/A with a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from servetune.cli._options import (
    CapacityOpts,
    ClientOpt,
    ResolveOpts,
    SglangCmdOpt,
    capacity_options,
    resolve_options,
)
from servetune.limits import MAX_REQUESTS

_SIDES = "Configs A and B"
_MEASURE = "Measurement"
_CAPACITY = "Capacity (--objective capacity)"


@resolve_options(exclude=("workload",))
@capacity_options()
def compare_command(
    opts: ResolveOpts,
    cap: CapacityOpts,
    workload: Annotated[
        str, typer.Option("--workload", "-w", help="Workload name or file, run against both configs.")
    ] = "text-chat",
    a: Annotated[
        Optional[str],
        typer.Option(
            "--a",
            help="Config A: a preset (name or file) or a run directory (its resolved.yaml).",
            rich_help_panel=_SIDES,
        ),
    ] = None,
    b: Annotated[
        Optional[str],
        typer.Option(
            "--b",
            help="Config B: a preset (name or file) or a run directory (its resolved.yaml).",
            rich_help_panel=_SIDES,
        ),
    ] = None,
    a_set: Annotated[
        Optional[list[str]],
        typer.Option(
            "--a-set", help="A field of config A: FIELD=VALUE (repeatable; over --a).", rich_help_panel=_SIDES
        ),
    ] = None,
    b_set: Annotated[
        Optional[list[str]],
        typer.Option(
            "--b-set", help="A field of config B: FIELD=VALUE (repeatable; over --b).", rich_help_panel=_SIDES
        ),
    ] = None,
    a_no_rules: Annotated[
        bool, typer.Option("--a-no-rules", help="Config A without rules (SGLang's defaults).", rich_help_panel=_SIDES)
    ] = False,
    b_no_rules: Annotated[
        bool, typer.Option("--b-no-rules", help="Config B without rules (SGLang's defaults).", rich_help_panel=_SIDES)
    ] = False,
    rounds: Annotated[
        int, typer.Option("--rounds", min=1, help="Rounds; each launches A, then B.", rich_help_panel=_MEASURE)
    ] = 3,
    objective: Annotated[
        str,
        typer.Option(
            "--objective", help="throughput (steady req/s) or capacity (needs --slo).", rich_help_panel=_MEASURE
        ),
    ] = "throughput",
    slo: Annotated[
        Optional[list[str]],
        typer.Option(
            "--slo",
            help="Latency SLO STAT_METRIC_ms<=N for --objective capacity (repeatable).",
            rich_help_panel=_CAPACITY,
        ),
    ] = None,
    requests: Annotated[
        Optional[int],
        typer.Option(
            "--requests",
            min=1,
            max=MAX_REQUESTS,
            help=f"Measured requests per throughput run (at most {MAX_REQUESTS:,}).",
            rich_help_panel=_MEASURE,
        ),
    ] = None,
    sglang_cmd: SglangCmdOpt = None,
    client: ClientOpt = "auto",
    run_dir: Annotated[Optional[Path], typer.Option("--run-dir", help="Directory for the runs' files.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare two configs on one workload: fresh launches A B A B..., B/A per round, its median,
    min-max and stdev, and a verdict (better / worse / not distinguishable from noise)."""
    from servetune.bench import choose_client
    from servetune.bench.slo import parse_slos
    from servetune.bench.workloads import load_workload
    from servetune.cli._output import check_output_dir
    from servetune.errors import SpecError
    from servetune.launch import LaunchOptions, check_launch, default_run_dir
    from servetune.runner import SglangRunner
    from servetune.tuner.compare import CompareSide, compare, side_layer

    if not (a or a_set or a_no_rules) and not (b or b_set or b_no_rules):
        raise SpecError("compare needs two configs", help="e.g. --a runs/run-1 --b-set cuda_graph_max_bs_decode=64")
    spec = load_workload(workload)
    slos = parse_slos(slo or [])
    search = None
    if objective == "capacity":
        if not slos:
            raise SpecError("--objective capacity needs at least one --slo", help="e.g. --slo p99_ttft_ms<=1000")
        search = cap.search(spec)
    elif slos:
        raise SpecError("--slo is for --objective capacity", help="drop --slo, or add --objective capacity")
    if run_dir is not None:
        check_output_dir(run_dir, "--run-dir")
    if objective != "capacity":
        choose_client(client, spec)  # a bad --client fails before any launch
    options = LaunchOptions(**({"sglang_cmd": sglang_cmd} if sglang_cmd else {}))
    check_launch(options)  # a launch that cannot start leaves no run directory behind
    ctx = opts.context(workload=spec)
    side_a = CompareSide(
        "A", side_layer(ctx, a, a_set or ()), False if a_no_rules else None, _label(a, a_set, a_no_rules)
    )
    side_b = CompareSide(
        "B", side_layer(ctx, b, b_set or ()), False if b_no_rules else None, _label(b, b_set, b_no_rules)
    )
    runner = SglangRunner(options, client=client)
    out_dir = run_dir or default_run_dir("compare")

    measured: list[dict] = []

    def on_round(rnd: int, label: str, value: float | None, failure: str | None) -> None:
        measured.append({"round": rnd, "config": label, "value": value, "failure": failure})
        if not as_json:
            shown = f"{value:.4g}" if value is not None else f"[{failure}]"
            typer.echo(f"round {rnd}  {label}  {shown}", err=True)

    try:
        record = compare(ctx, runner, side_a, side_b, workload=spec, rounds=rounds, run_dir=Path(out_dir),
                         objective=objective, slos=slos, search=search, requests=requests,
                         on_round=on_round)  # fmt: skip
    except KeyboardInterrupt as exc:
        _interrupted(exc, Path(out_dir), measured, rounds, side_a, side_b)
        raise
    if as_json:
        typer.echo(json.dumps(record, indent=2))
        return
    _print(record)


def _interrupted(exc: BaseException, out_dir: Path, measured: list[dict], rounds: int, a, b) -> None:
    """`interrupted.json` in the comparison's directory (the measurements so far), and the one line."""
    from servetune.cli._interrupt import report_interrupt
    from servetune.interrupts import record
    from servetune.launch import write_json

    if out_dir.is_dir():
        write_json(out_dir, "interrupted.json", {"interrupted": record(exc, "compare"), "rounds": rounds,
                                                 "a": a.source, "b": b.source, "measured": measured})  # fmt: skip
    where = f"; the measurements so far in {out_dir}/interrupted.json" if out_dir.is_dir() else ""
    report_interrupt(
        exc,
        f"compare stopped after {len(measured)} of {2 * rounds} measurements (the server was stopped{where})",
        "run the same command again to compare anew",
    )


def _label(source: str | None, sets: list[str] | None, no_rules: bool = False) -> str:
    """What a side launches, as the record and the table name it: its preset and --set pins, on the
    rule-resolved config or on SGLang's own defaults (`--a-no-rules`)."""
    base = "(SGLang's defaults, no rules)" if no_rules else "(the resolved config)"
    parts = [*([source] if source else []), *(f"{s}" for s in sets or [])]
    return " ".join([*parts, *([base] if no_rules or not parts else [])])


def _print(record: dict) -> None:
    ra, rb, unit = record["a"], record["b"], record["unit"]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    typer.echo(f"A: {ra['source']}\nB: {rb['source']}")
    typer.echo(f"{'round':<6} {'A ' + unit:>12} {'B ' + unit:>12} {'B/A':>7}")
    ratios = iter(rb["ratios"])
    for i, (va, vb) in enumerate(zip(ra["values"], rb["values"]), 1):
        ratio = next(ratios) if va and vb is not None else None
        typer.echo(f"{i:<6} {fmt(va):>12} {fmt(vb):>12} {fmt(ratio):>7}")
    if rb["failures"]:
        typer.echo(f"B failed: {', '.join(rb['failures'])}")
    if rb["median"] is not None:
        typer.echo(
            f"{record['objective']} B/A {rb['median']:.3f}x (min {rb['min']:.3f}, max {rb['max']:.3f}, "
            f"stdev {rb['stdev']:.3f}; noise {ra['noise']:.1%}, from A's own spread or 3%)"
        )
    typer.echo(f"verdict: B is {rb['verdict']}")
    typer.echo(f"files: {record['run_dir']}")


def register(app: typer.Typer) -> None:
    """Add `compare` to `app`."""
    app.command("compare")(compare_command)
