"""How efficient is `servetune tune` on the stand-in landscape? Prints figures; not a test.

    python benchmarks/tuner_efficiency.py                  # about 6 minutes on 2 cores
    python benchmarks/tuner_efficiency.py --seeds 2 --trials 15 --long 20   # quicker

Every measurement is a real stand-in launch plus a real HTTP benchmark, made through the
tuner's own code path (`Tuner`, `managed_run`, `run_benchmark`). Two questions:

1. **Launches to 98%.** A long TPE run (plus everything measured below) gives the best
   throughput B*. For TPE with the baselines enqueued and for plain random search, over several
   seeds, count the launches until a trial reaches 0.98 * B*. Each distinct config is launched
   once and its measurement reused by every later run (the same `Tuner`, with its `measure`
   wrapped by a cache keyed on the config hash): the landscape is one fixed, real
   realisation, so both samplers are judged on the same numbers and the run stays short.
   Goal: TPE needs at most a third of random search's launches.
2. **Pruning.** The same sequence of configs (random sampler, same seed, so the sequence does
   not depend on outcomes) runs twice, with and without the median pruner; both runs launch
   for real (no cache). Reported: benchmark seconds saved, and whether the final ranking (the
   best config, and the order of the top configs both runs completed) is unchanged.
   Goal: >= 50% saved at an equal ranking.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = """\
name: efficiency
summary: Text load for the efficiency benchmark.
kind: text
requests: 192
max_concurrency: 64
input_tokens: 128
output_tokens: 64
warmup_requests: 4
seed: 1
steady_trim: 0.1
"""

SPACE = """\
tune:
  max_running_requests: {choice: [8, 16, 32, 64, 128]}
  cuda_graph_max_bs_decode: {choice: [16, 32, 64, 128]}
  chunked_prefill_size: {choice: [512, 2048, 8192]}
  prefill_decode_interval: {choice: [0, 4, 8, 16]}
  mem_fraction_static: {choice: [0.8, 0.85, 0.94]}
"""


def _options(tmp: Path, name: str, *, trials: int, sampler: str, seed: int, prune: bool, n_startup: int = 5):
    from servetune.tuner import TuneOptions

    return TuneOptions(
        model="qwen3-8b", gpu="h200", workload=str(tmp / "efficiency.yaml"), space_file=str(tmp / "space.yaml"),
        trials=trials, sampler=sampler, seed=seed, prune=prune, confirm_rounds=0, study=name,
        run_dir=tmp / name, sglang_cmd=f"{sys.executable} -m servetune.standin", client="builtin",
        n_startup_trials=n_startup, enqueue_baselines=sampler == "tpe",
    )


class CachedMeasure:
    """`measure` with one real launch per distinct config (keyed like the tuner's dedupe)."""

    def __init__(self) -> None:
        from servetune.tuner import loop

        self.real = loop.measure
        self.cache: dict[str, object] = {}
        self.launches = 0
        self.seconds = 0.0

    def __call__(self, resolution, **kwargs):
        from servetune.tuner._evaluate import config_hash

        key = config_hash(resolution.argv(), resolution.env())
        if key not in self.cache:
            kwargs["should_stop"] = None
            t0 = time.monotonic()
            self.cache[key] = self.real(resolution, **kwargs)
            self.seconds += time.monotonic() - t0
            self.launches += 1
        return self.cache[key]


def _values(result) -> list[float | None]:
    """Primary objective per launched trial, in trial order (failures None; reused dupes left out)."""
    out = []
    for t in result.trials:
        if "not relaunched" in t.note:
            continue
        out.append(t.values[0] if t.state == "COMPLETE" and t.values else None)
    return out


def _launches_to(values: list[float | None], target: float) -> int | None:
    for i, v in enumerate(values, start=1):
        if v is not None and v >= target:
            return i
    return None


def efficiency(tmp: Path, seeds: int, trials: int, long_trials: int) -> None:
    from servetune.tuner import Tuner, loop

    cached = CachedMeasure()
    loop.measure = cached
    try:
        t0 = time.monotonic()
        long_run = Tuner(_options(tmp, "long", trials=long_trials, sampler="tpe", seed=1000, prune=False)).run()
        runs: dict[str, list[list[float | None]]] = {"tpe": [], "random": []}
        for seed in range(seeds):
            for sampler in ("tpe", "random"):
                res = Tuner(_options(tmp, f"{sampler}-{seed}", trials=trials, sampler=sampler, seed=seed, prune=False)).run()
                runs[sampler].append(_values(res))
        elapsed = time.monotonic() - t0
    finally:
        loop.measure = cached.real
    measured = [m.metrics["comparable_request_throughput"] for m in cached.cache.values() if m.metrics]
    best = max(measured)
    target = 0.98 * best
    print("== 1. launches to reach 98% of the best config ==")
    print(f"landscape: {cached.launches} distinct configs launched ({cached.seconds:.0f} s of launches; {elapsed:.0f} s total); "
          f"best {best:.2f} req/s (long TPE run of {long_trials}: {max(v for v in _values(long_run) if v is not None):.2f}); "
          f"target {target:.2f}")
    summary = {}
    for sampler, per_seed in runs.items():
        counts = [_launches_to(v, target) for v in per_seed]
        # not reached within the budget: count as budget + 1 (a lower bound on the true cost)
        filled = [c if c is not None else trials + 1 for c in counts]
        summary[sampler] = statistics.mean(filled)
        print(f"{sampler:>6}: launches per seed {counts}  mean {statistics.mean(filled):.1f}  "
              f"median {statistics.median(filled):.1f}  reached {sum(c is not None for c in counts)}/{len(counts)}")
    ratio = summary["tpe"] / summary["random"]
    print(f"TPE (baselines enqueued) / random = {ratio:.2f}  (goal <= 0.33: {'met' if ratio <= 1 / 3 else 'NOT met'})")


def pruning(tmp: Path, trials: int, seed: int) -> None:
    from servetune.tuner import Tuner

    results = {}
    for prune in (False, True):
        name = f"prune-{prune}"
        res = Tuner(_options(tmp, name, trials=trials, sampler="random", seed=seed, prune=prune)).run()
        import optuna

        study = optuna.load_study(study_name=name, storage=res.storage)
        bench_s = sum((t.user_attrs.get("timing") or {}).get("bench_s", 0.0) for t in study.trials)
        results[prune] = (res, bench_s)
    (full, full_s), (pruned, pruned_s) = results[False], results[True]
    saved = 1 - pruned_s / full_s if full_s else 0.0

    def params_key(t):
        return tuple(sorted(t.params.items()))

    full_rank = [params_key(t) for t in loop_rank(full)]
    pruned_rank = [params_key(t) for t in loop_rank(pruned)]
    same_best = bool(full_rank and pruned_rank and full_rank[0] == pruned_rank[0])
    common = [k for k in full_rank if k in pruned_rank]
    same_order = common == [k for k in pruned_rank if k in common]
    n_pruned = sum(t.state == "PRUNED" for t in pruned.trials)
    print("== 2. benchmark time saved by pruning ==")
    print(f"{trials} trials, same config sequence (random sampler, seed {seed}); {n_pruned} pruned")
    print(f"benchmark seconds: no pruning {full_s:.1f}, median pruner {pruned_s:.1f}: saved {saved:.0%} "
          f"(goal >= 50%: {'met' if saved >= 0.5 else 'NOT met'})")
    print(f"final ranking equal: best config {'same' if same_best else 'DIFFERENT'}; "
          f"order of the {len(common)} configs both completed {'same' if same_order else 'different (noise)'}")


def loop_rank(result):
    from servetune.tuner.loop import rank_feasible

    objectives = [type("O", (), {"direction": o["direction"]})() for o in result.objectives]
    return rank_feasible(result.trials, objectives)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20, help="budget per seed for TPE and random")
    ap.add_argument("--long", type=int, default=30, help="trials of the long TPE run")
    ap.add_argument("--prune-trials", type=int, default=16)
    ap.add_argument("--time-scale", default="0.25", help="SERVETUNE_STANDIN_TIME_SCALE")
    ap.add_argument("--skip", choices=["efficiency", "pruning"], default=None)
    args = ap.parse_args()
    os.environ["SERVETUNE_STANDIN_TIME_SCALE"] = args.time_scale
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="servetune-eff-") as d:
        tmp = Path(d)
        os.environ["SERVETUNE_RUNS_DIR"] = str(tmp / "runs")
        (tmp / "efficiency.yaml").write_text(WORKLOAD)
        (tmp / "space.yaml").write_text(SPACE)
        if args.skip != "efficiency":
            efficiency(tmp, args.seeds, args.trials, args.long)
        if args.skip != "pruning":
            pruning(tmp, args.prune_trials, seed=7)


if __name__ == "__main__":
    main()
