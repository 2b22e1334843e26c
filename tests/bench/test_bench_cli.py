"""`servetune bench` as a user runs it: managed mode, bad input, import discipline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from servetune.cli import app


class _Resolution:
    """What `resolve_launch` returns, reduced to what the managed run uses."""

    facts = None
    config = None

    def argv(self):
        return ["--model-path", "qwen2.5-vl-3b-instruct"]

    def env(self):
        return {}

    def requested(self):
        return {}


def test_managed_mode_launches_benches_and_stops(monkeypatch, tmp_path: Path):
    """--model without --url: resolve, launch (the stand-in through --sglang-cmd), bench, stop."""
    seen = {}

    def resolve_launch(model, **kwargs):
        seen.update(kwargs, model=model)
        return _Resolution()

    monkeypatch.setattr("servetune.api.resolve_launch", resolve_launch)
    result = CliRunner().invoke(app, [
        "bench", "--model", "qwen2.5-vl-3b-instruct", "--gpu", "h200", "--workload", "text-chat", "-n", "16",
        "--client", "builtin", "--sglang-cmd", f"{sys.executable} -m servetune.standin", "--run-dir", str(tmp_path), "--json",
    ])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["metrics"]["request_throughput"] > 0 and data["metrics"]["completed"] == 16
    assert seen["gpu"] == "h200" and seen["workload"].name == "text-chat"
    assert (tmp_path / "server.log").is_file() and (tmp_path / "metrics.json").is_file()


def test_bench_needs_a_url_or_a_model():
    done = subprocess.run([sys.executable, "-m", "servetune", "bench", "--workload", "text-chat"], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr == (
        "error[invalid-spec]: `servetune bench` needs --url (a running server) or --model (to launch one)\n"
        "   = help: e.g. `servetune bench --url http://127.0.0.1:30000 --workload single-image-stream`\n"
    )


def test_bench_help_imports_no_client_libraries():
    """`servetune bench --help` loads neither httpx, Pillow, numpy nor SGLang."""
    code = ("import sys, servetune.cli as c\n"
            "try:\n    c.app(['bench', '--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sys.modules))")
    modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.splitlines()
    assert not [m for m in modules if m.split(".")[0] in {"httpx", "PIL", "numpy", "sglang", "torch", "optuna"}]
