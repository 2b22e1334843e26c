"""A measurement records where its server's start-up went (the stand-in logs SGLang 0.5.17's milestones)."""

from __future__ import annotations

import json

import pytest


def test_a_stand_in_measurement_records_its_start_up_phases(make_runner, resolution, workload, tmp_path):
    """The stand-in logs SGLang 0.5.17's milestone lines over its START_DELAY_S (graphs: half of it);
    the runner puts the phases in timings and result.json."""
    runner = make_runner({"START_DELAY_S": 2.0})
    m = runner.measure(resolution, workload, run_dir=tmp_path / "run", requests=8)
    assert m.ok, m.failure
    phases = m.timings.startup_phases
    assert phases is not None
    assert phases.cuda_graphs_s == 1.0 and phases.weights_s == 0.4 and phases.kv_cache_s == 0.2
    assert phases.cuda_graph_batch_sizes == 12  # cuda_graph_max_bs_decode=64: 1, 2, 4, 8, 12, 16, 24, ..., 64
    assert phases.engine_s == pytest.approx(2.0, abs=1.0)  # stamps are whole seconds
    assert phases.total_s <= m.timings.startup_s
    recorded = json.loads((tmp_path / "run" / "result.json").read_text())["timings"]["startup_phases"]
    assert recorded["cuda_graph_batch_sizes"] == 12 and recorded["total_s"] == phases.total_s
