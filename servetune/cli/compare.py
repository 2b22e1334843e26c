"""`servetune compare`: two configs, fresh launches interleaved for N rounds, B/A with a verdict."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servetune.cli._declare import with_options
from servetune.context import ResolveOptions
from servetune.limits import MAX_REQUESTS
from servetune.options import CLIENT, JSON, OBJECTIVE, RUN_DIR, SGLANG_CMD, SLO, opt, requests_opt
from servetune.settings import DEFAULT_WORKLOAD, CapacityOptions

_SIDES = "Configs A and B"
_MEASURE = "Measurement"


@dataclass(kw_only=True)
class CompareOptions:
    """The two sides and the measurement of `servetune compare`."""

    a: Annotated[
        str | None,
        opt("--a", panel=_SIDES, help="Config A: a preset (name or file) or a run directory (its resolved.yaml)."),
    ] = None
    b: Annotated[
        str | None,
        opt("--b", panel=_SIDES, help="Config B: a preset (name or file) or a run directory (its resolved.yaml)."),
    ] = None
    a_set: Annotated[
        tuple[str, ...], opt("--a-set", panel=_SIDES, help="A field of config A: FIELD=VALUE (repeatable; over --a).")
    ] = ()
    b_set: Annotated[
        tuple[str, ...], opt("--b-set", panel=_SIDES, help="A field of config B: FIELD=VALUE (repeatable; over --b).")
    ] = ()
    a_no_rules: Annotated[
        bool, opt("--a-no-rules", panel=_SIDES, help="Config A without rules (SGLang's defaults).")
    ] = False
    b_no_rules: Annotated[
        bool, opt("--b-no-rules", panel=_SIDES, help="Config B without rules (SGLang's defaults).")
    ] = False
    rounds: Annotated[int, opt("--rounds", min=1, panel=_MEASURE, help="Rounds; each launches A, then B.")] = 3
    objective: Annotated[str, OBJECTIVE] = "throughput"
    slos: Annotated[tuple[str, ...], SLO] = ()
    requests: Annotated[int | None, requests_opt(MAX_REQUESTS)] = None
    sglang_cmd: Annotated[str | None, SGLANG_CMD] = None
    client: Annotated[str, CLIENT] = "auto"
    run_dir: Annotated[Path | None, RUN_DIR] = None
    as_json: Annotated[bool, JSON] = False


@with_options(target=ResolveOptions, cap=CapacityOptions, o=CompareOptions, required=("model",))
def compare_command(target: ResolveOptions, cap: CapacityOptions, o: CompareOptions) -> None:
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

    if not (o.a or o.a_set or o.a_no_rules) and not (o.b or o.b_set or o.b_no_rules):
        raise SpecError("compare needs two configs", help="e.g. --a runs/run-1 --b-set cuda_graph_max_bs_decode=64")
    spec = load_workload(target.workload or DEFAULT_WORKLOAD)
    slos = parse_slos(o.slos)
    search = None
    if o.objective == "capacity":
        if not slos:
            raise SpecError("--objective capacity needs at least one --slo", help="e.g. --slo p99_ttft_ms<=1000")
        from servetune.runner import CapacitySearch

        search = CapacitySearch.from_options(cap, spec)
    elif slos:
        raise SpecError("--slo is for --objective capacity", help="drop --slo, or add --objective capacity")
    if o.run_dir is not None:
        check_output_dir(o.run_dir, "--run-dir")
    if o.objective != "capacity":
        choose_client(o.client, spec)  # a bad --client fails before any launch
    options = LaunchOptions(**({"sglang_cmd": o.sglang_cmd} if o.sglang_cmd else {}))
    check_launch(options)  # a launch that cannot start leaves no run directory behind
    ctx = target.context(workload=spec)
    side_a = CompareSide(
        "A", side_layer(ctx, o.a, o.a_set), False if o.a_no_rules else None, _label(o.a, o.a_set, o.a_no_rules)
    )
    side_b = CompareSide(
        "B", side_layer(ctx, o.b, o.b_set), False if o.b_no_rules else None, _label(o.b, o.b_set, o.b_no_rules)
    )
    runner = SglangRunner(options, client=o.client)
    out_dir = o.run_dir or default_run_dir("compare")

    measured: list[dict] = []

    def on_round(rnd: int, label: str, value: float | None, failure: str | None) -> None:
        measured.append({"round": rnd, "config": label, "value": value, "failure": failure})
        if not o.as_json:
            shown = f"{value:.4g}" if value is not None else f"[{failure}]"
            typer.echo(f"round {rnd}  {label}  {shown}", err=True)

    try:
        record = compare(ctx, runner, side_a, side_b, workload=spec, rounds=o.rounds, run_dir=Path(out_dir),
                         objective=o.objective, slos=slos, search=search, requests=o.requests,
                         on_round=on_round)  # fmt: skip
    except KeyboardInterrupt as exc:
        _interrupted(exc, Path(out_dir), measured, o.rounds, side_a, side_b)
        raise
    if o.as_json:
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
