"""`servetune bench` as a user runs it: managed mode, bad input, import discipline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servetune.cli import app


def test_managed_mode_launches_benches_and_stops(tmp_path: Path):
    """--model without --url: resolve (the real resolver), launch (the stand-in through --sglang-cmd), bench, stop."""
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--model",
            "qwen3-vl-8b-instruct",
            "--gpu",
            "h200",
            "--sglang-version",
            "0.5.23",
            "--workload",
            "text-chat",
            "-n",
            "16",
            "--set",
            "max_running_requests=512",
            "--client",
            "builtin",
            "--sglang-cmd",
            f"{sys.executable} -m servetune.testing.standin",
            "--run-dir",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["metrics"]["request_throughput"] > 0 and data["metrics"]["completed"] == 16
    assert (tmp_path / "server.log").is_file() and (tmp_path / "metrics.json").is_file()
    argv = (tmp_path / "argv.txt").read_text()
    assert "--cuda-graph-max-bs-decode 512" in argv and "--mm-feature-transport cuda_ipc" in argv
    assert "--max-running-requests 512" in argv


def test_bench_needs_a_url_or_a_model():
    done = subprocess.run(
        [sys.executable, "-m", "servetune", "bench", "--workload", "text-chat"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr == (
        "error[invalid-spec]: `servetune bench` needs --url (a running server) or --model (to launch one)\n"
        "   = help: e.g. `servetune bench --url http://127.0.0.1:30000 --workload single-image-stream`\n"
    )


def test_bench_help_imports_no_client_libraries():
    """`servetune bench --help` loads neither httpx, Pillow, numpy nor SGLang."""
    code = (
        "import sys, servetune.cli as c\n"
        "try:\n    c.app(['bench', '--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules))"
    )
    modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.splitlines()
    assert not [m for m in modules if m.split(".")[0] in {"httpx", "PIL", "numpy", "sglang", "torch", "optuna"}]


from tests.bench.test_sglang_client import fake_sglang  # noqa: E402,F401  (the fixture)


@pytest.mark.usefixtures("fake_sglang")
def test_cross_check_launches_a_server_when_no_url_is_given(tmp_path: Path):
    """`bench --model ... --cross-check`: launch (the stand-in), run both clients on it, stop."""
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--model",
            "qwen3-8b",
            "--gpu",
            "h200",
            "--sglang-version",
            "0.5.23",
            "--workload",
            "text-chat",
            "-n",
            "8",
            "--cross-check",
            "--sglang-cmd",
            f"{sys.executable} -m servetune.testing.standin",
            "--run-dir",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["sglang"]["client"] == "sglang" and data["builtin"]["client"] == "builtin"
    assert "request_throughput" in data["relative_difference"]
    assert (tmp_path / "server.log").is_file()
