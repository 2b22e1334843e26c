"""`servetune bench`: drive a workload against a running server, or launch one and bench it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from servetune.cli._bench_view import print_metrics, progress
from servetune.cli._declare import with_options
from servetune.cli._options import check_url
from servetune.context import ResolveOptions
from servetune.limits import MAX_REQUESTS
from servetune.options import CLIENT, JSON, RUN_DIR, SGLANG_CMD, SLO, SLO_PANEL, opt, requests_opt
from servetune.settings import CapacityOptions

_SERVER = "Server"
_WORKLOAD = "Workload"
_MANAGED = "Managed run (no --url)"
_OUTPUT = "Output"


@dataclass(kw_only=True)
class BenchOptions:
    """`servetune bench`'s own options (with the resolve options and the capacity search's)."""

    url: Annotated[
        str | None,
        opt(
            "--url", panel=_SERVER,
            help="Base URL of a running OpenAI-compatible server, e.g. http://127.0.0.1:30000. Without it, a "
            "server is launched for the run.",
        ),
    ] = None  # fmt: skip
    requests: Annotated[int | None, requests_opt(MAX_REQUESTS)] = None
    client: Annotated[str, CLIENT] = "auto"
    cross_check: Annotated[
        bool,
        opt(
            "--cross-check", panel=_WORKLOAD,
            help="Run SGLang's client and the builtin one on the same server (--url, or one launched for it) and "
            "print the relative difference per metric.",
        ),
    ] = False  # fmt: skip
    request_rate: Annotated[
        float | None,
        opt(
            "--request-rate", min=0.001, panel=_WORKLOAD,
            help="Poisson arrivals at this rate (req/s), open loop (no cap on requests in flight); overrides the "
            "workload's rate and concurrency.",
        ),
    ] = None  # fmt: skip
    slos: Annotated[tuple[str, ...], SLO] = ()
    capacity: Annotated[
        bool,
        opt(
            "--capacity", panel=SLO_PANEL,
            help="Find the highest Poisson rate at which every --slo holds, sustained, on one server (no "
            "relaunch): bracket, bisect to --resolution, and run both ends again (met in two runs).",
        ),
    ] = False  # fmt: skip
    soak_seconds: Annotated[
        float | None,
        opt(
            "--soak-seconds", min=1.0, panel=SLO_PANEL,
            help="One long step at --request-rate (or, with --capacity, at the capacity found) for this many "
            "seconds (longer where the rate is too low to judge enough requests in that span), judged as a capacity "
            "step but met only at its end, by one fixed-length binomial test there (a p99 at 95% from 299 judged "
            "requests with none over, 473 with one: MLPerf's counts); plots latency and requests in flight over "
            "time (soak.png).",
        ),
    ] = None  # fmt: skip
    soak_tries: Annotated[
        int,
        opt(
            "--soak-tries", min=1, max=10, panel=SLO_PANEL,
            help="With --capacity and --soak-seconds: soaks at most. A soak at the capacity that is not met is "
            "followed by one a --resolution lower, until one holds; the sustained capacity is the highest rate a "
            "soak held.",
        ),
    ] = 4  # fmt: skip
    seed: Annotated[
        int,
        opt(
            "--seed", min=0, panel=SLO_PANEL,
            help="Sequence seed of --capacity and --soak-seconds: step k of every search with one seed draws the "
            "same arrival gaps, prompts and images (configs compared with one seed are paired); another seed "
            "draws new ones (a repeat, or a second search on a server you keep running).",
        ),
    ] = 0  # fmt: skip
    server_log: Annotated[
        Path | None,
        opt(
            "--server-log", panel=_SERVER,
            help="With --url and --capacity or --soak-seconds: the server's log file, if this machine can read it; "
            "SGLang's scheduler lines during each step become its telemetry.jsonl and the timeline plot.",
        ),
    ] = None  # fmt: skip
    reference_rate: Annotated[
        float | None,
        opt(
            "--reference-rate", min=0.001, panel=_MANAGED,
            help="Runaway guard for a managed run: the throughput you expect (req/s); a run five times slower is "
            "stopped within its first wave and reported as too_slow.",
        ),
    ] = None  # fmt: skip
    sglang_cmd: Annotated[str | None, SGLANG_CMD] = None
    run_dir: Annotated[Path | None, RUN_DIR] = None
    as_json: Annotated[bool, JSON] = False


@with_options(target=ResolveOptions, cap=CapacityOptions, o=BenchOptions, required=("workload",))
def bench_command(target: ResolveOptions, cap: CapacityOptions, o: BenchOptions) -> None:
    """Benchmark a workload: throughput (req/s, tok/s), TTFT/TPOT/ITL/E2E percentiles; with --slo, the
    verdicts and goodput; with --capacity, the highest rate at which every SLO holds, certified; with
    --soak-seconds, whether one rate holds for that long."""
    from servetune.bench.slo import parse_slos
    from servetune.bench.workloads import load_workload
    from servetune.cli._output import check_output_dir

    if o.url is not None:
        check_url(o.url, "--url")
    if o.run_dir is not None:
        check_output_dir(o.run_dir, "--run-dir")
    spec = load_workload(target.workload)
    slos = parse_slos(o.slos)
    _check_modes(target, o, slos)
    if o.request_rate is not None:
        spec = spec.model_copy(update={"request_rate": o.request_rate, "max_concurrency": None})
    run = _Run(spec, o.requests, o.client, o.sglang_cmd, o.run_dir, o.as_json, slos)
    if o.capacity or o.soak_seconds:
        from servetune.runner import CapacitySearch

        search = CapacitySearch.from_options(
            cap, spec, soak_s=o.soak_seconds or 0.0, soak_tries=o.soak_tries, seed=o.seed
        )
        _capacity(
            run,
            target,
            o.url,
            target.model,
            search,
            rate=None if o.capacity else o.request_rate,
            server_log=o.server_log,
        )
        return
    if o.cross_check:
        if o.url is not None:
            _cross_check(o.url, spec, o.requests, o.run_dir, target.model, o.as_json)
            return
        from servetune.launch import LaunchOptions, check_launch, default_run_dir
        from servetune.runner import SglangRunner

        options = LaunchOptions(sglang_cmd=o.sglang_cmd)
        check_launch(options)  # a launch that cannot start leaves no run directory behind
        runner = SglangRunner(options)
        with runner.start(
            target.context(workload=spec).resolve(), run_dir=o.run_dir or default_run_dir("launch")
        ) as server:
            _cross_check(server.url, spec, o.requests, o.run_dir, None, o.as_json, api_key=server.api_key)
        return
    if o.url is not None:
        from servetune.bench import run_benchmark

        try:
            with progress(spec, o.requests, enabled=not o.as_json) as on_progress:
                metrics = run_benchmark(
                    o.url,
                    spec,
                    requests=o.requests,
                    run_dir=o.run_dir,
                    client=o.client,
                    model=target.model,
                    on_progress=on_progress,
                    slos=slos,
                )
        except KeyboardInterrupt as exc:
            _record_interrupted(exc, o.run_dir, "bench")
            _interrupted(exc, o.run_dir, f"the server at {o.url} keeps running")
            raise
        print_metrics(metrics, o.as_json)
        return
    _managed(run, target, o.reference_rate)


def _check_modes(target: ResolveOptions, o: BenchOptions, slos: tuple) -> None:
    """Refuse option combinations no mode of bench takes, before anything starts."""
    from servetune.errors import SpecError

    if o.url is None and target.model is None:
        raise SpecError(
            "`servetune bench` needs --url (a running server) or --model (to launch one)",
            help="e.g. `servetune bench --url http://127.0.0.1:30000 --workload single-image-stream`",
        )
    if (o.capacity or o.soak_seconds) and not slos:
        what = "--capacity" if o.capacity else "--soak-seconds"
        raise SpecError(f"{what} needs at least one --slo", help=f"e.g. {what} --slo p99_ttft_ms<=1000")
    if o.capacity and (o.cross_check or o.request_rate is not None):
        raise SpecError("--capacity chooses its own rates: drop --request-rate and --cross-check")
    if o.soak_seconds and not o.capacity and o.request_rate is None:
        raise SpecError(
            "--soak-seconds needs a rate", help="add --request-rate R, or --capacity to soak at the capacity"
        )
    if o.server_log is not None and (o.url is None or not (o.capacity or o.soak_seconds)):
        raise SpecError("--server-log is for --url with --capacity or --soak-seconds (a managed run reads its own log)")
    if o.seed and not (o.capacity or o.soak_seconds):
        raise SpecError("--seed is the sequence seed of --capacity and --soak-seconds", help="drop --seed")
    if o.soak_seconds and o.requests is not None:
        raise SpecError("--soak-seconds sets the length: drop --requests")
    if o.soak_tries != BenchOptions.soak_tries and not (o.capacity and o.soak_seconds):
        raise SpecError("--soak-tries is for --capacity with --soak-seconds (a soak at one rate is one try)",
                        help="drop --soak-tries")  # fmt: skip


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
    run: _Run, opts: ResolveOptions, url: str | None, model: str | None, search, *, rate: float | None, server_log
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

        searched = getattr(exc, "searched", None)  # the search had ended; its soaks were stopped
        what = "soak" if rate or searched else "capacity search"
        if url is not None:
            _record_interrupted(exc, run_dir, what)
        server = f"the server at {url} keeps running" if url else "the server was stopped"
        if searched is not None and searched.request_rate is not None:
            found = searched.request_rate
            label = "" if searched.certified else ", not certified"
            done = f"the search had ended at {found:.4g} req/s{label}: {run_dir}/capacity.json"
            again = f"to soak that rate alone: servetune bench ... --request-rate {found:.4g} --soak-seconds N"
        else:
            done, again = f"the steps measured so far in {run_dir}/steps", "run the same command again to search anew"
        report_interrupt(exc, f"{what} stopped ({server}; {done})", again)
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
        print_capacity(cap, run_dir, plots, result.timings if result is not None else None)
    else:
        typer.echo(soak_line(soak))
        for plot in plots:
            typer.echo(f"plot         {plot}")
        typer.echo(f"files        {run_dir}")
    if result is not None:
        typer.echo(_server_line(result.timings, result.run_dir))


def _capacity_measure(run: _Run, opts: ResolveOptions, url, model, search, rate, server_log, run_dir: Path, on_step):
    """The search or soak itself: (capacity, soak, the managed `Measurement` or None, JSON extras)."""
    from servetune.launch import LaunchOptions, check_launch
    from servetune.runner import RemoteServer, SglangRunner, measure_capacity, measure_soak, search_server, soak_server

    result = None
    if url is not None:
        runner = SglangRunner(client="builtin")  # its benchmark and record only: nothing is launched
        server = RemoteServer(url, run_dir=run_dir, model=model, log=server_log)
        if rate is not None:
            soaks, failure = soak_server(runner, server, run.spec, run.slos, rate=rate, seconds=search.soak_s,
                                         run_dir=run_dir, search=search)  # fmt: skip
            soak = soaks[-1] if soaks else None
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


def _managed(run: _Run, opts: ResolveOptions, reference_rate: float | None) -> None:
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
