"""Where a measurement's time goes: start-up phases (from SGLang's log), benchmark, stop (prints figures; not a test).

    python benchmarks/trial_time.py DIR [DIR ...] [--json]

Every run directory under the DIRs (one holding `result.json` and `server.log`: a `servetune bench`
run, a tuner trial, a compare run) gives one row: start-up split into imports, processes, engine
(CUDA graphs within it), warm-up and ready (`servetune.launch.StartupPhases`), then benchmark, stop
and total seconds from `result.json`'s timings. A run recorded before servetune kept the phases
(no `timings.startup_phases`) has them read from its `server.log`, with `server.json`'s spawn time
when there is one (else no imports figure). The last rows are the medians and each phase's share
of the median total. For the H200 runs: `tar -xJf docs/h200-evidence.tar.xz -C /tmp` then
`python benchmarks/trial_time.py /tmp/h200/capacity-s5 /tmp/h200/compare8b-s5`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

COLUMNS = (
    ("imports", "imports_s"),
    ("processes", "processes_s"),
    ("engine", "engine_s"),
    ("graphs", "cuda_graphs_s"),
    ("warm-up", "warmup_s"),
    ("ready", "ready_s"),
    ("start", "startup_s"),
    ("bench", "bench_s"),
    ("stop", "stop_s"),
    ("total", "total_s"),
)


def run_row(run_dir: Path) -> dict[str, float | str | None] | None:
    """One run's figures, or None when `run_dir` holds no timings."""
    from servetune.launch import read_startup_phases

    try:
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        return None
    timings = result.get("timings") or {}
    if not timings.get("startup_s"):
        return None
    phases = timings.get("startup_phases")
    if phases is None:
        started = None
        try:
            started = json.loads((run_dir / "server.json").read_text())["started_at"]
        except (OSError, ValueError, KeyError):
            pass
        ready = started + timings["startup_s"] if started is not None else None
        read = read_startup_phases(run_dir / "server.log", started_at=started, ready_at=ready)
        phases = read.model_dump() if read is not None else {}
    row: dict[str, float | str | None] = {"run": str(run_dir)}
    for _, key in COLUMNS:
        row[key] = timings.get(key) if key in ("startup_s", "bench_s", "stop_s", "total_s") else phases.get(key)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="print the rows and medians as JSON")
    args = parser.parse_args()
    runs = sorted({p.parent for d in args.dirs for p in d.rglob("result.json")} | {d for d in args.dirs})
    rows = [r for r in (run_row(d) for d in runs) if r is not None]
    if not rows:
        print("no run directory with timings under " + ", ".join(map(str, args.dirs)), file=sys.stderr)
        return 1
    medians = {}
    for _, key in COLUMNS:
        values = [r[key] for r in rows if isinstance(r[key], (int, float))]
        medians[key] = statistics.median(values) if values else None
    if args.json:
        print(json.dumps({"runs": rows, "median": medians}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} runs: seconds by phase")
    table.add_column("run")
    for label, _ in COLUMNS:
        table.add_column(label, justify="right")
    for r in rows:
        table.add_row(r["run"], *(f"{r[k]:.1f}" if isinstance(r[k], (int, float)) else "-" for _, k in COLUMNS))
    table.add_section()
    table.add_row("median", *(f"{medians[k]:.1f}" if medians[k] is not None else "-" for _, k in COLUMNS))
    total = medians["total_s"]
    table.add_row(
        "share of median total",
        *(f"{100 * medians[k] / total:.0f}%" if medians[k] is not None and total else "-" for _, k in COLUMNS),
    )
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
