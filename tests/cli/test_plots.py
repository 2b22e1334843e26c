"""Offline plots: HTML plots carry their JavaScript, PNG plots come with matplotlib, and without it a
command says once which extra to install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = [sys.executable, "-m", "servetune.testing.standin"]
WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: importing it fails, find_spec says None
from servetune.cli import main
main(sys.argv[2:])
"""


def _cli(*args: str, without: str = "", cwd: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", WITHOUT, without or "none-blocked", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> Path:
    from servetune.testing import FakeRunner
    from servetune.tuner import TuneOptions, Tuner

    root = tmp_path_factory.mktemp("study")
    options = TuneOptions(model="qwen3-8b", gpu="h200", workload="text-chat", trials=4, run_dir=root, study="s",
                          confirm_rounds=0, requests=64, seed=3)  # fmt: skip
    rate = iter([8.0, 9.0, 11.0, 10.0, 12.0, 7.0])
    Tuner(options, runner=FakeRunner(lambda call: {"completed": call.total, "request_throughput": next(rate)})).run()
    return root / "study.db"


def test_report_html_plots_embed_their_javascript(study_db, tmp_path):
    """tune report --out-dir: every HTML plot carries plotly's JavaScript (no script from a CDN), so it
    draws on a machine without internet; PNGs come beside them."""
    out = _cli("tune", "report", "--storage", f"sqlite:///{study_db}", "--out-dir", "plots", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    html = sorted((tmp_path / "plots").glob("*.html"))
    assert html and sorted((tmp_path / "plots").glob("*.png"))
    for path in html:
        text = path.read_text()
        assert "<script src=" not in text  # nothing is fetched (the library's own topojson default is unused)
        assert "Plotly.newPlot" in text and len(text) > 1_000_000  # the library itself is in the file
    assert "note:" not in out.stderr


def test_report_without_the_plot_libraries_says_once_which_extra_to_install(study_db, tmp_path):
    """Without matplotlib and plotly: summary.json still, and one note naming both and the extra."""
    out = _cli(
        "tune", "report", "--storage", f"sqlite:///{study_db}", "--out-dir", "plots",
        without="matplotlib,plotly", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["summary.json"]
    notes = [line for line in out.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: no PNG plots (they need matplotlib) and no HTML plots (they need plotly): "
        "pip install 'servetune[report]'"
    ]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_soak_without_matplotlib_says_once_that_it_drew_nothing(tmp_path, as_json):
    """bench --soak-seconds without matplotlib: no soak.png, one note naming the extra (on stderr beside
    --json, whose stdout stays JSON); with matplotlib the plot is written."""
    from servetune.launch import LaunchOptions, start_server

    options = LaunchOptions(sglang_cmd=STANDIN, run_dir=tmp_path / "server", wait_gpu_release=False)
    # 16 req/s: a soak goes on until its verdict has the judged requests it needs (20 s at 4 req/s, 6 s at 16)
    with start_server(["--model-path", "m"], {}, {}, options) as server:
        common = ["bench", "--url", server.url, "-w", "text-chat", "--slo", "p90_ttft_ms<=2000", "--request-rate", "16",
                  "--soak-seconds", "3", "--step-warmup-seconds", "0.5", "--backlog-seconds", "2", "--warmup-wave", "2",
                  *(["--json"] if as_json else [])]  # fmt: skip
        out = _cli(*common, "--run-dir", "bare", without="matplotlib", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert not (tmp_path / "bare" / "soak.png").exists()
        stream = out.stderr if as_json else out.stdout
        assert stream.count("no plot: plots need matplotlib") == 1
        assert "pip install 'servetune[report]'" in stream
        if as_json:
            assert json.loads(out.stdout)["plots"] == []
        out = _cli(*common, "--run-dir", "drawn", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert (tmp_path / "drawn" / "soak.png").is_file()
        assert "matplotlib" not in out.stdout + out.stderr
