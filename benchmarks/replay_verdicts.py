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
time is spent on it. `--net-arrivals` reads one that is not the default (`NetArrivalsJudge`): the backlog test on
requests in flight net of those the same arrivals would keep in flight at a constant latency, which turns open the
two recorded backlog misses with a flat TTFT and also meets six recorded undecided steps before their overs came
(docs/h200-results.md section 36).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import functools
import json
import math
from collections.abc import Sequence
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.slo import parse_slos
from servetune.bench.verdict import StepJudge, StepRules, StepVerdict, _bin_means, replay

STEP_S, SOAK_S = 120.0, 300.0


class NetArrivalsJudge(StepJudge):
    """A step's judge whose backlog test reads requests in flight net of the arrivals: each bin's count in flight
    less the count a server with a constant latency would hold for the same arrivals (Little's law: the window's
    mean in flight over its arrival rate). A stretch of denser Poisson arrivals then no longer reads as a backlog
    (docs/h200-results.md section 36: a step missed on the backlog test with nothing over and its completions above
    the offered rate); a server that falls behind still does, as its latency, not its arrivals, grows. Not the
    default: it also shows a backlog flat sooner."""

    def _backlog_series(
        self, arrivals: Sequence[float], edges: Sequence[float], in_flight: Sequence[float]
    ) -> Sequence[float]:
        span = edges[-1] - edges[0]
        sent = bisect.bisect_right(arrivals, edges[-1]) - bisect.bisect_left(arrivals, edges[0])
        if sent == 0 or span <= 0:
            return in_flight
        hold = math.fsum(in_flight) / len(in_flight) / (sent / span)
        expected = _bin_means(arrivals, [a + hold for a in arrivals], edges)
        return [x - e for x, e in zip(in_flight, expected)]


def rejudge(
    step: Path, rules: StepRules | None = None, recorded: dict | None = None, judge: type[StepJudge] = StepJudge
) -> tuple[dict, StepVerdict] | None:
    """(the recorded verdict, today's at its moment) of the step in `step`, or None where its records, its
    SLOs or its rate are missing (a step that sent nothing, an interrupted one). `recorded`: its `verdict.json`,
    if already read; `judge`: the judge's class (`NetArrivalsJudge`: the backlog test net of the arrivals)."""
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
    judged = judge(
        parse_slos(slos), rules or StepRules(), rate=rate, max_s=max(SOAK_S if soak else STEP_S, at), soak=soak
    )
    verdict, _ = replay(records, judged, until=at + 0.01)
    return recorded, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--state", choices=["met", "missed", "undecided"], help="only recorded verdicts of this state")
    parser.add_argument("--rows", action="store_true", help="one line per step")
    parser.add_argument(
        "--net-arrivals", action="store_true", help="the backlog test net of the arrivals (NetArrivalsJudge)"
    )
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
        got = rejudge(path.parent, recorded=recorded, judge=NetArrivalsJudge if args.net_arrivals else StepJudge)
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
