"""`servetune bench --capacity` end to end on the stand-in: one launch, the search's steps, the table, the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_managed_capacity_prints_the_search_and_the_servers_start_up(tmp_path):
    run_dir = tmp_path / "cap"
    argv = [
        sys.executable, "-m", "servetune", "bench", "--model", "qwen3-8b", "--gpu", "h200", "--workload", "text-chat",
        "--set", "max_running_requests=4", "--capacity", "--slo", "p99_ttft_ms<=400", "--start-rate", "16",
        "--resolution", "0.25", "--step-seconds", "2", "--run-dir", str(run_dir),
        "--sglang-cmd", f"{sys.executable} -m servetune.testing.standin",
    ]  # fmt: skip
    env = {**os.environ, "SERVETUNE_STANDIN_START_DELAY_S": "1.0"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    recorded = json.loads((run_dir / "capacity.json").read_text())
    assert recorded["request_rate"] is not None and recorded["steps"]
    result = json.loads((run_dir / "result.json").read_text())
    phases = result["timings"]["startup_phases"]
    assert phases["cuda_graphs_s"] == 0.5  # half the stand-in's START_DELAY_S, as its log says
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("server       start-up"))
    assert "CUDA graphs 0.5 s" in line and str(run_dir) in line
