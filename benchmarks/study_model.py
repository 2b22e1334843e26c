"""Launches-to-best of a capacity study on the stand-in's landscape (simulated time), three ways over
several seeds (prints figures; not a test):

- `model`: TPE with the server model (fitted on the baselines' searches: the space narrowed by
  evidence and the first sampled trial seeded with the model's best config), then the local phase;
- `local`: TPE with the local phase alone (one-field moves of the incumbent: the search before the
  model, `--no-model-seed`);
- `random`: random search (`--sampler random --no-model-seed`).

    python benchmarks/study_model.py [--seeds 0 1 2 3 4] [--trials 10] [--target 1.3]

Each study: the simulated stand-in (`servetune.testing.simulated.standin_runner`: one unique image
per request, 128 tokens in and out, each launch its own noise factor, drawn anew per seed), SLO p99 TTFT <= 500 ms and
p99 TPOT <= 3.5 ms, searches from 20 req/s, at most `--trials` launches, no confirmation. Printed
per study: the capacity after each launch as a multiple of the baseline's, the launches to reach
`--target`, and for `model` the seed's predicted and measured capacity, and the seeded launch's long-run
truth (`--truth`: the highest rate on a 1% grid at which 20,000 arrivals on that launch's simulated server
keep each SLO's share over its bound within 1%): it tells the model's error from the measurement's (a
certified capacity has the protocol's spread, docs/capacity.md "Limits").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SPACE = """\
tune:
  max_running_requests: {int: [8, 512], log: true}
  cuda_graph_max_bs_decode: {choice: [16, 32, 64, 128, 256]}
  chunked_prefill_size: {choice: [2048, 4096, 8192]}
  prefill_decode_interval: {int: [0, 16], step: 4}
  mem_fraction_static: {float: [0.70, 0.88], step: 0.02}
"""
WORKLOAD = """\
name: standin-vlm
summary: one unique image per request, 128 tokens in, 128 out
kind: multimodal
requests: 384
max_concurrency: 64
input_tokens: 128
output_tokens: 128
images: {per_request: 1, resolution: 720p, format: jpeg, reuse: unique}
"""
WAYS = {
    "model": {"sampler": "tpe", "model_seed": True},
    "local": {"sampler": "tpe", "model_seed": False},
    "random": {"sampler": "random", "model_seed": False},
}


def study_options(tmp: Path, **kw: Any):
    """The `TuneOptions` of a capacity study on this landscape (SPACE and WORKLOAD written into `tmp`, the run
    directory `tmp/study`, no confirmation unless `kw` asks for one); `kw` overrides any field."""
    from servetune.tuner import TuneOptions

    (tmp / "space.yaml").write_text(SPACE)
    (tmp / "wl.yaml").write_text(WORKLOAD)
    fields = dict(
        model="qwen2.5-vl-3b-instruct", gpu="h200", workload=str(tmp / "wl.yaml"), space_file=str(tmp / "space.yaml"),
        objective="capacity", slos=SLOS, start_rate=20.0, trials=10, seed=0,
        confirm_rounds=0, confirm_soak_seconds=0, run_dir=tmp / "study", client="builtin", no_rules=True,
    )  # fmt: skip
    return TuneOptions(**{**fields, **kw})


NOISE = 0.05
"""`standin_runner`'s default noise: every service time log-normal with this sigma, each launch its own factor."""
SLOS = ("p99_ttft_ms<=500", "p99_tpot_ms<=3.5")


def launched(argv: list[str], salt: int, launch: str):
    """The simulated server of the launch named `launch` of `argv`, with its own noise factor as
    `standin_runner` draws it."""
    import zlib

    from servetune.testing.simulated import StandinServer

    launch_seed = zlib.crc32(f"{salt}:{launch}".encode()) % 100_000
    return StandinServer(argv=argv, noise=NOISE, launch_seed=launch_seed, input_tokens=128, output_tokens=128,
                         images=1)  # fmt: skip


def long_run_truth(argv: list[str], salt: int, launch: str, around: float) -> float:
    """The capacity the launch named `launch` of `argv` really has: the highest rate on a 1% grid from 0.6 to
    1.5 x `around` at which 20,000 arrivals keep each SLO's share over its bound within 1% (the launch's own
    noise factor, as `standin_runner` draws it)."""
    from servetune.bench.slo import parse_slos, samples_ms
    from servetune.testing.simulated import arrivals

    slos = parse_slos(SLOS)
    server = launched(argv, salt, launch)
    best, rate = 0.0, 0.6 * around
    while rate <= 1.5 * around:
        records = server.serve(arrivals(rate, 20_000, 5), 5)
        worst = max(sum(not s.holds(v) for v in samples_ms(records, s.metric)) / len(records) for s in slos)
        if worst <= 0.01:
            best = rate
        elif best and rate > 1.1 * best:
            break  # well past it
        rate *= 1.01
    return best


def study(way: str, seed: int, trials: int, truth: bool = False) -> dict:
    """One study; the best-so-far after each launch (as a multiple of the baseline) and the seed's figures."""
    from optuna.trial import TrialState

    from servetune.testing.simulated import standin_runner
    from servetune.tuner import Tuner

    tmp = Path(tempfile.mkdtemp(prefix=f"study-{way}-{seed}-"))
    options = study_options(tmp, trials=trials, seed=seed, **WAYS[way])
    tuner = Tuner(options, runner=standin_runner(input_tokens=128, output_tokens=128, images=1, salt=seed))
    tuner.run()
    launched = [
        t for t in sorted(tuner.study.get_trials(deepcopy=False), key=lambda t: t.number)
        if "duplicate_of" not in t.user_attrs and t.state != TrialState.WAITING
    ]  # fmt: skip
    base = next(t.values[0] for t in launched if t.user_attrs.get("source") == "rules")
    best, curve = 0.0, []
    for t in launched:
        if t.state == TrialState.COMPLETE and t.values:
            best = max(best, t.values[0])
        curve.append(best / base)
    seeded = next((t for t in launched if t.user_attrs.get("source") == "model"), None)
    out = {"curve": curve, "base": base}
    if seeded is not None and seeded.values:
        predicted, measured = seeded.user_attrs["predicted"]["capacity"], seeded.values[0]
        out["seed"] = (predicted, measured)
        if truth:
            argv = list(seeded.user_attrs["argv"])
            out["truth"] = long_run_truth(argv, seed, f"trial-{seeded.number:04d}", measured)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--target", type=float, default=1.3)
    parser.add_argument("--truth", action="store_true", help="the seeded launch's long-run truth (about 40 s each)")
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    args = parser.parse_args()
    print(f"capacity studies on the simulated stand-in, {args.trials} launches each; target {args.target}x baseline")
    summary = {}
    for way in args.ways:
        reach, final, errors, model_errors = [], [], [], []
        t0 = time.monotonic()
        for seed in args.seeds:
            r = study(way, seed, args.trials, truth=args.truth)
            hit = next((i + 1 for i, v in enumerate(r["curve"]) if v >= args.target), None)
            reach.append(hit)
            final.append(r["curve"][-1])
            line = f"  {way:6s} seed {seed}: " + " ".join(f"{v:.2f}" for v in r["curve"])
            line += f" | {args.target}x at launch {hit if hit else '-'}"
            if "seed" in r:
                predicted, measured = r["seed"]
                errors.append(predicted / measured - 1.0)
                line += f" | seed predicted {predicted:.1f}, measured {measured:.1f} ({predicted / measured - 1:+.1%})"
            if r.get("truth"):
                true = r["truth"]
                model_errors.append(predicted / true - 1.0)
                line += (
                    f", long-run truth {true:.1f} (predicted {predicted / true - 1:+.1%}, "
                    f"measured {measured / true - 1:+.1%})"
                )
            print(line)
        hits = [h for h in reach if h is not None]
        summary[way] = (hits, final, errors, model_errors, time.monotonic() - t0)
    print()
    for way, (hits, final, errors, model_errors, spent) in summary.items():
        reached = f"{len(hits)}/{len(final)} studies reached {args.target}x"
        median = f", median launches {statistics.median(hits):g}" if hits else ""
        err = f"; the seed's prediction {min(errors):+.1%} to {max(errors):+.1%}" if errors else ""
        if model_errors:
            err += f" of its measured capacity, {min(model_errors):+.1%} to {max(model_errors):+.1%} of its truth"
        print(f"{way:6s}: {reached}{median}; best after {args.trials} launches: median "
              f"{statistics.median(final):.2f}x (min {min(final):.2f}){err} [{spent:.0f} s]")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
