"""`servetune compare`: interleaved fresh launches of two configs, B/A per round with its spread and
a verdict (better / worse / not distinguishable from noise), the runaway guard on B; the verdict
logic on the FakeRunner, one CLI run on the stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servetune.context import Context
from servetune.errors import SpecError
from servetune.runner import Failure
from servetune.schema.workload import Workload
from servetune.testing import FakeRunner
from servetune.tuner._confirm import NOISE, run_interleaved, self_noise, verdict
from servetune.tuner.compare import CompareSide, compare, side_layer

WORKLOAD = Workload(
    name="w", summary="A test load.", kind="text", requests=256, max_concurrency=64, input_tokens=8, output_tokens=8
)


def test_the_verdict_needs_every_ratio_beyond_the_noise_on_one_side():
    assert verdict([1.08, 1.10, 1.05], "maximize") == "better"
    assert verdict([1.08, 1.10, 1.02], "maximize") == NOISE  # one round within 3% of 1
    assert verdict([0.80, 0.90], "maximize") == "worse"
    assert verdict([0.80, 0.90], "minimize") == "better"
    assert verdict([1.08, 1.10], "maximize", noise=0.09) == NOISE
    assert verdict([], "maximize") == NOISE
    assert verdict([0.5], "maximize") == NOISE  # one round: no spread to judge by
    assert self_noise([100.0, 110.0, 90.0]) == pytest.approx(0.1)
    assert self_noise([100.0, 101.0]) == 0.03


def test_run_interleaved_measures_in_turn_and_judges_against_the_first():
    order, values = [], {"A": iter([10.0, 10.2, 9.9]), "B": iter([12.0, 12.1, 11.8])}

    def measure(key):
        order.append(key)
        return next(values[key]), None

    out = run_interleaved(["A", "B"], 3, measure, direction="maximize")
    assert order == ["A", "B"] * 3
    b = out["others"]["B"]
    assert b["ratios"] == pytest.approx([1.2, 12.1 / 10.2, 11.8 / 9.9]) and b["verdict"] == "better"
    assert b["min"] == pytest.approx(12.1 / 10.2) and out["base"]["noise"] == pytest.approx(0.03)


@pytest.fixture(scope="module")
def ctx():
    return Context.build("qwen3-8b", gpu="h200", workload=WORKLOAD)


def _runner(b_factor: float, jitter=(1.0, 1.0, 1.0)):
    seen = {"A": 0, "B": 0}

    def measure(call):
        side = "B" if call.values.get("cuda_graph_max_bs_decode") == 64 else "A"
        if side == "B" and b_factor == 0:
            return Failure(cls="too_slow", stage="bench", message="too slow")
        value = 20.0 * (b_factor if side == "B" else 1.0) * jitter[seen[side] % len(jitter)]
        seen[side] += 1
        return {"comparable_request_throughput": value, "completed": call.total}

    return FakeRunner(measure)


@pytest.mark.parametrize(
    ("b_factor", "jitter", "expected"),
    [(1.2, (1.0, 1.01, 0.99), "better"), (0.7, (1.0, 1.01, 0.99), "worse"), (1.02, (1.0, 1.05, 0.96), NOISE),
     (0, (1.0,), "worse")],
)  # fmt: skip
def test_compare_interleaves_fresh_launches_and_gives_a_verdict(ctx, tmp_path, b_factor, jitter, expected):
    runner = _runner(b_factor, jitter)
    a = CompareSide("A", side_layer(ctx, None, ["cuda_graph_max_bs_decode=32"]))
    b = CompareSide("B", side_layer(ctx, None, ["cuda_graph_max_bs_decode=64"]))
    record = compare(ctx, runner, a, b, workload=WORKLOAD, rounds=3, run_dir=tmp_path)
    assert [c.values["cuda_graph_max_bs_decode"] for c in runner.calls] == [32, 64] * 3
    assert [c.guard is not None for c in runner.calls] == [False, True] * 3  # B only, against A's rate
    assert runner.calls[1].guard.total_s == pytest.approx(5 * 256 / 20.0 + 15)
    assert record["b"]["verdict"] == expected
    if b_factor:
        assert record["b"]["median"] == pytest.approx(b_factor, rel=0.06)
    else:
        assert record["b"]["failures"] == ["too_slow"] * 3 and record["b"]["median"] is None


def test_a_side_is_a_preset_a_run_directory_or_pins(ctx, tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("name: p\nsummary: A preset.\nset:\n  max_running_requests: 48\n")
    assert side_layer(ctx, str(preset), ["schedule_policy=lpm"]) == {
        "max_running_requests": 48,
        "schedule_policy": "lpm",
    }
    run = tmp_path / "run"
    run.mkdir()
    (run / "resolved.yaml").write_text(
        "config:\n  fields:\n    chunked_prefill_size: {key: chunked_prefill_size, value: 4096}\n  env: {}\n"
    )
    assert side_layer(ctx, str(run), ["chunked_prefill_size=2048"]) == {"chunked_prefill_size": 2048}
    with pytest.raises(SpecError, match="without resolved.yaml"):
        side_layer(ctx, str(tmp_path), ())
    with pytest.raises(SpecError, match="bad value for max_running_requests"):
        side_layer(ctx, None, ["max_running_requests=many"])
    with pytest.raises(SpecError, match="--rounds must be >= 1"):
        compare(ctx, _runner(1.0), CompareSide("A"), CompareSide("B"), workload=WORKLOAD, rounds=0, run_dir=tmp_path)


def test_compare_on_the_stand_in_calls_a_tight_running_limit_worse(tmp_path):
    """Two rounds of real launches: max_running_requests=4 against the stand-in's default at 64 in flight."""
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "name: cmp\nsummary: 128 requests, 64 in flight.\nkind: text\nrequests: 128\nmax_concurrency: 64\n"
        "input_tokens: 128\noutput_tokens: 64\nwarmup_requests: 4\nseed: 1\n"
    )
    env = {"SERVETUNE_STANDIN_TIME_SCALE": "0.5", "SERVETUNE_RUNS_DIR": str(tmp_path / "runs")}
    argv = [
        sys.executable, "-m", "servetune", "compare", "-m", "qwen3-8b", "--gpu", "h200", "-w", str(workload),
        "--b-set", "max_running_requests=4", "--rounds", "2", "--client", "builtin", "--json",
        "--sglang-cmd", f"{sys.executable} -m servetune.testing.standin", "--run-dir", str(tmp_path / "cmp"),
    ]  # fmt: skip
    proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["objective"] == "throughput" and len(record["a"]["values"]) == 2
    assert record["b"]["verdict"] == "worse" and record["b"]["max"] < 0.6, record
    assert len(list((tmp_path / "cmp").glob("r*-[AB]"))) == 4
    assert (record["a"]["source"], record["b"]["source"]) == ("(the resolved config)", "max_running_requests=4")


def test_a_side_without_rules_is_named_so():
    """--a-no-rules launches SGLang's defaults: the record and the table must not call it the resolved config."""
    from servetune.cli.compare import _label

    assert _label(None, None, no_rules=True) == "(SGLang's defaults, no rules)"
    assert _label("p.yaml", ["x=1"], no_rules=True) == "p.yaml x=1 (SGLang's defaults, no rules)"
    assert _label(None, None) == "(the resolved config)" and _label("p.yaml", ["x=1"]) == "p.yaml x=1"
