"""Front-end stalls in recorded capacity runs, and how many over-bound requests lived through one (prints
figures; not a test).

    python benchmarks/frontend_stalls.py ROOT [--after 2] [--runs]

ROOT: a folder holding recorded runs (every step folder with `telemetry.jsonl`, `requests.jsonl` and
`verdict.json`, as `bench --capacity` and soaks write them; the H200 and H100 ones are in
docs/h200-evidence.tar.xz: `tar -xJf docs/h200-evidence.tar.xz -C /tmp/ev`, then ROOT `/tmp/ev/h200`).

Each step's stalls are read as a search reads them (`stalls.frontend_stalls`). Then every finished request
sent after the step's 5 s warm-up span is classed by whether its TPOT was over the step's own p99 TPOT bound
(its `verdict.json`), and whether its life (first token to end) overlapped a stall or the `--after` seconds
after one (the burst of prefills that follows). Printed: the stalls per run folder (`--runs`), over all
steps, and the share of over-bound requests that lived near a stall beside the share of all requests that
did: where the first share is no larger, stalls do not explain the overs. A run directory renamed
`*.interrupted-N` is left out (its steps were kept by the resumed run).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.stalls import frontend_stalls
from servetune.launch import read_telemetry

WARMUP_S = 5.0


def _bound(step: Path) -> float | None:
    try:
        verdict = json.loads((step / "verdict.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return next((c["bound_ms"] for c in verdict.get("slos") or [] if c["slo"].startswith("p99_tpot")), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--after", type=float, default=2.0, help="seconds after a stall that still count as near it")
    ap.add_argument("--runs", action="store_true", help="one line per run folder too")
    args = ap.parse_args()
    runs: dict[Path, list] = collections.defaultdict(list)
    spans: dict[Path, float] = collections.Counter()
    classes: collections.Counter = collections.Counter()
    for tele_path in sorted(args.root.rglob("telemetry.jsonl")):
        step = tele_path.parent
        if any(".interrupted-" in p for p in step.parts) or not (step / "requests.jsonl").is_file():
            continue
        records = load_requests(step / "requests.jsonl")
        if not records:
            continue
        sends = [r.start for r in records]
        stalls = frontend_stalls(read_telemetry(tele_path), sends)
        run = step.parent.parent
        runs[run] += stalls
        spans[run] += max(sends) - min(sends)
        bound = _bound(step)
        if bound is None:
            continue
        windows = [(s.at_s, s.at_s + s.seconds + args.after) for s in stalls]
        for r in records:
            if not r.finished or not r.success or r.arrival < WARMUP_S or r.output_len < 2 or r.ttft <= 0:
                continue
            first, end = r.start + r.ttft, r.end
            over = (end - first) / (r.output_len - 1) * 1000.0 > bound
            near = any(first <= b and end >= a for a, b in windows)
            classes[(over, near)] += 1
    every = [spans[r] / len(s) for r, s in runs.items() if s]
    lengths = [x.seconds for s in runs.values() for x in s]
    if args.runs:
        for run, stalls in sorted(runs.items()):
            longest = max((x.seconds for x in stalls), default=0.0)
            print(
                f"{run.relative_to(args.root)}: {len(stalls)} stall(s) in {spans[run]:.0f} s, longest {longest:.2f} s"
            )
    print(f"{sum(len(s) for s in runs.values())} stalls in {sum(spans.values()):.0f} s of steps over {len(runs)} runs")
    if lengths:
        print(
            f"per run, one every {min(every):.0f}-{max(every):.0f} s (median {statistics.median(every):.0f} s) where "
            f"any; {sum(1 for s in runs.values() if not s)} runs with none; lengths {min(lengths):.2f}-"
            f"{max(lengths):.2f} s (median {statistics.median(lengths):.2f} s)"
        )
    overs = classes[(True, True)] + classes[(True, False)]
    total = sum(classes.values())
    near = classes[(True, True)] + classes[(False, True)]
    if total:
        print(
            f"over the TPOT bound: {overs} of {total} judged finished requests; {classes[(True, True)]} of them "
            f"({classes[(True, True)] / max(overs, 1):.0%}) lived through a stall or the {args.after:g} s after it, "
            f"against {near} ({near / total:.0%}) of all"
        )


if __name__ == "__main__":
    main()
