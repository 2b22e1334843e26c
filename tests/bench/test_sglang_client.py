"""The `sglang` client path: flags, subprocess, JSONL parsing, client choice (with a fake SGLang)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from fakeserver import FakeServer

from servetune.bench import choose_client, cross_check, load_workload, run_benchmark
from servetune.bench._sglang import sglang_argv, sglang_client_module
from servetune.errors import BenchError, SpecError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "bench" / "sglang-0.5.23-image-synthetic.jsonl"

FAKE_CLIENT = textwrap.dedent('''
    """A fake SGLang bench_serving: records its argv, writes a result line (test double)."""
    import argparse, json, os, sys
    parser = argparse.ArgumentParser()
    for flag in ("--backend", "--base-url", "--num-prompts", "--random-input-len", "--random-output-len",
                 "--random-range-ratio", "--request-rate", "--warmup-requests", "--seed", "--output-file",
                 "--max-concurrency", "--dataset-name", "--image-count", "--image-resolution", "--image-format",
                 "--image-content", "--model"):
        parser.add_argument(flag)
    parser.add_argument("--output-details", action="store_true")
    parser.add_argument("--disable-tqdm", action="store_true")
    args = parser.parse_args()
    with open(os.environ["FAKE_SGLANG_ARGS"], "a") as log:
        log.write(json.dumps(sys.argv[1:]) + "\\n")
    if os.environ.get("FAKE_SGLANG_FAIL"):
        print("Traceback: ValueError: Warmup failed")
        sys.exit(1)
    line = json.loads(open(os.environ["FAKE_SGLANG_LINE"]).read())
    line["completed"] = int(args.num_prompts) - 1
    line["errors"] = [""] * (int(args.num_prompts) - 1) + ["HTTP 500: boom"]
    with open(args.output_file, "a") as out:
        out.write(json.dumps(line) + "\\n")
''')


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A `sglang` package on the path whose benchmark module is the fake client above."""
    root = tmp_path / "site"
    (root / "sglang" / "benchmark").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "benchmark" / "__init__.py").write_text("")
    (root / "sglang" / "benchmark" / "serving.py").write_text(FAKE_CLIENT)
    for name in [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_SGLANG_ARGS", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("FAKE_SGLANG_LINE", str(FIXTURE))
    return root


def _argv_log(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]


def test_single_image_stream_maps_to_sglangs_image_dataset():
    w = load_workload("single-image-stream")
    argv = sglang_argv("sglang.benchmark.serving", "http://h:1", w, requests=384, output_file=Path("o.jsonl"), seed=7)
    assert argv[:3] == [sys.executable, "-m", "sglang.benchmark.serving"]
    flags = dict(zip(argv[3::1], argv[4::1]))
    expected = {
        "--backend": "sglang-oai-chat",
        "--base-url": "http://h:1",
        "--num-prompts": "384",
        "--max-concurrency": "64",
        "--dataset-name": "image",
        "--image-count": "1",
        "--image-resolution": "720p",
        "--image-format": "jpeg",
        "--image-content": "random",
        "--random-input-len": "128",
        "--random-output-len": "128",
        "--random-range-ratio": "1.0",
        "--request-rate": "inf",
        "--warmup-requests": "64",
        "--seed": "7",
        "--output-file": "o.jsonl",
    }
    assert {k: flags[k] for k in expected} == expected
    text = sglang_argv(
        "sglang.bench_serving", "http://h:1", load_workload("text-chat"), requests=5, output_file=Path("o")
    )
    assert text[text.index("--dataset-name") + 1] == "random" and "--image-count" not in text


def test_the_client_module_is_found_without_importing_sglang(fake_sglang: Path):
    assert sglang_client_module() == "sglang.benchmark.serving"
    (fake_sglang / "sglang" / "benchmark" / "serving.py").unlink()
    (fake_sglang / "sglang" / "bench_serving.py").write_text("")
    assert sglang_client_module() == "sglang.bench_serving"
    assert "sglang" not in sys.modules


def test_sglang_client_runs_and_its_line_is_parsed(fake_sglang: Path, tmp_path: Path):
    """The subprocess gets the workload's flags; failed = planned - completed; images get a fresh seed per run."""
    with FakeServer() as server:
        m = run_benchmark(server.url, "single-image-stream", requests=20, client="sglang", run_dir=tmp_path / "r1")
        run_benchmark(server.url, "single-image-stream", requests=20, client="sglang", run_dir=tmp_path / "r2")
    assert (m.client, m.requests, m.completed, m.failed, m.errors) == ("sglang", 20, 19, 1, ["HTTP 500: boom"])
    assert m.workload == "single-image-stream" and m.images_sent == 19
    first, second = _argv_log(tmp_path)
    assert first[first.index("--num-prompts") + 1] == "20"
    assert first[first.index("--seed") + 1] != second[second.index("--seed") + 1]
    assert (tmp_path / "r1" / "sglang_bench.jsonl").is_file() and (tmp_path / "r1" / "metrics.json").is_file()


def test_text_workloads_keep_the_workload_seed(fake_sglang: Path, tmp_path: Path):
    with FakeServer() as server:
        run_benchmark(server.url, "text-chat", requests=4, client="sglang")
    (argv,) = _argv_log(tmp_path)
    assert argv[argv.index("--seed") + 1] == "1"


def test_a_failing_sglang_client_reports_its_log_tail(fake_sglang: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FAKE_SGLANG_FAIL", "1")
    with FakeServer() as server, pytest.raises(BenchError) as info:
        run_benchmark(server.url, "text-chat", requests=4, client="sglang", run_dir=tmp_path / "r")
    assert info.value.message == "SGLang's client exited with status 1 and no result"
    assert "Warmup failed" in info.value.render()


def test_auto_prefers_sglang_only_for_text_without_pruning(fake_sglang: Path):
    assert choose_client("auto", load_workload("text-chat")) == "sglang"
    assert choose_client("auto", load_workload("text-chat"), can_stop_early=True) == "builtin"
    assert choose_client("auto", load_workload("single-image-stream")) == "builtin"
    assert choose_client("sglang", load_workload("single-image-stream")) == "sglang"
    with pytest.raises(SpecError, match="unknown benchmark client 'fast'"):
        choose_client("fast", load_workload("text-chat"))


def test_auto_is_builtin_without_sglang(monkeypatch):
    monkeypatch.setattr("servetune.bench._sglang.sglang_client_module", lambda: None)
    assert choose_client("auto", load_workload("text-chat")) == "builtin"
    with pytest.raises(BenchError, match="SGLang's benchmark client is not importable here"):
        run_benchmark("http://127.0.0.1:9", "text-chat", client="sglang")


def test_a_pool_workload_cannot_go_to_sglangs_client(fake_sglang: Path):
    with pytest.raises(BenchError, match="no pool of repeated images"):
        run_benchmark("http://127.0.0.1:9", "cached-images", client="sglang")


def test_cross_check_reports_relative_differences(fake_sglang: Path, tmp_path: Path):
    """Both clients run on one server; the comparison is per metric, builtin relative to SGLang."""
    workload = load_workload("text-chat").model_copy(
        update={"output_tokens": 4, "warmup_requests": 0, "max_concurrency": 4}
    )
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        result = cross_check(server.url, workload, requests=8, run_dir=tmp_path)
    assert result.sglang.client == "sglang" and result.builtin.client == "builtin"
    ratio = result.relative_difference["request_throughput"]
    assert ratio == pytest.approx(
        (result.builtin.request_throughput - result.sglang.request_throughput) / result.sglang.request_throughput
    )
    assert json.loads((tmp_path / "cross_check.json").read_text())["relative_difference"]
