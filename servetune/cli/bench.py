"""`servetune bench`: drive a workload against a running server, or launch one and bench it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from servetune.cli._options import ResolveOpts, resolve_options

if TYPE_CHECKING:
    from servetune.bench.metrics import Metrics

_SERVER = "Server"
_WORKLOAD = "Workload"
_MANAGED = "Managed run (no --url)"
_OUTPUT = "Output"


@resolve_options(exclude=("model", "workload"))
def bench_command(
    opts: ResolveOpts,
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
            help="Measured requests (overrides the workload's count; runs of different length are not comparable).",
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
    sglang_cmd: Annotated[
        Optional[str],
        typer.Option(
            "--sglang-cmd",
            help="Command that starts SGLang (the argv is appended); "
            "default $SERVETUNE_SGLANG_CMD or `python -m sglang.launch_server`.",
            rich_help_panel=_MANAGED,
        ),
    ] = None,
    run_dir: Annotated[
        Optional[Path],
        typer.Option("--run-dir", help="Directory for the run's files (metrics.json, logs).", rich_help_panel=_OUTPUT),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the metrics as JSON (request_throughput at the top level).", rich_help_panel=_OUTPUT
        ),
    ] = False,
) -> None:
    """Benchmark a workload: throughput (req/s, tok/s) and TTFT/TPOT/ITL/E2E percentiles."""
    from servetune.bench.workloads import load_workload
    from servetune.errors import SpecError

    spec = load_workload(workload)
    if url is None and model is None:
        raise SpecError(
            "`servetune bench` needs --url (a running server) or --model (to launch one)",
            help="e.g. `servetune bench --url http://127.0.0.1:30000 --workload single-image-stream`",
        )
    opts.model = model
    if cross_check:
        if url is not None:
            _cross_check(url, spec, requests, run_dir, model, as_json)
            return
        from servetune.launch import LaunchOptions, default_run_dir
        from servetune.runner import SglangRunner

        runner = SglangRunner(LaunchOptions(sglang_cmd=sglang_cmd))
        with runner.start(
            opts.context(workload=spec).resolve(), run_dir=run_dir or default_run_dir("launch")
        ) as server:
            _cross_check(server.url, spec, requests, run_dir, None, as_json)
        return
    if url is not None:
        from servetune.bench import run_benchmark

        with _progress(spec, requests, enabled=not as_json) as on_progress:
            metrics = run_benchmark(
                url, spec, requests=requests, run_dir=run_dir, client=client, model=model, on_progress=on_progress
            )
        _print_metrics(metrics, as_json)
        return
    _managed(spec, opts, requests, client, sglang_cmd, run_dir, as_json)


def _managed(spec, opts: ResolveOpts, requests, client, sglang_cmd, run_dir, as_json) -> None:
    from servetune.bench import choose_client
    from servetune.errors import LaunchError, ServetuneError
    from servetune.launch import LaunchOptions, default_run_dir
    from servetune.runner import SglangRunner

    choose_client(client, spec)  # a bad --client fails here, before a server is started for nothing
    resolution = opts.context(workload=spec).resolve()
    runner = SglangRunner(LaunchOptions(sglang_cmd=sglang_cmd), client=client)
    with _progress(spec, requests, enabled=not as_json) as on_progress:
        result = runner.measure(
            resolution, spec, run_dir=run_dir or default_run_dir("run"), requests=requests, on_progress=on_progress
        )
    failure = result.failure
    notes = [f"run directory: {result.run_dir}"]
    if failure is not None and failure.cls == "error":
        raise ServetuneError(failure.message, notes=[*notes, *filter(None, [failure.log_tail])])
    if failure is not None:
        raise LaunchError(
            failure.message or f"the managed run failed ({failure.cls})",
            failure=failure.cls,
            log_tail=failure.log_tail,
            exit_code=failure.exit_code,
            notes=notes,
        )
    if as_json:
        payload = {
            "metrics": result.metrics.model_dump(mode="json"),
            "run_dir": str(result.run_dir),
            "timings": result.timings.model_dump(mode="json"),
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    _print_metrics(result.metrics, False)
    timings = result.timings
    typer.echo(
        f"server       start-up {timings.startup_s:.1f} s, stop {timings.stop_s:.1f} s; files in {result.run_dir}"
    )


def _cross_check(url, spec, requests, run_dir, model, as_json) -> None:
    from servetune.bench import cross_check

    result = cross_check(url, spec, requests=requests, run_dir=run_dir, model=model)
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


class _progress:
    """A rich progress bar on stderr for interactive runs; a no-op callback otherwise."""

    def __init__(self, spec, requests: int | None, *, enabled: bool) -> None:
        self.total = requests or spec.requests
        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("bench", total=self.total, rate="")

        def on_progress(done: int, total: int, partial: Metrics) -> None:
            self.bar.update(task, completed=done, total=total, rate=f"{partial.request_throughput:.2f} req/s")

        return on_progress

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_metrics(metrics: Metrics, as_json: bool) -> None:
    if as_json:
        typer.echo(metrics.model_dump_json(indent=2))
        return
    m = metrics
    shape = f"{m.max_concurrency} in flight" if m.max_concurrency else "unbounded concurrency"
    if m.request_rate:
        shape += f", {m.request_rate:g} req/s Poisson"
    lines = [
        f"workload     {m.workload}  ({m.client} client, {m.url}, model {m.model})",
        f"requests     {m.requests} planned, {m.completed} completed, {m.failed} failed  "
        f"({shape}, warmup {m.warmup_requests})" + ("  STOPPED EARLY" if m.stopped_early else ""),
        f"duration     {m.duration_s:.2f} s",
        f"throughput   {m.request_throughput:.2f} req/s   output {m.output_throughput:.0f} tok/s   "
        f"input {m.input_throughput:.0f} tok/s"
        f"   (input tokens counted by the {m.input_tokens_source})",
    ]
    if m.steady is not None:
        s = m.steady
        lines.append(
            f"steady       {s.request_throughput:.2f} req/s   output {s.output_throughput:.0f} tok/s   "
            f"({s.completed} completions in {s.end_s - s.start_s:.2f} s; first/last {s.trim:.0%} left out)"
        )
    lines.append(f"{'':<12} {'mean':>10} {'median':>10} {'p90':>10} {'p99':>10}")
    for label, key in (("TTFT ms", "ttft"), ("TPOT ms", "tpot"), ("ITL ms", "itl"), ("E2E ms", "e2e_latency")):
        values = [getattr(m, f"{stat}_{key}_ms") for stat in ("mean", "median", "p90", "p99")]
        lines.append(f"{label:<12} " + " ".join(f"{v:>10.1f}" for v in values))
    if m.client_prep_s is not None:
        prep = f"client prep  {m.client_prep_s:.2f} s"
        if m.images_sent and m.client == "builtin" and m.client_prep_s > 0:
            prep += f" for {m.images_sent} images and their requests ({m.images_sent / m.client_prep_s:.0f} requests/s)"
        lines.append(prep)
    for error in m.errors:
        lines.append(f"error        {error}")
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    app.command("bench")(bench_command)
