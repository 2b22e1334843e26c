"""The certified capacity search against the long-run truth of simulated batching servers (prints
figures; not a test).

    python benchmarks/capacity_search.py [--slots 4 8 16] [--starts 2 8 32] [--seeds 0 1 2]
        [--slo p99_ttft_ms<=200 --slo p99_tpot_ms<=12] [--truth-requests 30000] [--cluster-seconds 5]
        [--soak-seconds 300] [--bracket-factor 2]

For each server (`servetune.testing.simulated.BatchingServer` with a running limit of `--slots`):
- the truth: the highest rate on a 0.25 req/s grid whose long run (`--truth-requests` requests) keeps
  every SLO's share over its bound within 1%;
- the searches: `find_capacity` with the default protocol from each start rate and sequence seed;
  printed: the capacity, its bracket, whether it is certified, the steps, and the simulated seconds
  of arrivals they took (what a real server would have spent on them).
Printed per server: how steeply the long-run share over the bound rises around the truth (the shares at
0.8-1.2 of it, and the span of rates over which it goes from 0.25% to 4%, with its elasticity d ln share /
d ln rate): a p99 step of a few hundred judged requests tells a share of 0.25% from 1%, and 1% from 4%, but
not much finer, so the capacities spread over about that span: +-12-31% where it is 50-60% wide. Printed at
the end: the largest capacity over the truth (the protocol must not overstate it by more than its
resolution), the spread of one server's capacities over starts and seeds (within +-5% of their median is
the goal), and the median cost of a search. `--soak-seconds N`: each search then soaks down from its
capacity (`soak_down`, 3 tries, as `bench --capacity --soak-seconds` does), and the sustained figures are
printed against the truth too. `--bracket-factor F`: the search brackets by F instead of doubling (with
`--starts` at a capacity measured before, as a relaunch would).

A steep knee, as the H200's (docs/capacity.md, "Limits"): `--slots 64 --slo p99_ttft_ms<=200 --slo
p99_tpot_ms<=60` (the share goes from 0.25% to 4% over 10% of the rate).
"""

from __future__ import annotations

import argparse
import statistics


def truth(server, slos, lo: float, hi: float, requests: int) -> tuple[float, dict[float, float]]:
    """The highest rate of the grid whose long run keeps every SLO's share over its bound within 1%, and
    the largest share over a bound at each rate of the grid."""
    from servetune.bench.slo import samples_ms
    from servetune.testing.simulated import arrivals

    best, rate, curve = 0.0, lo, {}
    while rate <= hi + 1e-9:
        records = server.serve(arrivals(rate, requests, 5), 5)
        shares = [sum(not s.holds(v) for v in samples_ms(records, s.metric)) / len(records) for s in slos]
        curve[rate] = max(shares)
        if max(shares) <= 0.01:
            best = rate
        elif rate >= 1.25 * best > 0:
            break  # well past it: the rest of the grid is over
        rate += 0.25
    return best, curve


def elasticity(curve: dict[float, float], true: float) -> str:
    """How steeply the long-run share over the bound rises around the truth: the shares at 0.8, 0.9, 1.1 and
    1.2 of it (nearest grid rates), and the span of rates over which the share goes from a quarter of the
    1% a p99 allows to four times it, with its elasticity (d ln share / d ln rate across it)."""
    import math

    def near(x: float) -> float:
        return curve[min(curve, key=lambda r: abs(r - x))]

    def first(over: float) -> float | None:
        return next((r for r in sorted(curve) if curve[r] > over), None)

    shares = " ".join(f"{f:g}x {near(true * f):.2%}" for f in (0.8, 0.9, 1.1, 1.2))
    a, b = first(0.0025), first(0.04)
    if a is None or b is None or b <= a:
        return f"long-run share over the bound at {shares}"
    slope = math.log(curve[b] / curve[a]) / math.log(b / a)
    return (
        f"long-run share over the bound at {shares}; from 0.25% to 4% between {a:g} and {b:g} req/s "
        f"(+{b / a - 1:.0%}), elasticity {slope:.1f}"
    )


def main() -> int:
    from servetune.bench.capacity import find_capacity, soak_down
    from servetune.bench.slo import parse_slos
    from servetune.bench.verdict import StepRules
    from servetune.testing.simulated import BatchingServer, simulated_soak, simulated_step

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--starts", type=float, nargs="+", default=[2.0, 8.0, 32.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--slo", action="append", help="latency SLO (repeatable; default p99 TTFT 200, TPOT 12 ms)")
    parser.add_argument("--truth-requests", type=int, default=30000)
    parser.add_argument("--cluster-seconds", type=float, default=StepRules.cluster_s,
                        help="arrival spans the verdict clusters overs by (0: requests independent)")  # fmt: skip
    parser.add_argument("--soak-seconds", type=float, default=0.0, help="soak down from each capacity (0: no soak)")
    parser.add_argument("--bracket-factor", type=float, default=2.0, help="the search's bracketing factor")
    args = parser.parse_args()
    rules = StepRules.at_resolution(0.05, cluster_s=args.cluster_seconds)  # find_capacity's default resolution
    slos = parse_slos(args.slo or ["p99_ttft_ms<=200", "p99_tpot_ms<=12"])
    print(
        f"SLOs {', '.join(map(str, slos))}; default protocol (95%, steps up to 120 s, resolution 5%), "
        f"overs clustered by {args.cluster_seconds:g} s spans, bracketing by x{args.bracket_factor:g}"
    )
    worst, spreads, costs = 0.0, [], []
    for slots in args.slots:
        server = BatchingServer(slots=slots)
        true, curve = truth(server, slos, 2.0, 100.0, args.truth_requests)
        caps, held = [], []
        for start in args.starts:
            for seed in args.seeds:
                cap = find_capacity(
                    simulated_step(server), slos, start_rate=start, seed=seed, rules=rules, bracket=args.bracket_factor
                )
                sim_s = sum(s.at_s for s in cap.steps)
                costs.append(sim_s)
                if cap.request_rate is None:
                    print(f"  slots {slots:3d} start {start:5.1f} seed {seed}: none ({cap.note})")
                    continue
                caps.append(cap.request_rate)
                worst = max(worst, cap.request_rate / true - 1.0)
                print(
                    f"  slots {slots:3d} start {start:5.1f} seed {seed}: capacity {cap.request_rate:6.3f} "
                    f"[{cap.request_rate:.3f}, {cap.lowest_missed or float('nan'):.3f}] "
                    f"{'certified' if cap.certified else 'NOT certified'}, {len(cap.steps):2d} steps, "
                    f"{sim_s:5.0f} s of arrivals ({cap.request_rate / true:.3f} of the truth)"
                )
                if args.soak_seconds > 0:
                    run_soak = simulated_soak(server, slos, seconds=args.soak_seconds, rules=rules, seed=seed)
                    cap = soak_down(run_soak, cap, tries=3)
                    tried = ", ".join(f"{s.rate:.3f} {'held' if s.met else s.state}" for s in cap.soaks)
                    if cap.sustained is not None:
                        held.append(cap.sustained)
                    sustained = f"{cap.sustained / true:.3f} of the truth" if cap.sustained else "none held"
                    print(f"{'':25s} soaks: {tried} ({sustained})")
        median = statistics.median(caps)
        spread = max(abs(c / median - 1.0) for c in caps)
        spreads.append(spread)
        print(f"slots {slots}: truth {true:.2f} req/s; capacities median {median:.3f}, spread +-{spread:.1%}")
        print(f"  {elasticity(curve, true)}")
        if held:
            mid = statistics.median(held)
            print(
                f"  sustained: median {mid:.3f} ({mid / true:.3f} of the truth), {min(held) / true:.3f}-"
                f"{max(held) / true:.3f} of it, spread +-{max(abs(h / mid - 1.0) for h in held):.1%}"
            )
    print(f"largest capacity over the truth: {worst:+.1%} (must be <= +5%)")
    print(f"largest spread over starts and seeds: +-{max(spreads):.1%} (goal +-5%)")
    print(f"median cost of a search: {statistics.median(costs):.0f} s of arrivals")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
