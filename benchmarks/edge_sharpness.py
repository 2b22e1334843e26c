"""How sharp a certified capacity's edge is: the share of steps met against the step's rate over the capacity,
over every recorded search (prints figures; not a test).

    python benchmarks/edge_sharpness.py [--bin 0.025] [--searches defaults-h100-s29 seed-h100-s29]

The recorded searches are tests/fixtures/h200/searches/*.json (real SGLang 0.5.17 on lent H200s and H100s,
Qwen2.5-VL-3B weight-free, `single-image-stream`, p99 TTFT <= 2 s and p99 TPOT <= 25 ms, 95% confidence). For
each search with a capacity C, every judged step (met, missed or undecided; an invalid one left out) is placed
at rate / C. Printed:

- per bin of rate / C: steps met of steps run, the share with its 95% Wilson interval. The steps at C itself
  are shown apart: the search chose C because they were met (at least two of them), so their share is biased up;
  the bins beside it are not chosen that way;
- the rates a search ran more than once with mixed outcomes (met and not met), and the capacity each search
  would report if a rate counted as met only when every run there was met (a stricter rule than today's
  majority of runs): how often the majority decided the figure.

What it measures is the instrument's resolution at the edge: where a 35-50 s step flips from usually met to
usually not. A 300 s soak at a rate is, roughly, several steps in a row that must all hold, so it holds only
where single steps are met almost always (docs/capacity.md, "Sustained capacity").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "h200" / "searches"
JUDGED = ("met", "missed", "undecided")


def wilson(met: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a share `met` / `n`."""
    if n == 0:
        return 0.0, 1.0
    p = met / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def judged_steps(search: dict) -> list[dict]:
    """The search's steps that carry a verdict on a rate (invalid ones left out)."""
    return [s for s in search["steps"] if s["state"] in JUDGED]


def by_rate(steps: list[dict]) -> dict[float, list[str]]:
    """Each rate run (rounded to 1e-3 req/s) -> its runs' verdicts, in order."""
    runs: dict[float, list[str]] = defaultdict(list)
    for s in steps:
        runs[round(s["rate"], 3)].append(s["state"])
    return runs


def strict_capacity(runs: dict[float, list[str]]) -> float | None:
    """The highest rate run at least twice with every run met (None: no such rate)."""
    rates = [r for r, states in runs.items() if len(states) >= 2 and all(x == "met" for x in states)]
    return max(rates, default=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=float, default=0.025, help="bin width of rate / capacity")
    parser.add_argument("--searches", nargs="*", help="fixture names (default: all)")
    args = parser.parse_args()
    names = args.searches or sorted(p.stem for p in FIXTURES.glob("*.json"))
    bins: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    at_capacity = [0, 0]
    mixed_rows = []
    for name in names:
        search = json.loads((FIXTURES / f"{name}.json").read_text())
        cap = search.get("capacity")
        if not cap:
            continue
        steps = judged_steps(search)
        for s in steps:
            x = s["rate"] / cap
            cell = at_capacity if abs(x - 1.0) < 1e-6 else bins[round(x / args.bin)]
            cell[0] += s["state"] == "met"
            cell[1] += 1
        runs = by_rate(steps)
        mixed = {r: st for r, st in sorted(runs.items()) if "met" in st and any(x != "met" for x in st)}
        strict = strict_capacity(runs)
        mixed_rows.append((name, cap, strict, mixed))

    print(f"steps met against rate / capacity ({len(mixed_rows)} searches, bins of {args.bin:g})")
    print(f"{'rate / C':>10} {'met/run':>8} {'share':>6}  95% interval")
    rows = sorted(bins.items())
    for key, (met, n) in rows:
        x = key * args.bin
        if x < 0.8 or x > 1.3:
            continue
        lo, hi = wilson(met, n)
        print(f"{x:>10.3f} {met:>3}/{n:<4} {met / n:>6.2f}  [{lo:.2f}, {hi:.2f}]")
    met, n = at_capacity
    lo, hi = wilson(met, n)
    print(f"{'at C':>10} {met:>3}/{n:<4} {met / n:>6.2f}  [{lo:.2f}, {hi:.2f}]  (chosen for being met: biased up)")

    print("\nrates run more than once with mixed verdicts (M met, x missed, u undecided)")
    letter = {"met": "M", "missed": "x", "undecided": "u"}
    moved = 0
    for name, cap, strict, mixed in mixed_rows:
        flips = " ".join(f"{r:g}:{''.join(letter[s] for s in st)}" for r, st in mixed.items()) or "-"
        changed = strict is None or abs(strict - cap) > 1e-3
        moved += changed
        strict_s = "none" if strict is None else f"{strict:.2f}"
        print(f"  {name:<22} C {cap:6.2f}  every-run-met {strict_s:>6}{' *' if changed else '  '}  {flips}")
    with_mixed = sum(1 for *_, mixed in mixed_rows if mixed)
    print(f"\n{with_mixed} of {len(mixed_rows)} searches ran a rate with mixed verdicts; requiring every run met would")
    print(f"change the figure of {moved} (*): the majority of runs decided them.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
