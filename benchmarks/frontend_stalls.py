"""Front-end stalls in recorded capacity runs, and how many requests over an SLO's bound lived through one
(prints figures; not a test).

    python benchmarks/frontend_stalls.py ROOT [--runs]

ROOT: a folder holding recorded runs (every step folder with `telemetry.jsonl`, `requests.jsonl` and
`verdict.json`, as `bench --capacity` and soaks write them; the H200 and H100 ones are in
docs/h200-evidence.tar.xz: `tar -xJf docs/h200-evidence.tar.xz -C /tmp/ev`, then ROOT `/tmp/ev/h200`).

Each step is read as a search reads it (`stalls.search_stalls`, with the step's own SLOs from its
`verdict.json` and a 5 s warm-up span): its stalls, and its requests after the warm-up span that finished
or were over a bound in flight when the verdict ended the step (its `at_s`), each over a bound or not, and
living (arrival to end) through a stall or the 2 s after it (`stalls.AFTER_S`) or not. Printed: the stalls
per run folder (`--runs`) and over all steps, and the share of over-bound requests that lived near a stall
beside the share of all requests that did: where the first share is no larger, stalls do not explain the overs.
A run directory renamed `*.interrupted-N` is left out (its steps were kept by the resumed run).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.slo import parse_slos
from servetune.bench.stalls import AFTER_S, Stalls, search_stalls
from servetune.launch import read_telemetry

WARMUP_S = 5.0


def _verdict(step: Path) -> tuple[tuple, float | None]:
    """The step's SLOs and when its verdict ended it, from its `verdict.json` (none, None: unreadable)."""
    try:
        verdict = json.loads((step / "verdict.json").read_text(encoding="utf-8"))
        return parse_slos(c["slo"] for c in verdict.get("slos") or []), float(verdict["at_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return (), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--runs", action="store_true", help="one line per run folder too")
    args = ap.parse_args()
    runs: dict[Path, list[Stalls]] = collections.defaultdict(list)
    for tele_path in sorted(args.root.rglob("telemetry.jsonl")):
        step = tele_path.parent
        if any(".interrupted-" in p for p in step.parts) or not (step / "requests.jsonl").is_file():
            continue
        records = load_requests(step / "requests.jsonl")
        slos, ended = _verdict(step)
        read = search_stalls([(0, read_telemetry(tele_path), records, ended)], slos=slos, warmup_s=WARMUP_S)
        if read is not None:
            runs[step.parent.parent].append(read)
    every, lengths, total = [], [], Stalls(steps=0, span_s=0.0)
    for run, steps in sorted(runs.items()):
        stalls = [x for s in steps for x in s.stalls]
        span = sum(s.span_s for s in steps)
        for field in ("steps", "span_s", "judged", "near", "over", "over_near"):
            setattr(total, field, getattr(total, field) + sum(getattr(s, field) for s in steps))
        total.stalls += stalls
        lengths += [x.seconds for x in stalls]
        if stalls:
            every.append(span / len(stalls))
        if args.runs:
            longest = max((x.seconds for x in stalls), default=0.0)
            print(f"{run.relative_to(args.root)}: {len(stalls)} stall(s) in {span:.0f} s, longest {longest:.2f} s")
    print(f"{len(total.stalls)} stalls in {total.span_s:.0f} s of steps over {len(runs)} runs")
    if lengths:
        print(
            f"per run, one every {min(every):.0f}-{max(every):.0f} s (median {statistics.median(every):.0f} s) where "
            f"any; {len(runs) - len(every)} runs with none; lengths {min(lengths):.2f}-{max(lengths):.2f} s "
            f"(median {statistics.median(lengths):.2f} s)"
        )
    if total.judged:
        print(
            f"over a bound: {total.over} of {total.judged} judged requests; {total.over_near} of them "
            f"({total.over_near / max(total.over, 1):.0%}) lived through a stall or the {AFTER_S:g} s after it, "
            f"against {total.near} ({total.near / total.judged:.0%}) of all"
        )


if __name__ == "__main__":
    main()
