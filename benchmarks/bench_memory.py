"""RSS of `servetune bench` over time against the stand-in server, with a request count far beyond what
it can send in the window (default `-n 1000000`, 30 s): memory must stay flat in the request count.

    python benchmarks/bench_memory.py [--requests 10000 1000000] [--seconds 30] [--workload text-chat]

A managed run (the stand-in in SGLang's place, `--sglang-cmd`); the servetune process's RSS (not the
server's) is read from /proc every second, then the run is stopped with SIGINT, as a user would.
Before the fix (issue 22) the client drew every request's lengths up front and queued a task (with
its body) per request it could not yet send: `-n 1000000000` grew about 100 MB/s and printed nothing.
Runs `-n 10000` and `-n 1000000` for the same time and prints their RSS side by side, then a summary:
RSS after start-up, at the end, the peak, and the growth per completed request (each finished
request's timings are kept for the metrics).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def completed(run_dir: Path) -> int | None:
    try:
        return json.loads((run_dir / "result.json").read_text())["metrics"]["completed"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure(requests: int, seconds: float, workload: str) -> tuple[list[tuple[float, float]], int | None, str]:
    """[(t, RSS MiB)] of one managed run sampled every second for `seconds`, its completed count, its last line."""
    standin = f"{sys.executable} -m servetune.testing.standin"
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "servetune", "bench", "-m", "qwen3-8b", "--gpu", "h200", "-w", workload,
               "-n", str(requests), "--sglang-cmd", standin, "--run-dir", str(run_dir)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        samples: list[tuple[float, float]] = []
        while time.monotonic() - t0 < seconds and proc.poll() is None:
            time.sleep(1.0)
            rss = rss_mib(proc.pid)
            if rss is not None:
                samples.append((time.monotonic() - t0, rss))
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        lines = err.strip().splitlines()
        return samples, completed(run_dir), f"exit {proc.returncode}: {lines[-1] if lines else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workload", default="text-chat")
    args = parser.parse_args()
    runs = {n: measure(n, args.seconds, args.workload) for n in args.requests}
    print(f"RSS (MiB) of `servetune bench -w {args.workload}` (managed, the stand-in server), sampled every second")
    print(f"{'t (s)':>6} " + " ".join(f"{'-n ' + format(n, ','):>14}" for n in runs))
    for i in range(max(len(samples) for samples, _, _ in runs.values())):
        cells = [f"{samples[i][1]:>14.1f}" if i < len(samples) else f"{'':>14}" for samples, _, _ in runs.values()]
        t = next(samples[i][0] for samples, _, _ in runs.values() if i < len(samples))
        print(f"{t:>6.0f} " + " ".join(cells))
    for n, (samples, done, last) in runs.items():
        settled = [rss for t, rss in samples if t >= 5.0]  # after imports, start-up and the warm-up wave
        if not settled:
            print(f"-n {n:,}: too few samples ({last})")
            continue
        growth = settled[-1] - settled[0]
        per = f", {growth * 1024 / done:.2f} KiB per completed request" if done else ""
        print(f"-n {n:,}: {settled[0]:.1f} MiB at 5 s, {settled[-1]:.1f} MiB at the end, peak {max(settled):.1f} "
              f"MiB; {done or 0:,} completed{per}")  # fmt: skip
        print(f"    {last}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
