"""The server model on every recorded pair of certified searches (prints figures; not a test).

    python benchmarks/model_pairs.py [--fixed-share 0 0.45] [--pairs h100-s27 s9] [--limits 44 51 58]

A pair is SGLang's defaults and the seed (`max_running_requests` 51, `cuda_graph_max_bs_decode` 152; on
session 9's H200, a limit of 48; on session 33's H100, the study's own first sampled trial, 55 with a 120-wide
graph) certified on one machine, recorded in tests/fixtures/h200/searches/. For each
pair and each `--fixed-share` (`ServerModel.fit`'s `prefill_fixed_share`: the share of a prefilled request's
cost its prefill batch's requests share, where SGLang's prefill lines show it batching), the model is fitted
as a study fits it: on the defaults' search alone (what seeds the study's first sampled launch), then pooled
with the seed's own search (after that launch). Printed: the defaults' and the seed's certified capacities,
each model's reading of both (its error in brackets), and the requests per prefill batch of each search by
SGLang's prefill lines. Last, per share, the mean and mean absolute error of the seed's reading, alone and pooled.
With `--limits`, each model's capacity at those running limits too (with the seed's graph): where it puts the
machine's best limit, alone and once the seed's search is pooled.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "h200" / "searches"
PAIRS = {
    "h100-s23": "seed-h100-s23", "h100-s23b": "seed-h100-s23b", "h100-s24": "seed-h100-s24",
    "h100-s26": "seed-h100-s26", "h100-s27": "seed-h100-s27", "h100-s28": "seed-h100-s28",
    "h100-s29": "seed-h100-s29", "h100-s29b": "seed-h100-s29b", "h100-s33": "model-h100-s33",
    "s16": "seed-s16", "s22": "seed-s22", "s9": "mrr48-s9",
}  # fmt: skip
"""The defaults' fixture (`defaults-<key>`) -> the seed's, both certified on one machine."""
SLOS = ["p99_ttft_ms<=2000", "p99_tpot_ms<=25"]


def _searches(pair: str) -> tuple[dict, dict]:
    return (json.loads((FIXTURES / f"defaults-{pair}.json").read_text()),
            json.loads((FIXTURES / f"{PAIRS[pair]}.json").read_text()))  # fmt: skip


def readings(pair: str, share: float, sweep: tuple[int, ...] = ()) -> dict:
    """The defaults' and the seed's capacities by the model fitted on the defaults alone and pooled with the seed
    (and each model's at the running limits `sweep`)."""
    from servetune.bench.capacity import CapacityStep
    from servetune.bench.servermodel import Search, ServerModel, requests_per_prefill
    from servetune.bench.slo import parse_slos

    slos = parse_slos(SLOS)
    base, seed = _searches(pair)
    limits = seed["server_limits"]

    def profiles(search: dict) -> list:
        return [CapacityStep.model_validate(s).profile for s in search["steps"] if s["profile"]]

    own, probe = profiles(base), profiles(seed)
    out = {"pair": pair, "base": base["capacity"], "seed": seed["capacity"],
           "k_base": requests_per_prefill(own), "k_seed": requests_per_prefill(probe)}  # fmt: skip
    for name, pooled in (("alone", ()), ("pooled", (Search(probe, limits["running"], limits["graph"]),))):
        model = ServerModel.fit(own, running_limit=4096, graph_bs=256, pooled=pooled,
                                prefill_fixed_share=share)  # fmt: skip
        at_seed = model.capacity(slos, running_limit=limits["running"], graph_bs=limits["graph"])
        out[name] = (model.capacity(slos), at_seed)
        out[f"{name}_limits"] = [model.capacity(slos, running_limit=n, graph_bs=limits["graph"]) for n in sweep]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed-share", type=float, nargs="+", default=[0.0, 0.45])
    parser.add_argument("--pairs", nargs="+", choices=sorted(PAIRS), default=list(PAIRS))
    parser.add_argument("--limits", type=int, nargs="*", default=[], help="running limits to read each model at")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    jobs = [(pair, share) for share in args.fixed_share for pair in args.pairs]
    sweep = [tuple(args.limits)] * len(jobs)
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(readings, *zip(*jobs), sweep))

    def err(got: float, want: float) -> str:
        return f"{got:6.2f} ({got / want - 1:+6.1%})"

    for share in args.fixed_share:
        print(f"\nprefill fixed share {share:g}")
        print(f"{'pair':10s} {'k defaults/seed':>15s} {'defaults':>8s} {'alone reads':>16s} {'seed':>6s} "
              f"{'alone reads':>16s} {'pooled reads':>16s} {'pooled: defaults':>16s}")  # fmt: skip
        mine = [r for (_, s), r in zip(jobs, rows) if s == share]
        for r in mine:
            k = f"{r['k_base'] or 0:.2f}/{r['k_seed'] or 0:.2f}"
            print(f"{r['pair']:10s} {k:>15s} {r['base']:8.2f} {err(r['alone'][0], r['base']):>16s} {r['seed']:6.2f} "
                  f"{err(r['alone'][1], r['seed']):>16s} {err(r['pooled'][1], r['seed']):>16s} "
                  f"{err(r['pooled'][0], r['base']):>16s}")  # fmt: skip
        for name in ("alone", "pooled"):
            e = [r[name][1] / r["seed"] - 1 for r in mine]
            mean, absolute = statistics.fmean(e), statistics.fmean(map(abs, e))
            print(f"  the seed, {name}: mean {mean:+.1%}, mean absolute {absolute:.1%}")
        if args.limits:
            print(f"{'running limit':26s} " + " ".join(f"{n:>13d}" for n in args.limits))
            for r in mine:
                cells = " ".join(f"{a:6.2f} /{p:6.2f}" for a, p in zip(r["alone_limits"], r["pooled_limits"]))
                print(f"{r['pair'] + ' (alone / pooled)':26s} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
