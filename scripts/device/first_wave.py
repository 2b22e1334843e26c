r"""Here (not on the device): the pruner's first-wave figure on real SGLang, from recorded requests. Prints figures.

    python scripts/device/first_wave.py /tmp/h200/first-wave-s4/requests.tar.xz \
        /tmp/h200/steady-rate/requests.tar.xz ...   (tar -xJf docs/h200-evidence.tar.xz -C /tmp first)

Each archive is one device call: run directories `NAME-i` with `requests.jsonl` (every request's send time, TTFT and
latency) and `metrics.json`, from `partial_runs` in lib.sh. For each run it replays what the builtin client reports:
the whole run's rate when exactly `concurrency` requests have completed (the tuner's first-wave look,
`servetune.tuner._pruning.FIRST_WAVE_MARGIN`) and the partial steady window at 128 completions (the first look before
that was added), each against the best finished steady figure of the archive, and against what the pruner would
take as the reference there: the best over the other runs of min(their first-wave figure, their finished figure).
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
import tempfile
from pathlib import Path

from servetune.bench.schema import RequestRecord
from servetune.bench.windows import steady_window

FIELDS = ("success", "start", "ttft", "latency", "output_len", "prompt_len", "images", "error")


def load(run: Path) -> tuple[list[RequestRecord], float, int]:
    records = [
        RequestRecord(**{k: v for k, v in json.loads(line).items() if k in FIELDS})
        for line in (run / "requests.jsonl").read_text().splitlines()
        if line.strip()
    ]
    metrics = json.loads((run / "metrics.json").read_text())
    final = (metrics.get("steady") or {}).get("request_throughput") or metrics["request_throughput"]
    return records, final, int(metrics.get("max_concurrency") or 64)


def first_wave_rate(records: list[RequestRecord], concurrency: int) -> float:
    """Completions over the time since the first measured send, at the `concurrency`-th completion."""
    done = sorted((r for r in records if r.success), key=lambda r: r.end)
    return concurrency / (done[concurrency - 1].end - min(r.start for r in records))


def partial_steady(records: list[RequestRecord], k: int, concurrency: int) -> float | None:
    done = sorted((r for r in records if r.success), key=lambda r: r.end)[:k]
    w = steady_window(done, 0.1, concurrency, sending=True)
    return w.request_throughput if w else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="+", type=Path)
    a = ap.parse_args()
    lows = []
    for archive in a.archives:
        with tempfile.TemporaryDirectory() as d:
            with tarfile.open(archive) as tar:
                tar.extractall(d, filter="data")
            runs = {p.name: load(p) for p in sorted(Path(d).iterdir()) if (p / "requests.jsonl").exists()}
        best = max(final for _, final, _ in runs.values())
        print(f"{archive} ({len(runs)} runs; best finished steady figure {best:.2f} req/s)")
        print(
            f"  {'run':<12} {'finished':>8} {'first wave':>10} {'/best':>6} {'/pruner ref':>11} {'steady@128/best':>15}"
        )
        for name, (records, final, conc) in runs.items():
            fw = first_wave_rate(records, conc)
            ref = max(min(first_wave_rate(r, c), f) for other, (r, f, c) in runs.items() if other != name)
            s128 = partial_steady(records, 128, conc)
            lows.append((fw / ref, name, archive.parent.name))
            print(
                f"  {name:<12} {final:8.2f} {fw:10.2f} {fw / best:6.2f} {fw / ref:11.2f} "
                f"{(s128 / best) if s128 else float('nan'):15.2f}"
            )
    configs = {(where, re.sub(r"-\d+$", "", n)) for _, n, where in lows}
    low = min(lows)
    print(
        f"lowest first-wave figure against the pruner's reference: {low[0]:.2f} ({low[1]}, {low[2]}); "
        f"{len(lows)} runs, {len(configs)} launches"
    )


if __name__ == "__main__":
    main()
