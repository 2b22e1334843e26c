"""Where a server's start-up went, read from SGLang's own log (`server.log` of the run).

SGLang stamps its log lines to the second (`[2026-12-01 18:05:55] Load weight begin. ...`, or
`[... TP0]` with tensor parallelism), or to the millisecond with `SGLANG_LOG_MS` (`[2026-12-01 18:05:55.120]`,
which `servetune launch` sets) and reports a few exact figures: `Load weight end.
elapsed=0.15 s`, `Capture target decode CUDA graph end. elapsed=4.91 s` and, from 0.5.x, one
`Engine startup timings (s): ...` line. The milestones, as SGLang 0.5.17 logs them:

    spawned (servetune's clock) ─ imports ─▶ first log line ─ processes ─▶ "Init torch distributed begin"
    ─ engine (weights, KV cache, CUDA graphs, the rest) ─▶ "Engine startup timings"
    ─ warmup (HTTP server, SGLang's warm-up request) ─▶ "The server is fired up and ready to roll!"
    ─ ready (servetune's health poll) ─▶ servetune saw 200

Figures from timestamps are good to about a second; the three exact ones are SGLang's own. A
milestone that the log lacks (another version, a start that failed) leaves its phases None.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servetune.launch._telemetry import stamp_epoch

__all__ = ["StartupPhases", "read_startup_phases", "startup_phases"]

_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?(?: [A-Z0-9 ]*)?\] (.*)$")
_WEIGHTS_END = re.compile(r"Load weight end\.(?: elapsed=([\d.]+) s)?")
_GRAPH_BEGIN = re.compile(r"Capture .*decode.*cuda graph begin", re.IGNORECASE)
_BATCH_SIZES = re.compile(r"bs=\[([^\]]*)\]")
_GRAPH_END = re.compile(r"Capture .*cuda graph end\. (?:Time )?elapsed[=:] ?([\d.]+) ?s", re.IGNORECASE)
_ENGINE = re.compile(r"Engine startup timings \(s\): (.*)")
_NUMBER = re.compile(r"(\w+)=([\d.]+)")
_MAX_LOG_BYTES = 256 << 20
"""A longer log is read from its end (the start-up of interest is the last one)."""


class StartupPhases(BaseModel):
    """Seconds of one server start, by phase (None where the log lacks the milestones)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    imports_s: float | None = None
    """Spawn to SGLang's first log line: the interpreter, `import sglang`, argument parsing."""
    processes_s: float | None = None
    """First log line to `Init torch distributed begin`: the tokenizer manager's set-up and the start of
    the scheduler and detokenizer processes (each imports SGLang again)."""
    engine_s: float | None = None
    """`Init torch distributed begin` to the engine's end (`Engine startup timings`, else the last CUDA
    graph or the KV pool): weights, KV cache, CUDA graphs and the rest."""
    weights_s: float | None = None
    """Weight loading (SGLang's `Load weight end. elapsed=`)."""
    kv_cache_s: float | None = None
    """KV cache allocation (`kv_cache_allocation` of `Engine startup timings`)."""
    cuda_graphs_s: float | None = None
    """CUDA graph capture, every graph kind summed (SGLang's `... CUDA graph end. elapsed=`)."""
    cuda_graph_batch_sizes: int | None = None
    """Decode batch sizes captured (the `bs=[...]` list's length)."""
    warmup_s: float | None = None
    """The engine's end to `The server is fired up`: the HTTP server's start and SGLang's warm-up request."""
    ready_s: float | None = None
    """`The server is fired up` to servetune's first healthy answer (its polling and the health check)."""
    total_s: float | None = None
    """Spawn to servetune's first healthy answer."""

    def summary(self) -> str:
        """`imports 25.7 s, processes 27.0 s, engine 7.0 s (CUDA graphs 4.9 s), warm-up 3.0 s`."""
        parts = [
            (label, value)
            for label, value in (
                ("imports", self.imports_s),
                ("processes", self.processes_s),
                ("engine", self.engine_s),
                ("warm-up", self.warmup_s),
                ("ready", self.ready_s),
            )
            if value is not None
        ]
        text = []
        for label, value in parts:
            piece = f"{label} {value:.1f} s"
            if label == "engine" and self.cuda_graphs_s is not None:
                piece += f" (CUDA graphs {self.cuda_graphs_s:.1f} s)"
            text.append(piece)
        return ", ".join(text)


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(max(0.0, b - a), 3)


def startup_phases(text: str, *, started_at: float | None = None, ready_at: float | None = None) -> StartupPhases:
    """The phases of the start that began at `started_at` (epoch seconds; default: the log's last start).

    `text` may hold several starts (a run directory reused): only lines stamped at or after
    `started_at` (to the second) and before the next start's `server_args=` line count; without
    `started_at`, those from the last `server_args=` line on.
    `ready_at` (epoch seconds) is when servetune first saw the server healthy.
    """
    lines: list[tuple[float, str]] = []
    for raw in text.splitlines():
        m = _STAMP.match(raw)
        if m is not None:
            lines.append((stamp_epoch(m.group(1), m.group(2)), m.group(3)))
    if started_at is not None:
        lines = [(t, msg) for t, msg in lines if t >= int(started_at)]
    starts = [i for i, (_, msg) in enumerate(lines) if "server_args=" in msg]
    if started_at is not None:  # this start, up to the next one's arguments
        lines = lines[: starts[1]] if len(starts) > 1 else lines
    elif starts:  # the last start
        lines = lines[starts[-1] :]
    first = lines[0][0] if lines else None
    torch_init = engine_end = fired = None
    pool_end = graph_end = None
    weights = kv = None
    graphs: list[float] = []
    batch_sizes = None
    for t, msg in lines:
        if torch_init is None and "Init torch distributed begin" in msg:
            torch_init = t
        elif (m := _WEIGHTS_END.search(msg)) is not None and weights is None:
            weights = float(m.group(1)) if m.group(1) else None
        elif "Memory pool end" in msg and pool_end is None:
            pool_end = t
        elif (m := _GRAPH_END.search(msg)) is not None:
            graphs.append(float(m.group(1)))
            graph_end = t
        elif batch_sizes is None and _GRAPH_BEGIN.search(msg) and (m := _BATCH_SIZES.search(msg)) is not None:
            batch_sizes = len([b for b in m.group(1).split(",") if b.strip()])
        elif (m := _ENGINE.search(msg)) is not None and engine_end is None:
            engine_end = t
            numbers = dict(_NUMBER.findall(m.group(1)))
            kv = float(numbers["kv_cache_allocation"]) if "kv_cache_allocation" in numbers else None
            weights = float(numbers["load_weight"]) if weights is None and "load_weight" in numbers else weights
        elif "The server is fired up" in msg and fired is None:
            fired = t
    engine_end = engine_end or graph_end or pool_end
    return StartupPhases(
        imports_s=_span(started_at, first),
        processes_s=_span(first, torch_init),
        engine_s=_span(torch_init, engine_end),
        weights_s=weights,
        kv_cache_s=kv,
        cuda_graphs_s=round(sum(graphs), 3) if graphs else None,
        cuda_graph_batch_sizes=batch_sizes,
        warmup_s=_span(engine_end, fired),
        ready_s=_span(fired, ready_at),
        total_s=_span(started_at, ready_at),
    )


def read_startup_phases(
    log_path: Path, *, started_at: float | None = None, ready_at: float | None = None
) -> StartupPhases | None:
    """`startup_phases` of a log file (its last 256 MiB); None when it cannot be read."""
    try:
        with open(log_path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - _MAX_LOG_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    return startup_phases(text, started_at=started_at, ready_at=ready_at)
