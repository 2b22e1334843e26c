"""What `servetune bench` shows: a progress bar, the metrics, the SLO verdicts and goodput, and a
capacity search's steps, result and latency-versus-rate plot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from servetune.bench.capacity import Capacity, CapacityStep
    from servetune.bench.metrics import Metrics


class progress:
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


def print_metrics(metrics: Metrics, as_json: bool) -> None:
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
    if m.slo is not None:
        verdicts = "   ".join(f"{v.slo} {'met' if v.met else 'MISSED'} ({v.value_ms:.1f})" for v in m.slo.verdicts)
        lines.append(f"SLO          {verdicts}")
        lines.append(f"goodput      {m.slo.goodput:.2f} req/s   {m.slo.attainment:.1%} of the requests met every bound")
    if m.served_ratio is not None:
        lines.append(f"kept up      {m.served_ratio:.1%} of the arrivals completed while they arrived")
    for error in m.errors:
        lines.append(f"error        {error}")
    typer.echo("\n".join(lines))


def print_step(step: CapacityStep) -> None:
    """One capacity step as it finishes (stderr, so --json output stays clean)."""
    mark = "met   " if step.met else "missed"
    again = " (again)" if step.repeat else ""
    lat = step.latency_ms
    print(
        f"  {step.rate:9.3g} req/s  {mark}{again}  p99 TTFT {lat['p99_ttft_ms']:8.1f} ms  "
        f"p99 TPOT {lat['p99_tpot_ms']:6.1f} ms  goodput {step.goodput:7.2f}  {step.bench_s:5.1f} s"
        + (f"  {step.why}" if step.why else ""),
        file=sys.stderr,
        flush=True,
    )


def print_capacity(cap: Capacity, run_dir: Path | None, plot: Path | None) -> None:
    """The capacity result: the answer, the bracket, the steps as a table."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    if cap.request_rate is None:
        console.print(f"capacity     none: {cap.note} (SLO {', '.join(cap.slos)})")
    else:
        bracket = f"; missed at {cap.lowest_missed:.3g}" if cap.lowest_missed else ""
        console.print(
            f"capacity     {cap.request_rate:.3g} req/s at {', '.join(cap.slos)}  "
            f"(goodput {cap.goodput:.3g} req/s{bracket}; resolution {cap.resolution:.0%})"
        )
    if cap.note and cap.request_rate is not None:
        console.print(f"note         {cap.note}")
    table = Table("rate req/s", "verdict", "p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT", "p99 E2E", "goodput",
                  "kept up", "requests", "seconds", title=f"{len(cap.steps)} steps, {cap.bench_s:.0f} s")  # fmt: skip
    for s in cap.steps:
        lat = s.latency_ms
        table.add_row(
            f"{s.rate:.3g}",
            ("met" if s.met else "missed") + (" (again)" if s.repeat else ""),
            f"{lat['p50_ttft_ms']:.1f}",
            f"{lat['p99_ttft_ms']:.1f}",
            f"{lat['p50_tpot_ms']:.1f}",
            f"{lat['p99_tpot_ms']:.1f}",
            f"{lat['p99_e2e_ms']:.0f}",
            f"{s.goodput:.2f}",
            f"{s.achieved_rate / s.rate:.0%}",
            f"{s.completed}/{s.requests}",
            f"{s.bench_s:.1f}",
        )
    console.print(table)
    if plot is not None:
        console.print(f"plot         {plot}")
    if run_dir is not None:
        console.print(f"files        {run_dir}")


def plot_capacity(cap: Capacity, path: Path) -> Path | None:
    """Latency versus offered rate (p50/p99 TTFT and TPOT), the SLO bounds and the capacity, as a
    PNG; None when matplotlib is not installed (`pip install servetune[report]`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    first = sorted((s for s in cap.steps if s.repeat == 0), key=lambda s: s.rate)
    if not first:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        rates = [s.rate for s in first]
        for stat, style in (("p50", "o--"), ("p99", "o-")):
            ax.plot(rates, [s.latency_ms[f"{stat}_{metric}_ms"] for s in first], style, label=f"{stat} {label}")
        for s in first:
            if not s.met:
                ax.axvspan(s.rate * 0.995, s.rate * 1.005, color="tab:red", alpha=0.25)
        for text in cap.slos:
            if f"_{metric}_" in text:
                ax.axhline(float(text.split("=")[-1].lstrip("<")), color="tab:red", lw=1, label=f"SLO {text}")
        if cap.request_rate is not None:
            ax.axvline(cap.request_rate, color="tab:green", lw=1.5, label=f"capacity {cap.request_rate:.3g} req/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, Poisson)")
        ax.set_ylabel(f"{label} (ms)")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("latency versus rate (red bands: steps that missed)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def capacity_json(cap: Capacity, run_dir: Path | None, plot: Path | None, extra: dict[str, Any]) -> dict[str, Any]:
    """The `--json` object of a capacity run."""
    return {"capacity": cap.model_dump(mode="json"), "run_dir": str(run_dir) if run_dir else None,
            "plot": str(plot) if plot else None, **extra}  # fmt: skip
