"""How late the benchmark client itself runs over a long soak (prints figures; not a test).

    python benchmarks/client_lateness.py [--rate 14] [--seconds 300] [--window 30] [--workload text-chat] [--chunks 256]
        [--plain]

Runs one soak as a user would, with the managed path (`servetune bench --sglang-cmd "python -m
servetune.testing.standin" --soak-seconds --request-rate`, a p99 TTFT and a p99 TPOT SLO): servetune starts
the stand-in server (it stands for SGLang; it serves in real time on this machine's CPUs) in its own process
group and stops it. Prints, for each `--window` seconds of scheduled arrivals: the requests, the client's
lateness (the send time less the scheduled arrival) at p50 and p99, and TTFT from the send at p50. A client
that keeps up holds its lateness flat; one whose own work grows with the records it holds falls behind more
as the soak goes on, and every millisecond it is late is counted into the TTFT the verdict judges from the
scheduled arrival (docs/h200-results.md section 20: on the H200 a 300 s soak's p99 lateness grew from 8 to
437 ms while each partial snapshot pooled every ITL gap so far).
`--plain`: the same arrivals as a plain fixed-rate run (`-n` rate x seconds, `--request-rate`, no verdict)
with its progress display on (stderr a pipe: a line every 10 s), as a user runs it: its client hands the
display a snapshot every 1/50 of the run (before the snapshots were lazy, each computed every statistic over
every record on the send loop).
Run it on two checkouts to compare clients: `PYTHONPATH=/path/to/checkout python benchmarks/client_lateness.py`
(servetune runs in a scratch directory, so `python -m servetune` imports the checkout named, not the
working directory's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servetune.bench.stats import percentile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=14.0, help="the soak's Poisson rate (req/s)")
    parser.add_argument("--seconds", type=float, default=300.0, help="the soak's length (s)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of arrivals per printed row")
    parser.add_argument("--workload", default="text-chat")
    parser.add_argument("--chunks", type=int, default=256,
                        help="streamed chunks per request at most (the stand-in's SERVETUNE_STANDIN_MAX_CHUNKS; SGLang "
                             "streams one per token, and the client records a gap for each)")  # fmt: skip
    parser.add_argument("--plain", action="store_true",
                        help="a plain run of rate x seconds requests with progress, not a soak")  # fmt: skip
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="client-lateness-"))
    run_dir = work / "run"
    standin = f"{sys.executable} -m servetune.testing.standin"
    t = time.monotonic()
    length = ["-n", str(round(args.rate * args.seconds))] if args.plain else ["--soak-seconds", f"{args.seconds:g}"]
    out = subprocess.run(
        [sys.executable, "-m", "servetune", "bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", args.workload,
         "--sglang-cmd", standin, *length, "--request-rate", f"{args.rate:g}",
         "--slo", "p99_ttft_ms<=2000", "--slo", "p99_tpot_ms<=25", "--run-dir", str(run_dir),
         *([] if args.plain else ["--json"])],  # --json turns the progress display off
        capture_output=True, text=True, check=False, cwd=work,
        env={**os.environ, "SERVETUNE_STANDIN_MAX_CHUNKS": str(args.chunks)},
    )  # fmt: skip
    wall = time.monotonic() - t
    if out.returncode != 0:
        print(out.stderr[-2000:])
        return 1
    plain = json.loads((run_dir / "metrics.json").read_text()) if args.plain else None
    run = plain if plain is not None else json.loads(out.stdout)["soak"]
    lag = run.get("loop_lag_max_ms")  # reported since the client samples its loop (absent before)
    requests = run_dir / ("requests.jsonl" if args.plain else "soak/requests.jsonl")
    records = [json.loads(line) for line in requests.read_text().splitlines()]
    what = "plain run" if args.plain else f"soak, {run['state']} at {run['at_s']:.0f} s"
    print(
        f"{what} at {args.rate:g} req/s for {args.seconds:g} s ({args.workload}, stand-in, up to {args.chunks} "
        f"chunks per request): {len(records)} requests sent, client p99 lateness {run['lateness_p99_ms']:.0f} ms, "
        f"loop lag max {f'{lag:.0f} ms' if lag is not None else '(not reported)'}, wall {wall:.0f} s"
    )
    print(f"{'arrivals (s)':>14} {'requests':>9} {'late p50 ms':>12} {'late p99 ms':>12} {'TTFT p50 ms':>12}")
    start = 0.0
    while True:
        rows = [r for r in records if r["scheduled"] is not None and start <= r["scheduled"] < start + args.window]
        if not rows:
            break
        late = sorted((r["start"] - r["scheduled"]) * 1000.0 for r in rows)
        ttft = [r["ttft"] * 1000.0 for r in rows if r["success"]]
        print(
            f"{start:6.0f}-{start + args.window:<6.0f} {len(rows):9d} {statistics.median(late):12.1f} "
            f"{percentile(late, 99):12.1f} {statistics.median(ttft) if ttft else float('nan'):12.1f}"
        )
        start += args.window
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
