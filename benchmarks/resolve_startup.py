"""Cold wall time of `servetune resolve` next to SGLang's own argument path.

    python benchmarks/resolve_startup.py [--runs 7]

Each run is a fresh process (cold: imports included). SGLang's side is
`python -m sglang.launch_server --help` in the CPU-only SGLang venv made by
scripts/setup_sglang_cpu.sh (its argument parser: the minimum SGLang pays before it can
even read a flag). Goal: servetune under 0.3 s and at least 10x faster.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _time(cmd: list[str], runs: int, env: dict | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        out.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sglang-version", default="0.5.23")
    args = ap.parse_args()
    st = [
        sys.executable,
        "-m",
        "servetune",
        "resolve",
        "--model",
        "qwen3-vl-8b-instruct",
        "--gpu",
        "h200",
        "--sglang-version",
        args.sglang_version,
        "--format",
        "shell",
    ]
    ours = _time(st, args.runs)
    print(
        f"servetune resolve (cold process)       median {statistics.median(ours):.3f} s  "
        f"min {min(ours):.3f} s  ({args.runs} runs)"
    )
    runner = ROOT / ".cache" / "sglang-cpu" / "run"
    if runner.exists():
        theirs = _time(
            ["bash", str(runner), args.sglang_version, "-m", "sglang.launch_server", "--help"], max(3, args.runs // 2)
        )
        med = statistics.median(theirs)
        print(f"python -m sglang.launch_server --help   median {med:.3f} s  min {min(theirs):.3f} s")
        print(f"ratio: servetune is {med / statistics.median(ours):.1f}x faster")
    else:
        print("SGLang CPU venv not found: run scripts/setup_sglang_cpu.sh for the comparison")


if __name__ == "__main__":
    main()
