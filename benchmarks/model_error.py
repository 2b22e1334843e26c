"""The server model's error over a grid of configs, against the long-run truth (prints figures; not a test).

    python benchmarks/model_error.py [--seed 2] [--configs 24x32 32x32 40x64 48x64 64x64 96x128]

Runs the first launches of `benchmarks/study_model.py`'s model study (the simulated stand-in, its SLOs) until
the model is fitted on the baseline's search, as a study fits it, then for the baseline and each config
(`LIMITxGRAPH`: `--max-running-requests` and `--cuda-graph-max-bs-decode`) prints the model's predicted
capacity and the long-run truth on the baseline's own launch (`study_model.long_run_truth`: its noise factor,
so the comparison is of the model, not of launches). The seed a study would take is printed too: a seed that
is the model's best sits where the model's error is most in its favour, wherever that error is largest.

`--tails CONFIG RATE [RATE ...]` prints, for one config, where the error comes from: at each rate the model's
p99 TTFT and TPOT (`ServerModel.simulated`: its first reading, 2,000 arrivals per seed, and its final one,
`SIM_HORIZON_S` of arrivals) beside the same launch's over 20,000 arrivals, and each one's
throughput ceiling (the model's: the limit over a request's life at a full batch; the server's: completions per
second under a queue that never empties, 150 req/s offered).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import study_model as sm

    from servetune.bench.servermodel import ServerModel
    from servetune.bench.slo import parse_slos
    from servetune.testing.simulated import standin_runner
    from servetune.tuner import Tuner
    from servetune.tuner._model import _steps, load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2, help="the study's seed (study_model.py's seeds)")
    parser.add_argument("--configs", nargs="+", default=["24x32", "32x32", "40x64", "48x64", "64x64", "96x128"])
    parser.add_argument("--tails", nargs="+", metavar="CONFIG_THEN_RATES", help="LIMITxGRAPH, then rates (req/s)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix=f"model-error-{args.seed}-"))
    options = sm.study_options(tmp, trials=3, seed=args.seed, **sm.WAYS["model"])
    tuner = Tuner(options, runner=standin_runner(input_tokens=128, output_tokens=128, images=1, salt=args.seed))
    tuner.run()
    record = load(tuner.study)
    base = next(t for t in tuner.study.get_trials(deepcopy=False) if t.number == record["fitted_on"])
    limits = base.user_attrs.get("server_limits") or {}
    profiles = [s.profile for s in _steps(base) if s.profile is not None]
    model = ServerModel.fit(profiles, running_limit=limits.get("running"), graph_bs=limits.get("graph"))
    slos, argv, launch = parse_slos(sm.SLOS), list(base.user_attrs["argv"]), f"trial-{base.number:04d}"
    seed = record.get("seed") or {}
    print(f"seed {args.seed}: fitted on trial {base.number} (measured {base.values[0]:.1f} req/s); the study's seed "
          f"{seed.get('values')} predicted {seed.get('predicted')}")  # fmt: skip
    if args.tails:
        tails(model, argv, args.seed, launch, args.tails[0], [float(r) for r in args.tails[1:]])
        return 0
    print(f"{'config':>10} {'predicted':>10} {'truth':>8} {'error':>8}")
    for text in ["baseline", *args.configs]:
        if text == "baseline":
            limit = graph = None
            extra: list[str] = []
        else:
            limit, graph = (int(x) for x in text.split("x"))
            extra = ["--max-running-requests", str(limit), "--cuda-graph-max-bs-decode", str(graph)]
        predicted = model.capacity(slos, running_limit=limit, graph_bs=graph)
        true = sm.long_run_truth(argv + extra, args.seed, launch, predicted)
        error = f"{predicted / true - 1:+.1%}" if true else "n/a"
        print(f"{text:>10} {predicted:10.1f} {true:8.1f} {error:>8}", flush=True)
    return 0


def tails(model, argv: list[str], salt: int, launch: str, config: str, rates: list[float]) -> None:
    """The model's p99 TTFT and TPOT against the launch's long run at each rate, for one config."""
    import study_model as sm

    from servetune.bench.servermodel import horizon_arrivals
    from servetune.bench.stats import percentile
    from servetune.testing.simulated import arrivals

    limit, graph = (int(x) for x in config.split("x"))
    extra = ["--max-running-requests", str(limit), "--cuda-graph-max-bs-decode", str(graph)]
    server = sm.launched(argv + extra, salt, launch)
    full = model.tpot_ms(model.limit(limit), graph, 0.0) * (model.out_tokens - 1) / 1000.0 + model.ttft_ms / 1000.0
    served = server.serve(arrivals(150.0, 6000, 5), 5)
    done = sorted((r for r in served if r.finished and r.success), key=lambda r: r.end)
    half = len(done) // 2
    ceiling = half / (done[3 * len(done) // 4].end - done[len(done) // 4].end)
    print(f"{config}: throughput ceiling, model {model.limit(limit) / full:.1f} req/s, server {ceiling:.1f} req/s")
    print(f"{'rate':>6} {'p99 TTFT model':>15} {'300 s':>6} {'server':>8} {'p99 TPOT model':>15} {'server':>8}")
    for rate in rates:
        records = [r for r in server.serve(arrivals(rate, 20_000, 5), 5) if r.finished and r.success]
        ttft = sorted((r.ttft + r.lag) * 1000.0 for r in records)
        tpot = sorted((r.end - r.start - r.ttft) / (r.output_len - 1) * 1000.0 for r in records)
        point = model.simulated(rate, limit, graph, tail=0.01)
        long = model.simulated(rate, limit, graph, tail=0.01, arrivals=horizon_arrivals(rate))
        print(f"{rate:6.1f} {point.ttft_p99_ms:15.0f} {long.ttft_p99_ms:6.0f} {percentile(ttft, 99):8.0f} "
              f"{point.tpot_p99_ms:15.2f} {percentile(tpot, 99):8.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
