"""Objectives and SLOs as Optuna sees them; the CLI stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servetune.errors import SpecError
from servetune.tuner.objectives import parse_constraint, parse_objectives


def test_objectives_parse_to_metrics_and_directions():
    (thr,) = parse_objectives("throughput")
    assert (thr.metric, thr.direction) == ("comparable_request_throughput", "maximize")
    thr, ttft = parse_objectives("throughput,p99_ttft")
    assert (ttft.metric, ttft.direction) == ("p99_ttft_ms", "minimize")
    assert parse_objectives("token_throughput")[0].metric == "comparable_output_throughput"
    assert parse_objectives("p99_e2e")[0].metric == "p99_e2e_latency_ms"


def test_unknown_objective_suggests_a_name():
    with pytest.raises(SpecError, match="did you mean 'throughput'"):
        parse_objectives("througput")


def test_slo_violation_is_an_optuna_constraint_value():
    slo = parse_constraint("p99_ttft_ms<=2000")
    assert slo.violation({"p99_ttft_ms": 1500.0}) == -500.0
    assert slo.violation({"p99_ttft_ms": 2500.0}) == 500.0
    assert slo.violation({}) > 0  # a metric the run did not produce cannot be claimed to hold
    bound = parse_constraint("comparable_request_throughput>=10")
    assert bound.violation({"comparable_request_throughput": 8.0}) == 2.0
    # the one grammar's one error style (bench.slo): the SLO as written, what is wrong, an example
    with pytest.raises(SpecError, match="cannot read the SLO 'p99_ttft_ms=<2000'") as err:
        parse_constraint("p99_ttft_ms=<2000")
    assert "STAT_METRIC_ms<=N" in err.value.help


def test_a_constraint_names_a_metric_the_benchmark_reports():
    """Checked at start against the schema (`bench.schema.Metrics`), so a typo does not make every trial
    infeasible."""
    assert str(parse_constraint("completed>=100")) == "completed>=100"
    assert str(parse_constraint("steady_request_throughput>=3")) == "steady_request_throughput>=3"
    with pytest.raises(SpecError, match="reports no metric 'complted'") as err:
        parse_constraint("complted>=100")
    assert "did you mean 'completed'?" in err.value.help
    with pytest.raises(SpecError, match="reports no metric 'p99_queue_delay_ms'"):
        parse_constraint("p99_queue_delay_ms<=100")
    with pytest.raises(SpecError, match="unknown latency 'ttfx'"):
        parse_constraint("p99_ttfx_ms<=100")


def test_the_tune_command_imports_no_optuna_launcher_or_bench_at_cli_start():
    code = (
        "import sys, servetune.cli; "
        "bad = [m for m in ('optuna', 'sqlalchemy', 'servetune.tuner', 'servetune.launch', 'servetune.bench', 'httpx') "
        "if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
