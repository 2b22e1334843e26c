"""How close is the pruner's partial figure to the full run's, on a real SGLang server?

Runs the builtin client against a running server and records every partial result the tuner's
pruner would see (`on_progress`: the partial steady window, whole waves while requests are still
being sent), then prints, at each pruner checkpoint (`servetune.tuner._pruning`), the partial
steady throughput as a fraction of the finished run's. Prints figures; not a test.

    python3 scripts/device/partial_windows.py --url http://127.0.0.1:30000 \
        --workload single-image-stream --requests 768 --label defaults --out $OUT/partial-defaults.json
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--workload", default="single-image-stream")
    ap.add_argument("--requests", type=int, default=768)
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-dir", default=None, help="keep the client's files here (requests.jsonl: every request)")
    a = ap.parse_args()

    from servetune.bench import run_benchmark
    from servetune.bench.workloads import load_workload
    from servetune.tuner._pruning import Checkpoints

    workload = load_workload(a.workload)
    seen: list[dict] = []

    def progress(done: int, total: int, partial) -> None:
        s = partial.steady
        seen.append(
            {
                "done": done,
                "t": time.monotonic(),
                "steady_completed": s.completed if s else 0,
                "steady_rps": s.request_throughput if s else None,
            }
        )

    t0 = time.monotonic()
    final = run_benchmark(
        a.url, workload, requests=a.requests, client="builtin", on_progress=progress, run_dir=a.run_dir
    )
    full = final.comparable_request_throughput()
    w = final.steady
    counted = w.completed / (w.end_s - w.start_s) if w else None
    points = Checkpoints(a.requests, workload.max_concurrency)
    decisions = []
    for row in seen:
        step = (
            points.due(row["done"], {"steady_completed": row["steady_completed"]}) if row["done"] < a.requests else None
        )
        if step is not None and row["steady_rps"]:
            decisions.append({"checkpoint": step, **row, "ratio": row["steady_rps"] / full})
    print(
        f"{a.label}: {a.requests} requests of {workload.name} at {workload.max_concurrency} in flight; full steady "
        f"{full:.2f} req/s fitted, {counted or 0:.2f} counted over the window ({w.completed if w else 0} in it), "
        f"wall {time.monotonic() - t0:.0f} s"
    )
    for d in decisions:
        print(
            f"  checkpoint {d['checkpoint']:>4} (report at {d['done']:>4}, {d['steady_completed']:>3} in window): "
            f"{d['steady_rps']:.2f} req/s = {d['ratio']:.1%} of the full run"
        )
    with open(a.out, "w") as f:
        json.dump(
            {
                "label": a.label,
                "workload": workload.name,
                "requests": a.requests,
                "full_rps": full,
                "counted_rps": counted,
                "metrics": final.model_dump(mode="json"),
                "progress": seen,
                "decisions": decisions,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
