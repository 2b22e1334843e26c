"""How efficient is `servetune tune` on the stand-in landscape? Prints figures; not a test.

    python benchmarks/tuner_efficiency.py            # full run (docs/tuning.md has its timing)
    python benchmarks/tuner_efficiency.py --quick    # fewer seeds, trials and configs

Issue 4 asks two questions; each is measured where noise cannot decide it.

1. **Launches to 98% of the best** (goal: TPE with the baselines enqueued needs at most a
   third of random search's launches). Sampler efficiency is a property of the search on the
   landscape, so it is measured over many seeds on the stand-in's *deterministic* landscape:
   `servetune.testing.standin.expected_throughput`, the engine's own rules (`servetune.testing.standin._rules`)
   replayed in simulated time (what a launch with noise off serves, minus HTTP/CPU overhead).
   It runs through the real tuner loop (`Tuner.run`: the same space, enqueued baselines, the
   local phase of one-field changes of the best so far (`servetune.tuner._local`; `--no-local`
   leaves it out), sampler classes and set-up, `require` checks, dedupe and failure handling);
   only the runner, the launch + benchmark, is the model (`servetune.testing.FakeRunner`: an OOM
   config comes back as the same `Failure(cls="oom")` a launch gives; a measured one with the
   `/server_info` the stand-in reports for its flags, which the local phase reads the baselines'
   auto values from).
   The best is the true optimum, found by evaluating every config of the (finite) space through
   the same resolve path. "Launches"
   count calls to the runner's `measure` (a reused duplicate is not a launch; a failed launch is). Runs
   that never reach 98% within the budget count as budget + 1 (censored; the median stays
   exact while fewer than half are, else the ratio is printed as an upper bound). Two
   landscapes (two workload shapes, `LANDSCAPES`), so the sampler set-up is not fitted to one.
   (1b) A few seeds of the same arms with REAL stand-in launches check that the loop behaves
   the same when fed noisy measurements: each launched config is judged by its model value
   (did the search *pick* a 98% config), beside the measured best. The noise is measured too:
   one config launched k times (mean, stdev), and measured/model for it.
2. **Pruning** (goal: >= 50% of benchmark seconds saved at an equal final ranking). Real
   launches with the stand-in's noise off, 4x slower, and a benchmark of 384 requests at
   concurrency 64, the shipped image workloads' length (`--prune-requests 768` for twice as
   long). A realistic sequence, not a hand-picked one: the baselines, then configs
   drawn at random from the grid, enqueued in two studies, with and without pruning, so
   ranking differences come only from pruning. Equal final ranking: the top 3 configs by
   full-run throughput are not pruned and keep their order, and the best is the same.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = """\
name: efficiency
summary: Text load for the efficiency benchmark.
kind: text
requests: {requests}
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
GRID = {
    "max_running_requests": [8, 16, 32, 64, 128],
    "cuda_graph_max_bs_decode": [16, 32, 64, 128],
    "chunked_prefill_size": [512, 2048, 8192],
    "prefill_decode_interval": [0, 4, 8, 16],
    "mem_fraction_static": [0.8, 0.85, 0.94],
}
TIME_SCALE = 0.25
# the pruning comparison runs the stand-in 4x slower: at 0.25 the fast configs (> ~180 req/s)
# are limited by the 2 CPUs the server and the client share, not by their flags
PRUNE_TIME_SCALE = 1.0


LOCAL_TRIALS: int | None = None
"""The TPE arm's local phase (`TuneOptions.local_trials`): None is the tuner's default, 0 is off (`--no-local`)."""


def _options(
    tmp: Path,
    name: str,
    *,
    workload: str,
    trials: int,
    sampler: str,
    seed: int,
    prune: bool,
    enqueue: bool | None = None,
):
    from servetune.tuner import TuneOptions

    return TuneOptions(
        local_trials=LOCAL_TRIALS,
        model="qwen3-8b",
        gpu="h200",
        workload=str(tmp / workload),
        space_file=str(tmp / "space.yaml"),
        trials=trials,
        sampler=sampler,
        seed=seed,
        prune=prune,
        confirm_rounds=0,
        study=name,
        run_dir=tmp / name,
        sglang_cmd=f"{sys.executable} -m servetune.testing.standin",
        client="builtin",
        enqueue_baselines=(sampler == "tpe") if enqueue is None else enqueue,
    )


def model_value(resolution, workload, time_scale: float = TIME_SCALE) -> float | None:
    """The landscape's steady-window req/s for a resolved config (None: the server dies)."""
    from servetune.testing.standin import expected_throughput

    e = expected_throughput(
        resolution.argv(),
        resolution.env(),
        concurrency=workload.max_concurrency,
        input_tokens=workload.input_tokens,
        output_tokens=workload.output_tokens,
        requests=workload.requests,
        trim=workload.steady_trim,
        time_scale=time_scale,
    )
    return e.request_throughput


def standin_server_info(argv: list[str]) -> dict:
    """What the stand-in's /server_info reports for `argv`: its resolved flags (auto values decided)."""
    from servetune.testing.standin._config import build_parser, resolve

    return resolve(build_parser().parse_args(argv))


class ModelMeasure:
    """The launch + benchmark of a `FakeRunner`: the model instead of a launch; logs each call (= a launch)."""

    def __init__(self) -> None:
        self.cache: dict[str, float | None] = {}
        self.log: list[float | None] = []
        self.target = float("inf")
        self.stop = lambda: None

    def __call__(self, call):
        from servetune.runner import Failure
        from servetune.tuner._evaluate import config_hash

        key = config_hash(call.argv, call.env)
        if key not in self.cache:
            self.cache[key] = model_value(call.resolution, call.workload)
        v = self.cache[key]
        self.log.append(v)
        if v is not None and v >= self.target:
            self.stop()  # the study ends after this trial: what follows cannot change the count
        if v is None:
            return Failure(cls="oom", stage="start", message="CUDA out of memory (model)")
        return {"comparable_request_throughput": v, "request_throughput": v, "completed": call.workload.requests}

    def runner(self):
        """A `FakeRunner` measuring with this model, reporting the stand-in's `/server_info`."""
        from servetune.testing import FakeRunner

        return FakeRunner(self, server_info=lambda call: standin_server_info(call.argv))


def real_runner():
    """The stand-in runner (real processes and HTTP), logging (measured, model) per launch."""
    from servetune.testing import StandinRunner
    from servetune.tuner.objectives import flatten_metrics

    class RealMeasure(StandinRunner):
        def __init__(self) -> None:
            super().__init__(client="builtin")
            self.log: list[tuple[float | None, float | None]] = []
            self.target = float("inf")
            self.stop = lambda: None

        def measure(self, resolution, workload, **kwargs):
            m = super().measure(resolution, workload, **kwargs)
            flat = flatten_metrics(m.metrics) if m.ok else {}
            measured = (
                flat.get("comparable_request_throughput") if flat.get("completed") and not m.stopped_early else None
            )
            mv = model_value(resolution, workload)
            self.log.append((measured, mv))
            if mv is not None and mv >= self.target:
                self.stop()
            return m

    return RealMeasure()


def _launches_to(values, target: float) -> int | None:
    for i, v in enumerate(values, start=1):
        if v is not None and v >= target:
            return i
    return None


def random_exact(total: int, good: int, p: float = 0.5) -> int:
    """Launches random search needs to reach a good config with probability `p`, exactly: random
    search relaunches no config (a duplicate is reused), so its launches are the order of first
    draws, a random permutation of the grid; P(none of the first l is good) = C(N-l, K) / C(N, K).
    The 20-seed median of the random arm scatters around this by several launches."""
    from math import comb

    return next(n for n in range(1, total + 1) if 1 - comb(total - n, good) / comb(total, good) >= p)


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


# Part 1a runs on two landscapes, so the chosen sampler set-up is not fitted to one:
# (name, workload file, concurrency, input tokens, output tokens, requests)
LANDSCAPES = [
    ("text-64x128/64", "efficiency.yaml", 64, 128, 64, 192),
    ("text-128x512/128", "efficiency-128.yaml", 128, 512, 128, 384),
]


def true_optimum(tmp: Path, workload: str = "efficiency.yaml", label: str = "") -> tuple[float, int, int, dict]:
    """Every config of the grid through the tuner's resolve path and the model."""
    from servetune.tuner import Tuner

    tuner = Tuner(_options(tmp, f"grid-{workload}", workload=workload, trials=1, sampler="random", seed=0, prune=False))
    tuner.prepare()
    values = []
    for combo in itertools.product(*GRID.values()):
        layer = dict(zip(GRID, combo))
        values.append((model_value(tuner.resolve(layer), tuner.workload), layer))
    ok = [(v, layer) for v, layer in values if v is not None]
    best, best_layer = max(ok, key=lambda x: x[0])
    baseline = model_value(tuner.resolve({}), tuner.workload)
    within = sum(v >= 0.98 * best for v, _ in ok)
    print(
        f"landscape {label}: {len(values)} configs, {len(values) - len(ok)} die (OOM); optimum {best:.1f} req/s "
        f"({best_layer}); baseline {baseline:.1f} ({baseline / best:.0%}); "
        f"{within} configs ({within / len(values):.1%}) reach 98%"
    )
    return best, within, len(values), best_layer


def sampler_efficiency(
    tmp: Path,
    best: float,
    seeds: int,
    budget: int,
    workload: str = "efficiency.yaml",
    label: str = "",
    good: int | None = None,
    total: int | None = None,
) -> dict[str, list[int]]:
    from servetune.tuner import Tuner
    from servetune.tuner._sampler import describe_tpe

    target = 0.98 * best
    model = ModelMeasure()
    model.target = target
    counts: dict[str, list[int | None]] = {"tpe": [], "random": []}
    local_n = 0
    t0 = time.monotonic()
    for seed in range(seeds):
        for sampler in ("tpe", "random"):
            model.log = []
            tuner = Tuner(
                _options(
                    tmp,
                    f"m-{workload}-{sampler}-{seed}",
                    workload=workload,
                    trials=budget,
                    sampler=sampler,
                    seed=seed,
                    prune=False,
                ),
                runner=model.runner(),
            )
            model.stop = tuner.stop  # as Ctrl-C between trials: the loop returns
            tuner.run()
            local_n = tuner.local_budget if sampler == "tpe" else local_n
            counts[sampler].append(_launches_to(model.log, target))
    print(
        f"\n== 1a. launches to reach 98% of the optimum ({target:.1f} req/s), landscape {label}: deterministic, "
        f"{seeds} seeds per arm, budget {budget} launches (--trials), "
        f"real tuner loop ({time.monotonic() - t0:.0f} s) =="
    )
    print(
        f"  TPE set-up: {describe_tpe()}; local phase: {local_n} one-field changes of the best so far "
        f"(servetune.tuner._local) before TPE alone"
    )
    medians = {}
    for sampler, cs in counts.items():
        filled = [c if c is not None else budget + 1 for c in cs]
        q1, med, q3 = _quartiles(filled)
        medians[sampler] = med
        label = ("TPE + baselines" + (" + local" if local_n else "")) if sampler == "tpe" else "random"
        print(
            f"  {label:<24} median {med:5.1f}  IQR {q1:.1f}-{q3:.1f}  mean {statistics.mean(filled):5.1f}  "
            f"not reached {sum(c is None for c in cs)}/{len(cs)}"
        )
    ratio = medians["tpe"] / medians["random"]
    bound = "<= " if medians["random"] > budget else ""  # random's median censored: its true median is larger
    print(f"  ratio of medians TPE/random {bound}{ratio:.2f}  (goal <= 0.33: {'met' if ratio <= 1 / 3 else 'NOT met'})")
    if good and total:
        exact = random_exact(total, good)
        print(
            f"  random search's exact median: {exact} launches (quartiles {random_exact(total, good, 0.25)}-"
            f"{random_exact(total, good, 0.75)}; {good} of {total} configs reach 98%); TPE median / exact "
            f"{medians['tpe'] / exact:.2f}  (goal <= 0.33: {'met' if medians['tpe'] / exact <= 1 / 3 else 'NOT met'})"
        )
    return counts


def noise(tmp: Path, best_layer: dict, k: int) -> None:
    from servetune.testing import StandinRunner
    from servetune.tuner import Tuner
    from servetune.tuner._evaluate import Slot, evaluate

    runner = StandinRunner(client="builtin")
    tuner = Tuner(
        _options(tmp, "noise", workload="efficiency.yaml", trials=1, sampler="random", seed=0, prune=False),
        runner=runner,
    )
    tuner.prepare()
    print(f"\n== noise: one config launched {k} times (real stand-in, noise knob off) ==")
    for label, layer in (("baseline", {}), ("optimum", best_layer)):
        res = tuner.resolve(layer)
        xs = []
        for i in range(k):
            m = evaluate(
                runner,
                res,
                workload=tuner.workload,
                slot=Slot(0),
                run_dir=tmp / "noise" / f"{label}-{i}",
                requests=None,
            )
            xs.append(m.metrics["comparable_request_throughput"] if m.metrics else float("nan"))
        mean, sd = statistics.mean(xs), statistics.stdev(xs)
        mv = model_value(res, tuner.workload)
        print(
            f"  {label:<9} model {mv:6.1f}  measured mean {mean:6.1f}  stdev {sd:5.1f} ({sd / mean:.0%})  "
            f"range {min(xs):.1f}-{max(xs):.1f}  measured/model {mean / mv:.2f}"
        )


def real_loop(tmp: Path, best: float, seeds: int, budget: int) -> None:
    from servetune.tuner import Tuner

    target = 0.98 * best
    rec = real_runner()
    rec.target = target
    t0 = time.monotonic()
    rows = {"tpe": [], "random": []}
    for seed in range(seeds):
        for sampler in ("tpe", "random"):
            rec.log = []
            tuner = Tuner(
                _options(
                    tmp,
                    f"r-{sampler}-{seed}",
                    workload="efficiency.yaml",
                    trials=budget,
                    sampler=sampler,
                    seed=seed,
                    prune=False,
                ),
                runner=rec,
            )
            rec.stop = tuner.stop
            tuner.run()
            picked = _launches_to([mv for _, mv in rec.log], target)
            measured = [x for x, _ in rec.log if x is not None]
            best_mv = max((mv for _, mv in rec.log if mv is not None), default=None)
            rows[sampler].append((picked, len(rec.log), max(measured, default=float("nan")), best_mv))
    print(
        f"\n== 1b. the same with REAL launches: {seeds} seeds per arm, budget {budget} launches "
        f"({time.monotonic() - t0:.0f} s) =="
    )
    for sampler, rs in rows.items():
        label = "TPE + baselines" if sampler == "tpe" else "random"
        per = ", ".join(f"{p if p is not None else f'>{n}'}" for p, n, _, _ in rs)
        print(
            f"  {label:<16} launches to a 98% config (by model value): [{per}]; best measured "
            f"{', '.join(f'{m:.0f}' for _, _, m, _ in rs)} req/s; best picked config's model value "
            f"{', '.join(f'{b / best:.0%}' for _, _, _, b in rs if b)} of optimum"
        )


def pruning(tmp: Path, n_configs: int, requests: int, seed: int) -> None:
    import optuna

    from servetune.testing.standin import expected_throughput
    from servetune.tuner import Tuner
    from servetune.tuner._params import encode_params
    from servetune.tuner._pruning import CHECKPOINTS_PER_RUN, FIRST_WAVE_MARGIN, PRUNE_MARGINS, window_needs

    # a realistic sequence: the baselines first (as every study), then configs drawn at random
    # from the grid (OOM ones included: they die at start and cost no benchmark time)
    rng = random.Random(seed)
    combos = list(itertools.product(*GRID.values()))
    configs = [dict(zip(GRID, c)) for c in rng.sample(combos, n_configs)]

    def model(argv: list[str]) -> float | None:
        return expected_throughput(
            argv, concurrency=64, input_tokens=128, output_tokens=64, requests=requests, time_scale=PRUNE_TIME_SCALE
        ).request_throughput

    results = {}
    t0 = time.monotonic()
    os.environ["SERVETUNE_STANDIN_TIME_SCALE"] = str(PRUNE_TIME_SCALE)
    for prune in (False, True):
        name = f"prune-{prune}"
        tuner = Tuner(
            _options(
                tmp,
                name,
                workload="pruning.yaml",
                trials=len(configs) + 2,
                sampler="random",
                seed=seed,
                prune=prune,
                enqueue=True,
            )
        )
        tuner.prepare()
        for layer in configs:
            tuner.study.enqueue_trial(encode_params(tuner.space, layer))  # ordinal choices are stored as indices
        tuner.run()
        study = optuna.load_study(study_name=name, storage=tuner.storage_url)
        results[prune] = {t.number: t for t in study.trials}
    os.environ["SERVETUNE_STANDIN_TIME_SCALE"] = str(TIME_SCALE)
    full, pruned = results[False], results[True]

    def bench_s(trials) -> float:
        return sum((t.user_attrs.get("timing") or {}).get("bench_s", 0.0) for t in trials.values())

    full_s, pruned_s = bench_s(full), bench_s(pruned)
    saved = 1 - pruned_s / full_s if full_s else 0.0
    # launched, measured trials ranked by full-run throughput (duplicates of a launched config left out)
    measured = [n for n, t in full.items() if t.values and "duplicate_of" not in t.user_attrs]
    ranked = sorted(measured, key=lambda n: -full[n].values[0])
    top3 = ranked[:3]
    top_pruned = [i + 1 for i, n in enumerate(top3) if pruned[n].state.name != "COMPLETE"]
    pr_ok = [n for n, t in pruned.items() if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs]
    pr_rank = sorted(pr_ok, key=lambda n: -pruned[n].values[0])
    same_best = bool(pr_rank) and pr_rank[0] == ranked[0]
    same_top3 = not top_pruned and pr_rank[:3] == top3
    n_pruned = sum(t.state.name == "PRUNED" for t in pruned.values())
    fails = sum(t.state.name == "FAIL" for t in full.values())
    print(
        f"\n== 2. benchmark time saved by pruning: baselines + {len(configs)} configs drawn at random from the grid "
        f"(seed {seed}), {requests} requests at concurrency 64, "
        f"same list in both studies ({time.monotonic() - t0:.0f} s) =="
    )
    margins = ", ".join(f"{m:.0%} from {w:g} wave(s) in the window" for w, m in PRUNE_MARGINS)
    print(
        f"  pruner: BestRelativePruner, margin of the best finished trial at the same step {margins}; "
        f"checkpoints every 1/{CHECKPOINTS_PER_RUN} of the run once the steady window holds "
        f">= {window_needs(64)} completions, and one at the end of the first wave "
        f"(64 completions, the run's rate so far) with margin {FIRST_WAVE_MARGIN:.0%}; baselines never pruned"
    )
    print(
        f"  benchmark seconds: no pruning {full_s:.1f}, pruning {pruned_s:.1f} ({n_pruned} of {len(measured)} launched "
        f"and measured pruned; {fails} failed in both): saved {saved:.0%} "
        f"(goal >= 50%: {'met' if saved >= 0.5 else 'NOT met'})"
    )
    first = min((min(t.intermediate_values) for t in pruned.values() if t.intermediate_values), default=None)
    if first is not None:
        # the most pruning could save: every launched trial but the baselines stopped at the first decision
        cap = sum(
            (t.user_attrs.get("timing") or {}).get("bench_s", 0.0)
            for t in full.values()
            if t.user_attrs.get("source") not in ("rules", "defaults")
        ) * (1 - first / requests)
        print(
            f"  first decision at {first}/{requests} completions ({first / requests:.0%} of the run); "
            f"most it could save here: {cap / full_s:.0%}"
        )
    # how far the partial value at the first decision is from the same trial's full run (the trials that ran to the end)
    early = [
        (min(t.intermediate_values), t.intermediate_values[min(t.intermediate_values)] / t.values[0])
        for t in pruned.values()
        if t.state.name == "COMPLETE" and t.intermediate_values and t.values
    ]
    if early:
        print(
            "  partial/full at the first decision, trials that ran to the end: "
            + ", ".join(f"{r:.0%} (at {step})" for step, r in early)
        )
    print(
        f"  final ranking: best {'same' if same_best else 'DIFFERENT'}; top 3 by full-run throughput pruned: "
        f"{top_pruned or 'none'}; top 3 unchanged: {same_top3}"
    )
    for rank, n in enumerate(ranked, start=1):
        t = pruned[n]
        at = t.user_attrs.get("pruned_at") or {}
        mv = model(full[n].user_attrs.get("argv") or [])
        window = (
            f"{at.get('steady_completed')} in window" if at.get("steady_completed") else "first wave, no window yet"
        )
        how = (
            f"PRUNED at {at.get('step')}/{requests} (partial {at.get('value', 0):.1f}, {window})"
            if t.state.name == "PRUNED"
            else f"{t.state.name} {t.values[0] if t.values else float('nan'):.1f}"
        )
        print(
            f"    #{rank:<2} trial {n:<2} {full[n].user_attrs.get('source', 'sampler'):<8} "
            f"full {full[n].values[0]:6.1f} req/s  "
            f"model {mv if mv is not None else float('nan'):6.1f}  with pruning: {how}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="about 2 minutes: fewer seeds, trials and configs")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per arm on the model landscape (default 20)")
    ap.add_argument(
        "--budget",
        type=int,
        default=None,
        help="launches (--trials) per study on the model landscape (default 80; quick 60)",
    )
    ap.add_argument(
        "--real-seeds", type=int, default=None, help="seeds per arm with real launches (default 2; quick 1)"
    )
    ap.add_argument("--real-budget", type=int, default=None, help="trials per real study (default 15; quick 10)")
    ap.add_argument(
        "--noise-k", type=int, default=None, help="launches of one config for the noise figure (default 5; quick 3)"
    )
    ap.add_argument(
        "--prune-configs", type=int, default=None, help="random configs in the pruning comparison (default 10; quick 6)"
    )
    ap.add_argument(
        "--prune-requests", type=int, default=None, help="requests per trial in the pruning comparison (default 384)"
    )
    ap.add_argument("--prune-seed", type=int, default=7, help="seed of the random configs in the pruning comparison")
    ap.add_argument(
        "--prune-waves",
        type=float,
        default=None,
        help="waves of completions the steady window must hold before the first pruning decision "
        "(default: the tuner's MIN_WINDOW_WAVES)",
    )
    ap.add_argument(
        "--no-local", action="store_true", help="TPE arm without the local phase (TuneOptions.local_trials=0)"
    )
    ap.add_argument(
        "--skip",
        action="append",
        choices=["model", "second", "real", "noise", "pruning"],
        default=[],
        help="leave out a part (second: the second landscape of part 1a)",
    )
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    global LOCAL_TRIALS
    LOCAL_TRIALS = 0 if a.no_local else None
    q = a.quick
    seeds = a.seeds or (10 if q else 20)
    budget = a.budget or (60 if q else 80)
    real_seeds = a.real_seeds or (1 if q else 2)
    real_budget = a.real_budget or (10 if q else 15)
    noise_k = a.noise_k or (3 if q else 5)
    prune_configs = a.prune_configs or (6 if q else 10)
    prune_requests = a.prune_requests or 384
    os.environ["SERVETUNE_STANDIN_TIME_SCALE"] = str(TIME_SCALE)
    os.environ["SERVETUNE_STANDIN_NOISE"] = "0"
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="servetune-eff-") as d:
        tmp = Path(d)
        os.environ["SERVETUNE_RUNS_DIR"] = str(tmp / "runs")
        for _, name, conc, inp, out, req in LANDSCAPES:
            (tmp / name).write_text(
                WORKLOAD.format(requests=req)
                .replace("max_concurrency: 64", f"max_concurrency: {conc}")
                .replace("input_tokens: 128", f"input_tokens: {inp}")
                .replace("output_tokens: 64", f"output_tokens: {out}")
            )
        (tmp / "pruning.yaml").write_text(
            WORKLOAD.format(requests=prune_requests).replace("name: efficiency", "name: pruning")
        )
        (tmp / "space.yaml").write_text(SPACE)
        best, good, total, best_layer = true_optimum(tmp, LANDSCAPES[0][1], LANDSCAPES[0][0])
        if "model" not in a.skip:
            sampler_efficiency(tmp, best, seeds, budget, LANDSCAPES[0][1], LANDSCAPES[0][0], good, total)
            for label, name, *_ in LANDSCAPES[1:]:
                if "second" not in a.skip:
                    b2, good2, total2, _ = true_optimum(tmp, name, label)
                    sampler_efficiency(tmp, b2, seeds, budget, name, label, good2, total2)
        if "noise" not in a.skip:
            noise(tmp, best_layer, noise_k)
        if "real" not in a.skip:
            real_loop(tmp, best, real_seeds, real_budget)
        if "pruning" not in a.skip:
            if a.prune_waves is not None:
                from servetune.tuner import _pruning

                _pruning.MIN_WINDOW_WAVES = a.prune_waves
            pruning(tmp, prune_configs, prune_requests, seed=a.prune_seed)
    print(f"\ntotal {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
