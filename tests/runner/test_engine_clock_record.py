"""A capacity search's `engine` figures, from the `telemetry.jsonl` its steps wrote: two recorded steps of real
SGLang 0.5.17 on a lent H100 (tests/fixtures/h200/telemetry/, session 26's seed search) placed as a search
writes them, read back by the runner and printed by the CLI's result view."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servetune.bench.capacity import Capacity, CapacityStep
from servetune.bench.engineclock import engine_clock
from servetune.cli._capacity_view import engine_line
from servetune.runner._capacity import _with_engine_clock

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "telemetry"


def _capacity(tmp_path: Path, *, with_logs: bool) -> Capacity:
    steps = []
    for i, src in enumerate(sorted(RECORDED.glob("*.jsonl")), start=1):
        step_dir = tmp_path / "steps" / f"{i:02d}-{17.58:.4g}"
        step_dir.mkdir(parents=True)
        if with_logs:
            shutil.copy(src, step_dir / "telemetry.jsonl")
        steps.append(CapacityStep(index=i, rate=17.58, state="met", met=True, run_dir=str(step_dir)))
    return Capacity(slos=["p99_tpot_ms<=25"], request_rate=16.86, certified=True, goodput=16.0, verdicts=[],
                    lowest_missed=17.58, resolution=0.05, steps=steps, bench_s=0.0)  # fmt: skip


def test_the_search_records_what_sglangs_clock_says_and_prints_it(tmp_path):
    cap = _with_engine_clock(_capacity(tmp_path, with_logs=True))
    logs = [[json.loads(x) for x in p.read_text().splitlines() if x.strip()] for p in sorted(RECORDED.glob("*.jsonl"))]
    assert cap.engine is not None and cap.engine == engine_clock(logs)
    stored = Capacity.model_validate_json(cap.model_dump_json())
    assert stored.engine == cap.engine  # capacity.json keeps it
    line = engine_line(cap)
    assert line is not None and line.startswith("engine       SGLang's clock over ")
    assert f"decode step {cap.engine.decode_step_ms:.2f} ms" in line
    assert f"a prefilled request {cap.engine.prefill_ms_per_request:.1f} ms" in line
    assert cap.engine.prefill_ms_per_request == pytest.approx(
        cap.engine.prefill_batch_ms / cap.engine.requests_per_batch + cap.engine.prefill_request_ms
    )


def test_without_the_servers_lines_there_is_no_engine_figure_and_no_line(tmp_path):
    """`bench --url` against a server whose log servetune cannot read: no telemetry, nothing made up."""
    cap = _with_engine_clock(_capacity(tmp_path, with_logs=False))
    assert cap.engine is None and engine_line(cap) is None
