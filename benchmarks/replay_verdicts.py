"""Recorded steps judged again by today's rules (prints figures; not a test).

    python benchmarks/replay_verdicts.py ROOT [--state missed] [--rows]

ROOT: a folder holding recorded runs (every `verdict.json` under it beside its step's `requests.jsonl` and
`metrics.json`, as `bench --capacity` and soaks write them; the H200 and H100 ones are in
docs/h200-evidence.tar.xz: `tar -xJf docs/h200-evidence.tar.xz -C /tmp/ev`, then ROOT `/tmp/ev/h200`).

Each step is replayed (`verdict.replay`) with its own SLOs (its `metrics.json`), its rate, today's default
`StepRules`, a step's 120 s or a soak's 300 s, up to the moment its recorded verdict was reached (`at_s`: the
recording ends there, so a verdict today's rules would reach later reads `undecided`). Printed: how many
recorded verdicts of each state today's rules reproduce at their moment, and for the misses, in how many arrival
spans (`--cluster-seconds`, 5 s) the deciding SLO's judged requests lay (`SloCheck.spans`): a miss decided within
one span rests on a cluster effect that could not be estimated (docs/capacity.md, "Bursts count once"), and how
many of those the same search met at the same rate in another step (its run again: the search's rule).
`--state`: only recorded verdicts of that state. `--rows`: one line per step too. A run directory renamed
`*.interrupted-N` (the first attempt of a resumed run, whose steps the resumed run kept) is left out.

A change to the verdict's rules can be read against the recorded H200 and H100 steps this way before any device
time is spent on it.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.slo import parse_slos
from servetune.bench.verdict import StepJudge, StepRules, StepVerdict, replay

STEP_S, SOAK_S = 120.0, 300.0


def rejudge(
    step: Path, rules: StepRules | None = None, recorded: dict | None = None
) -> tuple[dict, StepVerdict] | None:
    """(the recorded verdict, today's at its moment) of the step in `step`, or None where its records, its
    SLOs or its rate are missing (a step that sent nothing, an interrupted one). `recorded`: its `verdict.json`,
    if already read."""
    recorded = recorded or json.loads((step / "verdict.json").read_text())
    try:
        metrics = json.loads((step / "metrics.json").read_text())
        records = load_requests(step / "requests.jsonl")
    except (OSError, ValueError):
        return None
    slos = [v["slo"] for v in (metrics.get("slo") or {}).get("verdicts", [])]
    rate, at = metrics.get("request_rate"), recorded.get("at_s")
    if not (slos and records and rate and at):
        return None
    soak = "soak" in step.parts[-1] or "soaks" in step.parts
    judge = StepJudge(
        parse_slos(slos), rules or StepRules(), rate=rate, max_s=max(SOAK_S if soak else STEP_S, at), soak=soak
    )
    verdict, _ = replay(records, judge, until=at + 0.01)
    return recorded, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--state", choices=["met", "missed", "undecided"], help="only recorded verdicts of this state")
    parser.add_argument("--rows", action="store_true", help="one line per step")
    args = parser.parse_args()
    pairs: collections.Counter[tuple[str, str]] = collections.Counter()
    spans: collections.Counter[int] = collections.Counter()
    contradicted = 0
    skipped = 0
    for path in sorted(args.root.rglob("verdict.json")):
        if "interrupted" in str(path):
            continue
        recorded = json.loads(path.read_text())
        if args.state and recorded.get("state") != args.state:
            continue
        got = rejudge(path.parent, recorded=recorded)
        if got is None:
            skipped += 1
            continue
        rec, now = got
        pairs[(rec["state"], now.state)] += 1
        deciding = [c for c in now.slos if c.decision == "missed"]
        if now.state == "missed" and deciding:
            spans[min(c.spans for c in deciding)] += 1
            if min(c.spans for c in deciding) == 1 and _rate(path.parent) in _met_rates(path.parent.parent):
                contradicted += 1
        if args.rows:
            name = path.parent.relative_to(args.root)
            print(f"{name} | {rec['state']} at {rec['at_s']:.1f} s | today {now.state} | {now.why[:90]}")
    print("recorded | today at that moment | steps")
    for (rec, now), n in sorted(pairs.items()):
        print(f"{rec} | {now} | {n}")
    print(f"({skipped} without records, SLOs or a rate)")
    if spans:
        print("today's misses by the arrival spans their deciding SLO's judged requests lay in:")
        for k, n in sorted(spans.items()):
            print(f"  {k} span{'s' if k != 1 else ''}: {n}")
        print(f"  of the 1-span misses, met at the same rate in another step of the same search: {contradicted}")


def _rate(step: Path) -> str:
    """A step's rate as its directory names it (`07-13.98`: `13.98`)."""
    return step.name.partition("-")[2]


@functools.cache
def _met_rates(steps: Path) -> frozenset[str]:
    """The rates a search's steps (`steps`: their folder) recorded met."""
    met = set()
    for path in steps.glob("*/verdict.json"):
        if json.loads(path.read_text()).get("state") == "met":
            met.add(_rate(path.parent))
    return frozenset(met)


if __name__ == "__main__":
    main()
