"""What a capacity search and a soak show: each step as it ends, the result with its bracket and
confidence, a table of the steps, and two plots: latency against the offered rate
(`capacity.png`) and the whole measurement over time (`timeline.png`, `soak.png`: latency from the
scheduled arrival, requests in flight, and SGLang's own running and queued requests and token usage
from its log)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servetune.bench.capacity import Capacity, CapacityStep, SoakResult
    from servetune.bench.stalls import Stalls

NO_PLOT = "no plot: plots need matplotlib, which is not installed (pip install 'servetune[report]')"


def plots_available() -> bool:
    """Whether matplotlib is installed here (looked up, not imported)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _lat(step: Any, key: str) -> str:
    value = (step.latency_ms or {}).get(key)
    return f"{value:.1f}" if value is not None else "-"


def print_step(step: CapacityStep) -> None:
    """One capacity step as it ends (stderr, so --json output stays clean)."""
    verdict = step.state + (f" (run {step.repeat + 1})" if step.repeat else "")
    print(
        f"  step {step.index:2d}  {step.rate:8.4g} req/s  {verdict:<17}  {step.judged:5d} judged  "
        f"p99 TTFT {_lat(step, 'p99_ttft_ms'):>7} ms  p99 TPOT {_lat(step, 'p99_tpot_ms'):>6} ms  "
        f"{step.at_s:5.1f} s" + (f"  {step.why}" if step.why else ""),
        file=sys.stderr,
        flush=True,
    )


def capacity_line(cap: Capacity) -> str:
    """`capacity 12.3 req/s at ... (certified: met in 2 runs, 13 missed in 2; ...)`."""
    slos = ", ".join(cap.slos)
    if cap.request_rate is None:
        return f"capacity     none at {slos}: {cap.note}"
    missed = f"{cap.lowest_missed:.4g}" if cap.lowest_missed is not None else "none"
    runs = sum(1 for s in cap.steps if s.rate == cap.request_rate and s.met)
    cert = "certified" if cap.certified else "NOT certified"
    return (
        f"capacity     {cap.request_rate:.4g} req/s at {slos}  ({cert}: met in {runs} runs; bracket "
        f"[{cap.request_rate:.4g}, {missed}]; each verdict at {cap.confidence:.0%} confidence; resolution "
        f"{cap.resolution:.0%}; goodput {cap.goodput or 0:.3g} req/s)"
    )


def soak_line(soak: SoakResult) -> str:
    """`soak 12.3 req/s for 300 s: met (...)`."""
    v = soak.verdict or {}
    backlog = v.get("backlog") or {}
    forecast = backlog.get("forecast_delay_ms")
    more = f"; queueing forecast {forecast:.0f} ms" if forecast is not None else ""
    return (
        f"soak         {soak.rate:.4g} req/s for {soak.at_s:.0f} of {soak.seconds:g} s: {soak.state}"
        + (f" ({soak.why})" if soak.why else "")
        + f"; p99 TTFT {_lat(soak, 'p99_ttft_ms')} ms, p99 TPOT {_lat(soak, 'p99_tpot_ms')} ms{more}"
        + (f"\n{stalls_line(soak.stalls, 'soak')}" if soak.stalls is not None else "")
    )


def sustained_line(cap: Capacity) -> str | None:
    """`sustained 12.3 req/s ...` after a search's soaks (`soak_down`), else None."""
    if not cap.soaks:
        return None
    seconds = f"{cap.soaks[0].seconds:g} s"
    if cap.sustained is None:
        low = min(s.rate for s in cap.soaks)
        return f"sustained    none found: no soak held for {seconds} (lowest tried {low:.4g} req/s); raise --soak-tries"
    above = cap.sustained_bracket[1]
    return (
        f"sustained    {cap.sustained:.4g} req/s  (held for {seconds}; bracket [{cap.sustained:.4g}, "
        f"{f'{above:.4g}' if above is not None else 'none'}]: the capacity to plan by)"
    )


def engine_line(cap: Capacity) -> str | None:
    """`engine  SGLang's clock over 595 intervals: decode step 5.34 ms ..., a prefilled request 49.7 ms ...`:
    what this machine's decode and prefill cost during the search (`Capacity.engine`), else None."""
    e = cap.engine
    if e is None:
        return None
    return (
        f"engine       SGLang's clock over {e.intervals} intervals (R² {e.r2:.2f}): "
        f"decode step {e.decode_step_ms:.2f} ms ({e.per_running_ms:+.3f} per running request), "
        f"a prefilled request {e.prefill_ms_per_request:.1f} ms at {e.requests_per_batch:.2f} a batch: "
        "compare machines by these"
    )


def stalls_line(stalls: Stalls | None, unit: str = "step") -> str | None:
    """`stalls  SGLang's front end held arrivals ... 31 time(s) in 448 s of steps ...` (`Stalls.describe`), else
    None (the search's scheduler lines were not read)."""
    return None if stalls is None else f"stalls       {stalls.describe(unit)}"


def cost_line(cap: Capacity, timings: Any = None) -> str:
    """`cost  start-up 61 s, warm-up wave 4 s, search 289 s (10 steps), soaks 431 s (2): 785 s in all`:
    where a capacity's time went (`timings`: the managed run's `RunTimings`, else None: no launch)."""

    def sec(x: float) -> str:
        return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"

    search = math.fsum(s.bench_s for s in cap.steps)
    soaks = math.fsum(s.bench_s for s in cap.soaks)
    parts = []
    if timings is not None and timings.startup_s is not None:
        parts.append(f"start-up {sec(timings.startup_s)}")
    if timings is not None and timings.bench_s is not None:
        parts.append(f"warm-up wave {sec(max(0.0, timings.bench_s - search - soaks))}")
    parts.append(f"search {sec(search)} ({len(cap.steps)} steps)")
    if cap.soaks:
        parts.append(f"soaks {sec(soaks)} ({len(cap.soaks)})")
    total = timings.total_s if timings is not None and timings.total_s else search + soaks
    return f"cost         {', '.join(parts)}: {sec(total)} in all"


def _bursts(check: dict) -> str:
    """` ÷N` after an SLO's count when its overs came in bursts (the cluster effect the test divided by)."""
    effect = check.get("cluster_effect") or 1.0
    return f" ÷{effect:.1f}" if effect >= 1.5 else ""


def _stalls_by_step(cap: Capacity) -> dict[int, str] | None:
    """Each step's front-end stalls as the table's cell (`2, longest 0.98 s`), None without `cap.stalls`."""
    if cap.stalls is None:
        return None
    cells: dict[int, str] = {}
    for index in {s.step for s in cap.stalls.stalls}:
        own = [s.seconds for s in cap.stalls.stalls if s.step == index]
        cells[index] = f"{len(own)}, longest {max(own):.2f} s" if len(own) > 1 else f"1, {own[0]:.2f} s"
    return cells


def print_capacity(cap: Capacity, run_dir: Path | None, plots: Sequence[Path | str], timings: Any = None) -> None:
    """The result: the answer, its bracket and confidence, the steps as a table, the soaks, the
    sustained figure, the cost (`timings`: a managed run's), the plots."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    console.print(capacity_line(cap), highlight=False)
    if cap.note and cap.request_rate is not None:
        console.print(f"note         {cap.note}", highlight=False)
    stalled = _stalls_by_step(cap)
    table = Table("#", "rate req/s", "verdict", "judged", "over (per SLO, ÷bursts)", "p99 TTFT", "p99 TPOT",
                  "in flight", "lateness p99", *(["stalls"] if stalled is not None else []), "seconds", "why",
                  title=f"{len(cap.steps)} steps, {cap.bench_s:.0f} s")  # fmt: skip
    for s in cap.steps:
        v = s.verdict or {}
        over = " ".join(f"{c['over']}/{c['judged']}" + _bursts(c) for c in v.get("slos") or [])
        backlog = v.get("backlog") or {}
        slope = backlog.get("slope")
        flight = f"{backlog.get('in_flight', 0):.1f} ({slope:+.2f}/s)" if slope is not None else "-"
        table.add_row(
            str(s.index), f"{s.rate:.4g}", s.state + (f" (run {s.repeat + 1})" if s.repeat else ""), str(s.judged),
            over or "-", _lat(s, "p99_ttft_ms"), _lat(s, "p99_tpot_ms"), flight,
            f"{s.lateness_p99_ms:.1f}" if s.lateness_p99_ms is not None else "-",
            *([stalled.get(s.index, "-")] if stalled is not None else []), f"{s.bench_s:.1f}", s.why,
        )  # fmt: skip
    console.print(table)
    for soak in cap.soaks:
        console.print(soak_line(soak), highlight=False)
    sustained = sustained_line(cap)
    if sustained is not None:
        console.print(sustained, highlight=False)
    for line in (engine_line(cap), stalls_line(cap.stalls)):
        if line is not None:
            console.print(line, highlight=False)
    console.print(cost_line(cap, timings), highlight=False)
    for plot in plots:
        console.print(f"plot         {plot}", highlight=False)
    if run_dir is not None:
        console.print(f"files        {run_dir}", highlight=False)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_capacity(cap: Capacity, path: Path) -> Path | None:
    """Latency against the offered rate (p50/p99 TTFT and TPOT per step), the SLO bounds and the
    capacity, as a PNG; None when matplotlib is missing."""
    plt = _pyplot()
    steps = sorted((s for s in cap.steps if s.latency_ms), key=lambda s: s.rate)
    if plt is None or not steps:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        rates = [s.rate for s in steps]
        for stat, style in (("p50", "o--"), ("p99", "o-")):
            ax.plot(rates, [s.latency_ms.get(f"{stat}_{metric}_ms", float("nan")) for s in steps], style,
                    label=f"{stat} {label}", alpha=0.8)  # fmt: skip
        for s in steps:
            if not s.met:
                ax.axvspan(s.rate * 0.995, s.rate * 1.005, color="tab:red", alpha=0.25)
        for text in cap.slos:
            if f"_{metric}_" in text:
                ax.axhline(float(text.split("=")[-1].lstrip("<")), color="tab:red", lw=1, label=f"SLO {text}")
        if cap.request_rate is not None:
            ax.axvline(cap.request_rate, color="tab:green", lw=1.5, label=f"capacity {cap.request_rate:.4g} req/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, Poisson)")
        ax.set_ylabel(f"{label} (ms)")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("latency against rate, one point per step (red bands: not met)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timeline(parts: Sequence[tuple[str, Path]], slos: Sequence[str], path: Path, *, title: str) -> Path | None:
    """Steps one after another over time (`parts`: label and step directory): TTFT and TPOT of each
    request at its scheduled arrival, requests in flight (the client's count from the arrivals) beside
    SGLang's running and queued requests, and its KV token usage, from each step's `requests.jsonl`
    and `telemetry.jsonl`. None when matplotlib is missing or no step left records."""
    from servetune.bench._builtin import load_requests
    from servetune.launch import read_telemetry

    plt = _pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(4, 1, figsize=(12, 9.5), sharex=True)
    offset, drawn = 0.0, False
    bounds = {m: float(t.split("=")[-1].lstrip("<")) for t in slos for m in ("ttft", "tpot") if f"_{m}_" in t}
    for label, step_dir in parts:
        records = load_requests(step_dir / "requests.jsonl") if (step_dir / "requests.jsonl").exists() else []
        if not records:
            continue
        drawn = True
        t0 = records[0].arrival
        done = [r for r in records if r.finished and r.success]
        xs = [offset + r.arrival - t0 for r in done]
        axes[0].scatter(xs, [(r.ttft + r.lag) * 1000 for r in done], s=3, color="tab:blue")
        axes[1].scatter(xs, [(r.latency - r.ttft) / max(r.output_len - 1, 1) * 1000 for r in done], s=3,
                        color="tab:orange")  # fmt: skip
        end = max([r.end for r in done] or [t0]) - t0
        grid = [i * 0.5 for i in range(int(end / 0.5) + 1)]
        flight = [
            sum(1 for r in records if r.arrival - t0 <= g < (r.end - t0 if r.finished else end + 1)) for g in grid
        ]
        axes[2].plot([offset + g for g in grid], flight, color="tab:gray", lw=1)
        tele = read_telemetry(step_dir / "telemetry.jsonl")
        decode = [x for x in tele if x.get("kind") == "decode"]
        if decode:
            tx = [offset + x["t"] - 0.0 for x in decode]
            axes[2].plot(tx, [x.get("running_req", 0) for x in decode], color="tab:green", lw=1)
            axes[2].plot(tx, [x.get("queue_req", 0) for x in decode], color="tab:red", lw=1)
            axes[3].plot(tx, [x.get("token_usage", 0) for x in decode], color="tab:purple", lw=1)
        for ax in axes:
            ax.axvline(offset, color="black", lw=0.5, alpha=0.4)
        axes[0].text(offset, 1.02, label, transform=axes[0].get_xaxis_transform(), fontsize=7)
        offset += end + 2.0
    if not drawn:
        plt.close(fig)
        return None
    for ax, metric in ((axes[0], "ttft"), (axes[1], "tpot")):
        if metric in bounds:
            ax.axhline(bounds[metric], color="tab:red", lw=1)
        ax.set_yscale("log")
    axes[0].set_ylabel("TTFT from arrival (ms)")
    axes[1].set_ylabel("TPOT (ms)")
    axes[2].set_ylabel("requests")
    axes[2].legend(["in flight (client)", "running (SGLang)", "queued (SGLang)"], fontsize=7, loc="upper left")
    axes[3].set_ylabel("KV token usage")
    axes[3].set_xlabel("seconds of arrivals (steps one after another)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def capacity_plots(cap: Capacity, run_dir: Path) -> list[Path]:
    """`capacity.png`, `timeline.png` (every step) and, after soaks, `soak.png` (every soak), in `run_dir`."""
    out = [plot_capacity(cap, run_dir / "capacity.png")]
    parts = [(f"{s.rate:.4g} {s.state}", Path(s.run_dir)) for s in cap.steps if s.run_dir]
    out.append(plot_timeline(parts, cap.slos, run_dir / "timeline.png", title="capacity search, step by step"))
    soaks = [(f"{s.rate:.4g} {s.state}", Path(s.run_dir)) for s in cap.soaks if s.run_dir]
    if soaks:
        title = "soaks: " + ", ".join(f"{s.rate:.4g} req/s {s.state} after {s.at_s:.0f} s" for s in cap.soaks)
        out.append(plot_timeline(soaks, cap.slos, run_dir / "soak.png", title=title))
    return [p for p in out if p is not None]


def soak_plot(soak: SoakResult, slos: Sequence[str], path: Path) -> Path | None:
    """`soak.png`: the soak's latency, requests in flight and SGLang's telemetry over time."""
    if not soak.run_dir:
        return None
    title = f"soak at {soak.rate:.4g} req/s: {soak.state} after {soak.at_s:.0f} s"
    return plot_timeline([(f"{soak.rate:.4g} req/s", Path(soak.run_dir))], slos, path, title=title)


def capacity_json(cap: Capacity, run_dir: Path | None, plots: Sequence[Path], extra: dict[str, Any]) -> dict[str, Any]:
    """The `--json` object of a capacity run."""
    return {"capacity": cap.model_dump(mode="json"), "run_dir": str(run_dir) if run_dir else None,
            "plots": [str(p) for p in plots], **extra}  # fmt: skip
