"""What a decode step and a prefill batch cost, timed by SGLang itself (prints figures; not a test).

    python benchmarks/decode_intervals.py RUN [RUN ...]

RUN: a capacity search's directory (`steps/*/telemetry.jsonl`, as `bench --capacity` writes it; the H200 ones
are in docs/h200-evidence.tar.xz, e.g. `/tmp/h200/certified-s22/certified/02-ucap`).

SGLang logs a decode line every `decode_log_interval` (40) decode steps, with the running batch B and
`gen throughput`: the tokens generated since the last decode line over the time since it, by the scheduler's
own clock. The log's stamps are whole seconds, but that ratio times the interval exactly: with about 40 x B
tokens generated (B averaged over the interval's two ends), the interval lasted 40 B / G seconds. What filled
it: 40 decode steps, and the prefill batches whose lines came between the two decode lines. So over every
interval of a search

    interval = 40 * a + b * (40 * B) + p0 * (prefill batches) + p1 * (prefilled requests)

a least-squares fit gives the decode step at an empty batch (a), its growth per running request (b), and a
prefill batch's fixed (p0) and per-request (p1) cost, each from SGLang's clock, not from the client's view of
each request's life (`servermodel.ServerModel.fit`, where the batch and the prefill rate grow together in an
unbounded search, so b and the prefill stall are hard to tell apart). Printed per run: the intervals, the fit
and its R^2, requests per prefill batch, the prefill cost per request at that batch size, and the intervals'
sum against the wall clock between the first and last decode line (their stamps, to the second) as a check
that 40 B / G times the intervals (session 22's search read 2-8% over), and, where the log was stamped to the
millisecond (`SGLANG_LOG_MS`, which `servetune launch` sets), the median of each interval's 40 B / G over its
stamped length ("-" with whole-second stamps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

DECODE_LOG_INTERVAL = 40
"""SGLang's default `--decode-log-interval`."""


def _tokens(prev: dict, line: dict) -> float:
    """The tokens generated between two decode lines: 40 decode steps at the mean of their two batches."""
    return DECODE_LOG_INTERVAL * (prev["running_req"] + line["running_req"]) / 2.0


def intervals(telemetry: list[dict]) -> list[tuple[float, float, int, int]]:
    """(seconds, tokens 40 x B, prefill batches, prefilled requests) per pair of decode lines after the step's
    start (`t` >= 0)."""
    rows = []
    prev, batches, requests = None, 0, 0
    for line in telemetry:
        if line.get("kind") == "prefill":
            batches += 1
            requests += int(line.get("new_seq") or 0)
            continue
        if line.get("kind") != "decode":
            continue
        gen = line.get("gen_throughput") or 0.0
        if prev is not None and gen > 0 and line.get("t", -1.0) >= 0.0:
            tokens = _tokens(prev, line)
            rows.append((tokens / gen, tokens, batches, requests))
        prev, batches, requests = line, 0, 0
    return rows


def stamped_ratios(telemetry: list[dict]) -> list[float]:
    """Each interval's 40 B / G over its length by the decode lines' own stamps, where they carry milliseconds
    (`SGLANG_LOG_MS`); [] with whole-second stamps."""
    decode = [x for x in telemetry if x.get("kind") == "decode" and x.get("t", -1.0) >= 0.0]
    if not any(x.get("ts", 0.0) % 1 for x in decode):
        return []
    out = []
    for prev, line in zip(decode, decode[1:]):
        gen, length = line.get("gen_throughput") or 0.0, line["ts"] - prev["ts"]
        if gen > 0 and length > 0:
            out.append(_tokens(prev, line) / gen / length)
    return out


def fit(rows: list[tuple[float, float, int, int]]) -> tuple[list[float], float]:
    """(a, b, p0, p1) in seconds, and R^2."""
    import numpy as np

    x = np.array([[DECODE_LOG_INTERVAL, t, k, p] for _, t, k, p in rows], dtype=float)
    y = np.array([s for s, _, _, _ in rows], dtype=float)
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ coef
    r2 = 1.0 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return [float(c) for c in coef], r2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    print("run | intervals | a ms | b ms/request | p0 ms/batch | p1 ms/request | R^2 | requests/batch |"
          " prefill ms/request | sum / wall s | timed / stamped")  # fmt: skip
    for run in args.runs:
        rows, total, wall, ratios = [], 0.0, 0.0, []
        for step in sorted((run / "steps").glob("*/telemetry.jsonl")):
            if step.parent.name.startswith("00"):  # the warm-up wave
                continue
            lines = [json.loads(text) for text in step.read_text().splitlines() if text.strip()]
            found = intervals(lines)
            rows += found
            ratios += stamped_ratios(lines)
            stamps = [line["ts"] for line in lines if line.get("kind") == "decode" and line.get("t", -1.0) >= 0.0]
            if found and len(stamps) > 1:
                total += sum(s for s, _, _, _ in found)
                wall += stamps[-1] - stamps[0]
        if len(rows) < 8:
            print(f"{run} | {len(rows)} | too few intervals")
            continue
        (a, b, p0, p1), r2 = fit(rows)
        batches, requests = sum(r[2] for r in rows), sum(r[3] for r in rows)
        size = requests / batches if batches else float("nan")
        print(f"{run} | {len(rows)} | {a * 1e3:.2f} | {b * 1e3:.4f} | {p0 * 1e3:.1f} | {p1 * 1e3:.1f} | {r2:.3f} |"
              f" {size:.2f} | {(p0 / size + p1) * 1e3:.1f} | {total:.0f} / {wall:.0f} |"
              f" {f'{statistics.median(ratios):.3f}' if ratios else '-'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
