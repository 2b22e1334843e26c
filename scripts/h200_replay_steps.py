"""Replay every recorded H200 capacity step and soak through today's step judge, once per span width
(docs/h200-results.md section 16): how each step's verdict reads with every request independent
(`--cluster-seconds 0`) and with overs clustered by arrival span.

    tar -xJf docs/h200-evidence.tar.xz -C /tmp
    python scripts/h200_replay_steps.py /tmp/h200 [--widths 0 5] [--runs certified-s8 certified-s9 soaks-s10]
    python scripts/h200_replay_steps.py /tmp/h200 --widths 5 --runs soaks-s10 soaks-s11 study-s16 --soaks-only
    python scripts/h200_replay_steps.py /tmp/h200 --widths 5 --min-overloads 0.025 0 --runs certified-s22 soaks-s10

Each step directory holding a `verdict.json` and a `requests.jsonl` is replayed (`verdict.replay`) up to
the moment its recorded step stopped (the recorded `at_s`), at its rate (its `workload.json`'s, else the
one its directory names: `NN-RATE`, `CONFIG-RATE/soak`), with the SLOs of those runs (p99 TTFT <= 2 s,
p99 TPOT <= 25 ms), a 120 s step or a 300 s soak (`soak/`, or under `soaks/`). A step judged by an older
protocol can read differently from its record
even with every request independent (the backlog test decides at other checkpoints now): compare the
columns, not a column with the record. `--min-overloads`: the backlog test's `StepRules.min_overload` (the
growth, as a share of the rate, a step is called falling behind above; 0.025 by default), one column per
width and share. Prints one line per step and a count of (first column, last column) verdict pairs.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.slo import parse_slos
from servetune.bench.verdict import StepJudge, StepRules, replay

SLOS = parse_slos(["p99_ttft_ms<=2000", "p99_tpot_ms<=25"])


def steps(root: Path):
    """(label, directory, rate, soak) of every recorded step under `root`: a soak is a `soak/` directory or
    one under `soaks/`; the rate is its `workload.json`'s, else the one its directory names."""
    for verdict in sorted(root.rglob("verdict.json")):
        step = verdict.parent
        if not (step / "requests.jsonl").is_file():
            continue
        soak = step.name == "soak" or step.parent.name == "soaks"
        workload = step / "workload.json"
        rate = json.loads(workload.read_text()).get("request_rate") if workload.is_file() else None
        if rate is None:
            try:
                rate = float((step.parent.name if step.name == "soak" else step.name).rsplit("-", 1)[1])
            except (IndexError, ValueError):
                continue
        yield str(step.relative_to(root.parent)), step, rate, soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path, help="the unpacked evidence archive's h200/ directory")
    parser.add_argument("--widths", type=float, nargs="+", default=[0.0, 5.0])
    parser.add_argument("--runs", nargs="+", default=["certified-s8", "certified-s9", "soaks-s10"])
    parser.add_argument("--min-overloads", type=float, nargs="+", default=[StepRules().min_overload])
    parser.add_argument("--soaks-only", action="store_true", help="replay the soaks only")
    args = parser.parse_args()
    pairs: collections.Counter = collections.Counter()
    columns = [(width, share) for width in args.widths for share in args.min_overloads]
    for run in args.runs:
        for label, step, rate, soak in steps(args.archive / run):
            if args.soaks_only and not soak:
                continue
            recorded = json.loads((step / "verdict.json").read_text())
            records = load_requests(step / "requests.jsonl")
            cells, states = [], []
            for width, share in columns:
                rules = StepRules(cluster_s=width, min_overload=share)
                judge = StepJudge(SLOS, rules, rate=rate, max_s=300.0 if soak else 120.0, soak=soak)
                verdict, _ = replay(records, judge, until=recorded["at_s"])
                counts = " ".join(
                    f"{c.slo.split('_')[1]} {c.over}/{c.judged}"
                    + (f" ÷{c.cluster_effect:.1f}" if c.cluster_effect > 1 else "")
                    + (f" needs {c.needed}" if c.decision is None and c.needed else "")
                    for c in verdict.slos
                )
                cells.append(f"{verdict.state:9s} {verdict.at_s:5.1f} s  {counts}")
                states.append(verdict.state)
            print(f"{label:62s} recorded {recorded['state']:9s} | " + " | ".join(cells), flush=True)
            pairs[("soak" if soak else "step", states[0], states[-1])] += 1
    (w0, s0), (w1, s1) = columns[0], columns[-1]
    print(f"\nverdicts (width {w0:g} s, min overload {s0:g} -> width {w1:g} s, min overload {s1:g}):")
    for (kind, first, last), n in sorted(pairs.items()):
        print(f"  {kind:4s} {first:9s} -> {last:9s} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
