"""Write tests/fixtures/h200/searches/*.json: recorded H200 capacity searches, each step with its
`StepProfile` computed from the step's `requests.jsonl` and `telemetry.jsonl`.

    tar -xJf docs/h200-evidence.tar.xz -C /tmp/ev
    python scripts/h200_searches.py /tmp/ev/h200/certified-s9
    python scripts/h200_searches.py /tmp/ev/h200/study-s16 defaults-s16=certified/01-cap-defaults \
        seed-s16=call3/confirm/soak-trial-0009
    python scripts/h200_searches.py /tmp/ev/h200/certified-s21 \
        defaults-s21=certified/02-ucap@certified/01-launch-defaults

With `NAME=RUN` arguments, those runs (directories under the root holding `capacity.json`) instead of the two
below; a run whose `capacity.json` stores its capacity keeps it (and `certified`). `NAME=RUN@LAUNCH`: the
server's `server_info.json` is in LAUNCH, not RUN (`bench --url` against a server `servetune launch` started).

Sources (session 9, docs/h200-results.md section 13): `call1/01-cap-defaults` (SGLang 0.5.17's defaults)
and `call2/01-cap-mrr48` (`--max-running-requests 48`). Each fixture keeps the step records of the run's
`capacity.json` as they are, adds `profile` (`servermodel.profile_step` with the run's 5 s warm-up span) and
the run's `server_limits` (from its `server_info.json`), `engine` (`engineclock.engine_clock` over the steps'
telemetry: None where it was stamped by time or missing), and its certified capacity (the highest rate met
twice: the run's `capacity.json` of that version did not store one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servetune.bench._builtin import load_requests
from servetune.bench.engineclock import engine_clock
from servetune.bench.servermodel import profile_step, server_limits

RUNS = {"defaults-s9": "call1/01-cap-defaults", "mrr48-s9": "call2/01-cap-mrr48"}
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200" / "searches"


def search(run: Path, source: str | None = None, launch: Path | None = None) -> dict:
    data = json.loads((run / "capacity.json").read_text())
    limits = server_limits(json.loads(((launch or run) / "server_info.json").read_text()))
    steps, logs = [], []
    for step in data["steps"]:
        d = run / "steps" / Path(step["run_dir"]).name
        records = load_requests(d / "requests.jsonl")
        lines = (d / "telemetry.jsonl").read_text().splitlines() if (d / "telemetry.jsonl").exists() else []
        telemetry = [json.loads(line) for line in lines]
        logs.append(telemetry)
        profile = profile_step(records, step["rate"], warmup_s=5.0, telemetry=telemetry, graph_bs=limits["graph"])
        steps.append({**step, "run_dir": None, "profile": profile.model_dump() if profile else None})
    met = [s["rate"] for s in steps if sum(t["met"] for t in steps if t["rate"] == s["rate"]) >= 2]
    out = {"source": source or str(run.name), "server_limits": limits, "capacity": max(met), "steps": steps}
    if data.get("request_rate") is not None:
        out.update(capacity=data["request_rate"], certified=bool(data.get("certified")))
    clock = engine_clock(logs)  # what `bench --capacity` now stores as `engine`
    out["engine"] = clock.model_dump() if clock is not None else None
    return out


def main(root: str, *runs: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, given in (dict(r.split("=", 1) for r in runs) or RUNS).items():
        rel, _, launch = given.partition("@")
        out = OUT / f"{name}.json"
        source = f"{Path(root).name}/{rel}" if runs else None
        found = search(Path(root) / rel, source, Path(root) / launch if launch else None)
        out.write_text(json.dumps(found, indent=1) + "\n")
        print(out, out.stat().st_size)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
