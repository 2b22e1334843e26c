"""How often SGLang's queue was non-empty during each recorded soak (docs/h200-results.md section 25): one line
per soak of the evidence archive, from its `telemetry.jsonl` (SGLang's own scheduler lines) and its recorded
`verdict.json`.

    tar -xJf docs/h200-evidence.tar.xz -C /tmp
    python scripts/h200_soak_queues.py /tmp/h200

For each soak (a `soak/` directory, or one under `soaks/`, with a `verdict.json`, as `h200_replay_steps.steps`
finds them): its recorded verdict and the second it stopped at; of SGLang's decode lines after the step's
warm-up span (5 s), how many, the largest running batch, the share with a request queued (`queue_req` > 0) and
the mean queue. A soak whose run dir has no `telemetry.jsonl` (before the telemetry was recorded) prints `-`.
Section 25 reads it: every soak that held on a running-limited config had a queue in at most a third of its
lines, most that failed in more.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from h200_replay_steps import steps  # the recorded steps and soaks, as the replay finds them (scripts/)

from servetune.launch._telemetry import read_telemetry

WARMUP_S = 5.0


def queue_line(step: Path) -> str:
    """The decode lines' count, largest running batch, queued share and mean queue after the warm-up span."""
    decode = [
        t
        for t in read_telemetry(step / "telemetry.jsonl")
        if t.get("kind") == "decode" and t.get("t", -1.0) >= WARMUP_S
    ]
    if not decode:
        return "-"
    queued = [t.get("queue_req") or 0 for t in decode]
    running = max(t.get("running_req") or 0 for t in decode)
    share, mean = sum(q > 0 for q in queued) / len(decode), sum(queued) / len(decode)
    return f"{len(decode):5d} decode lines  running max {running:4d}  queued {share:4.2f}  mean queue {mean:5.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path, help="the unpacked evidence archive's h200/ directory")
    args = parser.parse_args()
    found = 0
    for label, step, _, soak in steps(args.archive):
        if not soak:
            continue
        verdict = json.loads((step / "verdict.json").read_text())
        print(f"{label:62s} {verdict['state']:9s} {verdict['at_s']:6.1f} s  {queue_line(step)}")
        found += 1
    if not found:
        print(f"no soaks under {args.archive}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
