"""What a decode step and a prefill batch cost, timed by SGLang itself (prints figures; not a test).

    python benchmarks/decode_intervals.py RUN [RUN ...] [--budget]

RUN: a capacity search's directory (`steps/*/telemetry.jsonl`, as `bench --capacity` writes it; the H200 ones
are in docs/h200-evidence.tar.xz, e.g. `/tmp/h200/certified-s22/certified/02-ucap`).

The fit is `servetune.bench.engineclock`'s, which `bench --capacity` reports as its `engine` line and
stores in `capacity.json` (its module docstring explains it): over every interval between two decode lines
(40 decode steps, and the prefill batches logged between them; 40 B / G seconds by SGLang's clock)

    interval = 40 * a + b * (40 * B) + p0 * (prefill batches) + p1 * (prefilled requests)

gives the decode step at an empty batch (a), its growth per running request (b), and a prefill batch's fixed
(p0) and per-request (p1) cost, not from the client's view of each request's life (`servermodel.ServerModel.fit`,
where the batch and the prefill rate grow together in an unbounded search, so b and the prefill stall are hard
to tell apart). Printed per run: the intervals, the fit and its R^2, requests per prefill batch, the prefill
cost per request at that batch size, the intervals' sum against the wall clock between the first and last
decode line (their stamps) as a check that 40 B / G times the intervals (session 22's search read 2-8% over),
and, where the log was stamped to the millisecond (`SGLANG_LOG_MS`, which `servetune launch` sets), the median
of each interval's 40 B / G over its stamped length ("-" with whole-second stamps).

`--budget`: then, per step, where each second went by the run's fit: decode steps a second (40 per interval),
the mean running batch B, decode time (steps x (a + b B)) and prefill time (p0 x batches + p1 x requests) in ms
per second, prefill's share, and their sum in seconds per second (near 1 where the fit holds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servetune.bench.engineclock import DECODE_LOG_INTERVAL, engine_clock, intervals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--budget", action="store_true", help="per step: where each second went, by the run's fit")
    args = parser.parse_args()
    budgets = []
    print("run | intervals | a ms | b ms/request | p0 ms/batch | p1 ms/request | R^2 | requests/batch |"
          " prefill ms/request | sum / wall s | timed / stamped")  # fmt: skip
    for run in args.runs:
        steps, read, total, wall = [], [], 0.0, 0.0  # read: (step, its intervals, its decode lines), once each
        for step in sorted((run / "steps").glob("*/telemetry.jsonl")):
            if step.parent.name.startswith("00"):  # the warm-up wave
                continue
            lines = [json.loads(text) for text in step.read_text().splitlines() if text.strip()]
            steps.append(lines)
            found = intervals(lines)
            decode = [line for line in lines if line.get("kind") == "decode" and line.get("t", -1.0) >= 0.0]
            read.append((step.parent.name, found, decode))
            if found and len(decode) > 1:
                total += sum(s for s, _, _, _ in found)
                wall += decode[-1]["ts"] - decode[0]["ts"]
        e = engine_clock(steps)
        if e is None:
            print(
                f"{run} | {sum(len(found) for _, found, _ in read)} | no fit (too few intervals, or not 40 steps apart)"
            )
            continue
        budgets += [(run, name, rows, decode, e) for name, rows, decode in read]
        timed = f"{e.timed_ratio:.3f}" if e.timed_ratio is not None else "-"
        print(f"{run} | {e.intervals} | {e.decode_step_ms:.2f} | {e.per_running_ms:.4f} | {e.prefill_batch_ms:.1f}"
              f" | {e.prefill_request_ms:.1f} | {e.r2:.3f} | {e.requests_per_batch:.2f}"
              f" | {e.prefill_ms_per_request:.1f} | {total:.0f} / {wall:.0f} | {timed}")  # fmt: skip
    if args.budget:
        print("\nrun | step | decode steps/s | mean B | decode ms/s | prefill ms/s | prefill share | s per s")
        for run, name, rows, decode_lines, e in budgets:
            seconds = sum(r[0] for r in rows)
            if not rows or seconds <= 0 or not decode_lines:
                continue
            batch = sum(x["running_req"] for x in decode_lines) / len(decode_lines)
            steps_s = DECODE_LOG_INTERVAL * len(rows) / seconds
            decode = steps_s * (e.decode_step_ms + e.per_running_ms * batch)
            prefill = sum(r[2] * e.prefill_batch_ms + r[3] * e.prefill_request_ms for r in rows) / seconds
            print(f"{run} | {name} | {steps_s:.1f} | {batch:.0f} | {decode:.0f} | {prefill:.0f}"
                  f" | {prefill / (decode + prefill):.2f} | {(decode + prefill) / 1000:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
