"""`servetune bench`: drive a workload against a running server, or launch one and bench it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from servetune.cli._bench_view import print_metrics, progress
from servetune.cli._options import (
    CapacityOpts,
    ResolveOpts,
    SglangCmdOpt,
    capacity_options,
    check_url,
    resolve_options,
)
from servetune.limits import MAX_REQUESTS

_SERVER = "Server"
_WORKLOAD = "Workload"
_MANAGED = "Managed run (no --url)"
_OUTPUT = "Output"
_SLO = "SLO and capacity"


@resolve_options(exclude=("model", "workload"))
@capacity_options()
def bench_command(
    opts: ResolveOpts,
    cap: CapacityOpts,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            help="A shipped workload name (`servetune workloads list`) or a .yaml file.",
            rich_help_panel=_WORKLOAD,
        ),
    ],
    url: Annotated[
        Optional[str],
        typer.Option(
            "--url",
            help="Base URL of a running OpenAI-compatible server, e.g. http://127.0.0.1:30000. "
            "Without it, a server is launched for the run.",
            rich_help_panel=_SERVER,
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="With --url: the model id to request (default: the server's first). "
            "Without: the model to launch (bundled name, HF id or directory).",
            rich_help_panel=_SERVER,
        ),
    ] = None,
    requests: Annotated[
        Optional[int],
        typer.Option(
            "--requests",
            "-n",
            min=1,
            max=MAX_REQUESTS,
            help="Measured requests (overrides the workload's count; runs of different length are not comparable); "
            f"at most {MAX_REQUESTS:,}.",
            rich_help_panel=_WORKLOAD,
        ),
    ] = None,
    client: Annotated[
        str,
        typer.Option(
            "--client",
            help="auto, builtin (no SGLang needed) or sglang (SGLang's bench_serving).",
            rich_help_panel=_WORKLOAD,
        ),
    ] = "auto",
    cross_check: Annotated[
        bool,
        typer.Option(
            "--cross-check",
            help="Run SGLang's client and the builtin one on the same server (--url, or one launched for it) "
            "and print the relative difference per metric.",
            rich_help_panel=_WORKLOAD,
        ),
    ] = False,
    request_rate: Annotated[
        Optional[float],
        typer.Option(
            "--request-rate",
            min=0.001,
            help="Poisson arrivals at this rate (req/s), open loop (no cap on requests in flight); "
            "overrides the workload's rate and concurrency.",
            rich_help_panel=_WORKLOAD,
        ),
    ] = None,
    slo: Annotated[
        Optional[list[str]],
        typer.Option(
            "--slo",
            help="Latency SLO STAT_METRIC_ms<=N (repeatable), STAT p50/p90/p95/p99/mean, METRIC ttft/tpot/itl/e2e, "
            "e.g. --slo p99_ttft_ms<=1000 --slo p99_tpot_ms<=50: the run reports the verdicts and goodput.",
            rich_help_panel=_SLO,
        ),
    ] = None,
    capacity: Annotated[
        bool,
        typer.Option(
            "--capacity",
            help="Find the highest Poisson rate at which every --slo holds, sustained, on one server (no "
            "relaunch): bracket, bisect to --resolution, and run both ends again (met in two runs).",
            rich_help_panel=_SLO,
        ),
    ] = False,
    soak_seconds: Annotated[
        Optional[float],
        typer.Option(
            "--soak-seconds",
            min=1.0,
            help="One long step at --request-rate (or, with --capacity, at the capacity found) for this many "
            "seconds, judged as a capacity step but met only at its end; plots latency and requests in flight "
            "over time (soak.png).",
            rich_help_panel=_SLO,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed",
            min=0,
            help="Sequence seed of --capacity and --soak-seconds: step k of every search with one seed draws the "
            "same arrival gaps, prompts and images (configs compared with one seed are paired); another seed "
            "draws new ones (a repeat, or a second search on a server you keep running).",
            rich_help_panel=_SLO,
        ),
    ] = 0,
    server_log: Annotated[
        Optional[Path],
        typer.Option(
            "--server-log",
            help="With --url and --capacity or --soak-seconds: the server's log file, if this machine can read "
            "it; SGLang's scheduler lines during each step become its telemetry.jsonl and the timeline plot.",
            rich_help_panel=_SERVER,
        ),
    ] = None,
    reference_rate: Annotated[
        Optional[float],
        typer.Option(
            "--reference-rate",
            min=0.001,
            help="Runaway guard for a managed run: the throughput you expect (req/s); a run five times slower is "
            "stopped within its first wave and reported as too_slow.",
            rich_help_panel=_MANAGED,
        ),
    ] = None,
    sglang_cmd: SglangCmdOpt = None,
    run_dir: Annotated[
        Optional[Path],
        typer.Option("--run-dir", help="Directory for the run's files (metrics.json, logs).", rich_help_panel=_OUTPUT),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print JSON on stdout: with --url the metrics (request_throughput at the top level); for a managed "
            "run {metrics, run_dir, timings}; with --capacity or --soak-seconds {capacity or soak, run_dir, plots}.",
            rich_help_panel=_OUTPUT,
        ),
    ] = False,
) -> None:
    """Benchmark a workload: throughput (req/s, tok/s), TTFT/TPOT/ITL/E2E percentiles; with --slo, the
    verdicts and goodput; with --capacity, the highest rate at which every SLO holds, certified; with
    --soak-seconds, whether one rate holds for that long."""
    from servetune.bench.slo import parse_slos
    from servetune.bench.workloads import load_workload
    from servetune.cli._output import check_output_dir
    from servetune.errors import SpecError

    if url is not None:
        check_url(url, "--url")
    if run_dir is not None:
        check_output_dir(run_dir, "--run-dir")
    spec = load_workload(workload)
    slos = parse_slos(slo or [])
    if url is None and model is None:
        raise SpecError(
            "`servetune bench` needs --url (a running server) or --model (to launch one)",
            help="e.g. `servetune bench --url http://127.0.0.1:30000 --workload single-image-stream`",
        )
    if (capacity or soak_seconds) and not slos:
        what = "--capacity" if capacity else "--soak-seconds"
        raise SpecError(f"{what} needs at least one --slo", help=f"e.g. {what} --slo p99_ttft_ms<=1000")
    if capacity and (cross_check or request_rate is not None):
        raise SpecError("--capacity chooses its own rates: drop --request-rate and --cross-check")
    if soak_seconds and not capacity and request_rate is None:
        raise SpecError(
            "--soak-seconds needs a rate", help="add --request-rate R, or --capacity to soak at the capacity"
        )
    if server_log is not None and (url is None or not (capacity or soak_seconds)):
        raise SpecError("--server-log is for --url with --capacity or --soak-seconds (a managed run reads its own log)")
    if seed and not (capacity or soak_seconds):
        raise SpecError("--seed is the sequence seed of --capacity and --soak-seconds", help="drop --seed")
    if soak_seconds and requests is not None:
        raise SpecError("--soak-seconds sets the length: drop --requests")
    if request_rate is not None:
        spec = spec.model_copy(update={"request_rate": request_rate, "max_concurrency": None})
    opts.model = model
    run = _Run(spec, requests, client, sglang_cmd, run_dir, as_json, slos)
    if capacity or soak_seconds:
        search = cap.search(spec, soak_s=soak_seconds or 0.0, seed=seed)
        _capacity(run, opts, url, model, search, rate=None if capacity else request_rate, server_log=server_log)
        return
    if cross_check:
        if url is not None:
            _cross_check(url, spec, requests, run_dir, model, as_json)
            return
        from servetune.launch import LaunchOptions, check_launch, default_run_dir
        from servetune.runner import SglangRunner

        options = LaunchOptions(sglang_cmd=sglang_cmd)
        check_launch(options)  # a launch that cannot start leaves no run directory behind
        runner = SglangRunner(options)
        with runner.start(
            opts.context(workload=spec).resolve(), run_dir=run_dir or default_run_dir("launch")
        ) as server:
            _cross_check(server.url, spec, requests, run_dir, None, as_json, api_key=server.api_key)
        return
    if url is not None:
        from servetune.bench import run_benchmark

        try:
            with progress(spec, requests, enabled=not as_json) as on_progress:
                metrics = run_benchmark(
                    url,
                    spec,
                    requests=requests,
                    run_dir=run_dir,
                    client=client,
                    model=model,
                    on_progress=on_progress,
                    slos=slos,
                )
        except KeyboardInterrupt as exc:
            _record_interrupted(exc, run_dir, "bench")
            _interrupted(exc, run_dir, f"the server at {url} keeps running")
            raise
        print_metrics(metrics, as_json)
        return
    _managed(run, opts, reference_rate)


@dataclass(frozen=True)
class _Run:
    """The bench options every mode shares."""

    spec: Any
    requests: int | None
    client: str
    sglang_cmd: str | None
    run_dir: Path | None
    as_json: bool
    slos: tuple


def _raise_failure(failure, run_dir) -> None:
    from servetune.errors import LaunchError, ServetuneError

    notes = [f"run directory: {run_dir}"]
    if failure.cls == "error":
        raise ServetuneError(failure.message, notes=[*notes, *filter(None, [failure.log_tail])])
    raise LaunchError(
        failure.message or f"the managed run failed ({failure.cls})",
        failure=failure.cls,
        log_tail=failure.log_tail,
        exit_code=failure.exit_code,
        notes=notes,
    )


def _capacity(
    run: _Run, opts: ResolveOpts, url: str | None, model: str | None, search, *, rate: float | None, server_log
) -> None:
    """A capacity search (`rate` None; a soak at the capacity after it when `search.soak_s`) or a soak
    at `rate`, on the server at `url` or one launched for it: one implementation either way
    (`servetune.runner.search_server` / `soak_server`)."""
    from servetune.cli._capacity_view import (
        NO_PLOT,
        capacity_json,
        capacity_plots,
        plots_available,
        print_capacity,
        print_step,
        soak_line,
        soak_plot,
    )
    from servetune.launch import default_run_dir

    on_step = None if run.as_json else print_step
    if url is None:
        from servetune.launch import LaunchOptions, check_launch

        check_launch(LaunchOptions(sglang_cmd=run.sglang_cmd))  # a launch that cannot start makes no run directory
    run_dir = Path(run.run_dir or default_run_dir("soak" if rate else "capacity"))
    try:
        cap, soak, result, extra = _capacity_measure(run, opts, url, model, search, rate, server_log, run_dir, on_step)
    except KeyboardInterrupt as exc:
        from servetune.cli._interrupt import report_interrupt

        what = "soak" if rate else "capacity search"
        if url is not None:
            _record_interrupted(exc, run_dir, what)
        server = f"the server at {url} keeps running" if url else "the server was stopped"
        report_interrupt(
            exc,
            f"{what} stopped ({server}; the steps measured so far in {run_dir}/steps)",
            "run the same command again to search anew",
        )
        raise
    if cap is not None:
        plots = capacity_plots(cap, run_dir)
    else:
        plots = [p for p in [soak_plot(soak, [str(x) for x in run.slos], run_dir / "soak.png")] if p is not None]
    if not plots_available():  # said once, on stderr beside JSON
        typer.echo(f"note         {NO_PLOT}", err=run.as_json)
    if run.as_json:
        if cap is not None:
            typer.echo(json.dumps(capacity_json(cap, run_dir, plots, extra), indent=2))
        else:
            typer.echo(json.dumps({"soak": soak.model_dump(mode="json"), "run_dir": str(run_dir),
                                   "plots": [str(p) for p in plots], **extra}, indent=2))  # fmt: skip
        return
    if cap is not None:
        print_capacity(cap, run_dir, plots)
    else:
        typer.echo(soak_line(soak))
        for plot in plots:
            typer.echo(f"plot         {plot}")
        typer.echo(f"files        {run_dir}")
    if result is not None:
        typer.echo(_server_line(result.timings, result.run_dir))


def _capacity_measure(run: _Run, opts: ResolveOpts, url, model, search, rate, server_log, run_dir: Path, on_step):
    """The search or soak itself: (capacity, soak, the managed `Measurement` or None, JSON extras)."""
    from servetune.launch import LaunchOptions, check_launch
    from servetune.runner import RemoteServer, SglangRunner, measure_capacity, measure_soak, search_server, soak_server

    result = None
    if url is not None:
        runner = SglangRunner(client="builtin")  # its benchmark and record only: nothing is launched
        server = RemoteServer(url, run_dir=run_dir, model=model, log=server_log)
        if rate is not None:
            soak, failure = soak_server(runner, server, run.spec, run.slos, rate=rate, seconds=search.soak_s,
                                        run_dir=run_dir, search=search)  # fmt: skip
            cap = None
        else:
            cap, failure, _ = search_server(runner, server, run.spec, run.slos, run_dir=run_dir, search=search,
                                            on_step=on_step)  # fmt: skip
            soak = cap.soak if cap is not None else None
        if failure is not None:
            _raise_failure(failure, run_dir)
        extra: dict[str, Any] = {}
    else:
        options = LaunchOptions(sglang_cmd=run.sglang_cmd)
        check_launch(options)  # a launch that cannot start leaves no run directory behind
        runner = SglangRunner(options, client="builtin")
        resolution = opts.context(workload=run.spec).resolve()
        if rate is not None:
            result = measure_soak(runner, resolution, run.spec, run.slos, rate=rate, seconds=search.soak_s,
                                  run_dir=run_dir, search=search)  # fmt: skip
        else:
            result = measure_capacity(runner, resolution, run.spec, run.slos, run_dir=run_dir, search=search,
                                      on_step=on_step)  # fmt: skip
        if result.failure is not None:
            _raise_failure(result.failure, result.run_dir)
        cap, soak = result.capacity, result.soak or (result.capacity.soak if result.capacity else None)
        extra = {"timings": result.timings.model_dump(mode="json"), "failure": None}
    return cap, soak, result, extra


def _managed(run: _Run, opts: ResolveOpts, reference_rate: float | None) -> None:
    from servetune.bench import choose_client
    from servetune.launch import LaunchOptions, check_launch, default_run_dir
    from servetune.runner import RunawayGuard, SglangRunner

    spec = run.spec
    choose_client(run.client, spec)  # a bad --client fails here, before a server is started for nothing
    resolution = opts.context(workload=spec).resolve()
    options = LaunchOptions(sglang_cmd=run.sglang_cmd)
    check_launch(options)  # a launch that cannot start leaves no run directory behind
    runner = SglangRunner(options, client=run.client)
    count = run.requests or spec.requests
    guard = (
        RunawayGuard.from_rate(reference_rate, requests=count, concurrency=spec.max_concurrency)
        if reference_rate
        else None
    )
    run_dir = run.run_dir or default_run_dir("run")
    try:
        with progress(spec, run.requests, enabled=not run.as_json) as on_progress:
            result = runner.measure(
                resolution,
                spec,
                run_dir=run_dir,
                requests=run.requests,
                on_progress=on_progress,
                guard=guard,
                slos=run.slos,
            )
    except KeyboardInterrupt as exc:
        _interrupted(exc, run_dir, "the server was stopped")
        raise
    if result.failure is not None:
        _raise_failure(result.failure, result.run_dir)
    if run.as_json:
        payload = {
            "metrics": result.metrics.model_dump(mode="json"),
            "run_dir": str(result.run_dir),
            "timings": result.timings.model_dump(mode="json"),
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    print_metrics(result.metrics, False)
    typer.echo(_server_line(result.timings, result.run_dir))


def _record_interrupted(exc: BaseException, run_dir: Path | None, stage: str) -> None:
    """With --url (no runner to record it): `result.json` in the run directory says `interrupted`,
    with the partial metrics."""
    from servetune.interrupts import record
    from servetune.launch import write_json

    if run_dir is None or not Path(run_dir).is_dir():
        return
    partial = getattr(exc, "partial", None)
    dumped = partial.model_dump(mode="json") if partial is not None else None
    if dumped is not None:
        write_json(Path(run_dir), "metrics.json", dumped)
    write_json(Path(run_dir), "result.json", {"ok": False, "interrupted": record(exc, stage), "metrics": dumped})


def _interrupted(exc: BaseException, run_dir: Path | None, server: str) -> None:
    """The one line: what the benchmark had done, where its partial record is, what to run next."""
    from servetune.cli._interrupt import report_interrupt

    partial = getattr(exc, "partial", None)
    done = (
        f"after {partial.completed} of {partial.requests} requests completed"
        if partial is not None
        else "before any request was measured"
    )
    where = f", partial record in {run_dir}/result.json" if run_dir is not None and Path(run_dir).is_dir() else ""
    report_interrupt(exc, f"bench stopped {done} ({server}{where})", "run the same command again to measure anew")


def _server_line(timings, run_dir) -> str:
    """`server       start-up 64.7 s (imports 23.7 s, ...), stop 5.2 s; files in DIR`."""
    phases = timings.startup_phases.summary() if timings.startup_phases is not None else ""
    return (
        f"server       start-up {timings.startup_s:.1f} s{f' ({phases})' if phases else ''}, "
        f"stop {timings.stop_s:.1f} s; files in {run_dir}"
    )


def _cross_check(url, spec, requests, run_dir, model, as_json, api_key=None) -> None:
    from servetune.bench import cross_check

    result = cross_check(url, spec, requests=requests, run_dir=run_dir, model=model, api_key=api_key)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    typer.echo(f"{'metric':<24} {'sglang':>12} {'builtin':>12} {'diff':>8}")
    for name, diff in result.relative_difference.items():
        typer.echo(
            f"{name:<24} {getattr(result.sglang, name):>12.2f} {getattr(result.builtin, name):>12.2f} {diff:>+8.1%}"
        )
    worst, value = result.worst()
    typer.echo(f"largest difference: {worst} {value:+.1%}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.command("bench")(bench_command)
