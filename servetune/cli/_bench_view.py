"""What `servetune bench` shows: a progress bar, the metrics, the SLO verdicts and goodput (a
capacity search's view is `_capacity_view`)."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from servetune.bench.metrics import Snapshot
    from servetune.bench.schema import Metrics


class progress:
    """Progress on stderr: a rich bar for a terminal; for a pipe or a file, one line every
    `PLAIN_EVERY_S` seconds once the run has taken that long (start-up and warm-up included).
    The rate shown is the completions of the last `RATE_WINDOW_S` seconds, counted here: the client's
    snapshots are not read (computing one stalls its send loop)."""

    PLAIN_EVERY_S = 10.0
    RATE_WINDOW_S = 10.0

    def __init__(self, spec, requests: int | None, *, enabled: bool) -> None:
        self.total = requests or spec.requests
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.bar = None
        self.done = 0
        self.rate = ""
        self._seen: deque[tuple[float, int]] = deque()  # (when, completions) over the last RATE_WINDOW_S
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        if not self.enabled:
            return None
        self._t0 = time.monotonic()
        if not self.tty:
            self._thread = threading.Thread(target=self._plain, name="servetune-progress", daemon=True)
            self._thread.start()
            return self._update
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

        def on_progress(done: int, total: int, snapshot: Snapshot | None) -> None:
            self._update(done, total, snapshot)
            self.bar.update(task, completed=done, total=total, rate=self.rate)

        return on_progress

    def _update(self, done: int, total: int, snapshot: Snapshot | None) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        seen = self._seen
        seen.append((now, done))
        while len(seen) > 2 and now - seen[1][0] >= self.RATE_WINDOW_S:
            seen.popleft()
        since, first = seen[0]
        if now - since >= 1.0 and done > first:
            self.rate = f"{(done - first) / (now - since):.2f} req/s"

    def _plain(self) -> None:
        while not self._stop.wait(self.PLAIN_EVERY_S):
            elapsed = time.monotonic() - self._t0
            state = f", {self.rate}" if self.rate else "" if self.done else " (starting or warming up)"
            print(
                f"bench  {self.done:,}/{self.total:,} requests completed{state}, {elapsed:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
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
        verdicts = "   ".join(
            f"{v.slo} {'met' if v.met else 'MISSED'} ({v.value_ms:.1f}; {v.over} of {v.samples} over"
            + (f", {v.confident} at 95%" if v.confident else "")
            + ")"
            for v in m.slo.verdicts
        )
        lines.append(f"SLO          {verdicts}")
        lines.append(f"goodput      {m.slo.goodput:.2f} req/s   {m.slo.attainment:.1%} of the requests met every bound")
    if m.lateness_p99_ms is not None:
        lines.append(
            f"lateness     p50 {m.lateness_p50_ms:.1f} ms, p99 {m.lateness_p99_ms:.1f} ms, "
            f"max {m.lateness_max_ms:.1f} ms behind the Poisson schedule (SLO verdicts count TTFT and E2E from it)"
        )
    if m.loop_lag_p99_ms is not None:
        lines.append(
            f"client loop  lag p99 {m.loop_lag_p99_ms:.1f} ms, max {m.loop_lag_max_ms:.1f} ms "
            "(the client's own stalls: they count into lateness and TTFT)"
        )
    for error in m.errors:
        lines.append(f"error        {error}")
    typer.echo("\n".join(lines))
