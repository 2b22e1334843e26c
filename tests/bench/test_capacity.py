"""The capacity search: bracket and bisect the highest Poisson rate whose steps meet every SLO,
checked against a brute-force sweep of a deterministic queueing model (tests/bench/queue_model.py),
and once on the stand-in server (a real process and real HTTP)."""

from __future__ import annotations

import pytest

from servetune.bench.capacity import find_capacity, step_requests
from servetune.bench.slo import parse_slos
from servetune.errors import SpecError
from tests.bench.queue_model import model_step

SLOS = parse_slos(["p99_ttft_ms<=200", "p99_tpot_ms<=12"])
STEP = dict(step_s=20.0, min_requests=200)


def _sweep_capacity(run, lo: float, hi: float, points: int) -> float:
    """The highest rate on a fine grid whose step meets every bound (the brute-force answer)."""
    from servetune.bench.capacity import _judge

    best = 0.0
    for i in range(points + 1):
        rate = lo + (hi - lo) * i / points
        requests = step_requests(rate, STEP["step_s"], STEP["min_requests"])
        met, _, _ = _judge(rate, run(rate, requests, lambda *_: False), 0.9, 0.01)
        if met:
            best = rate
    return best


@pytest.mark.parametrize("slots", [4, 8, 16])
def test_the_capacity_found_agrees_with_a_fine_sweep_within_the_resolution(slots):
    run = model_step(SLOS, slots=slots)
    swept = _sweep_capacity(run, 1.0, 120.0, 238)  # every 0.5 req/s
    assert swept > 1.0
    cap = find_capacity(run, SLOS, start_rate=8.0, resolution=0.05, **STEP)
    assert cap.request_rate is not None and cap.lowest_missed is not None
    assert cap.lowest_missed / cap.request_rate - 1 <= 0.05
    # the bracket holds the swept boundary, up to the sweep's own grid step
    assert cap.request_rate <= swept + 0.5 and swept <= cap.lowest_missed
    assert all(s.met for s in cap.steps if s.rate <= cap.request_rate)
    assert cap.goodput == pytest.approx(next(s.goodput for s in cap.steps if s.rate == cap.request_rate))
    assert len(cap.steps) <= 12


def test_a_config_that_misses_at_every_rate_says_so():
    run = model_step(parse_slos(["p99_ttft_ms<=10"]))  # prefill alone takes 20 ms
    cap = find_capacity(run, parse_slos(["p99_ttft_ms<=10"]), start_rate=4.0, min_rate=0.5, **STEP)
    assert cap.request_rate is None and cap.cannot_meet
    assert "missed even at" in cap.note
    assert [s.rate for s in cap.steps] == [4.0, 2.0, 1.0, 0.5]


def test_a_floor_cuts_a_config_that_cannot_beat_the_incumbent_in_one_step():
    run = model_step(SLOS, slots=4)
    own = find_capacity(run, SLOS, start_rate=8.0, resolution=0.05, **STEP).request_rate
    cap = find_capacity(run, SLOS, start_rate=8.0, floor=own * 1.5, **STEP)
    assert cap.below_floor and len(cap.steps) == 1 and cap.request_rate is None
    better = find_capacity(run, SLOS, start_rate=8.0, floor=own * 0.7, resolution=0.05, **STEP)
    assert not better.below_floor and better.steps[0].rate == pytest.approx(own * 0.7)
    assert better.request_rate == pytest.approx(own, rel=0.06)


def test_a_step_near_its_bound_is_run_again_and_counts_only_if_both_runs_meet():
    calls = []
    run = model_step(SLOS, slots=8)

    def noisy(rate, requests, should_stop):
        calls.append(rate)
        return run(rate, requests, should_stop)

    cap = find_capacity(noisy, SLOS, start_rate=8.0, resolution=0.05, **STEP)
    repeats = [s for s in cap.steps if s.repeat]
    assert repeats, "no step landed within 10% of a bound"
    for again in repeats:
        first = next(s for s in cap.steps if s.rate == again.rate and s.repeat == 0)
        assert first.met  # only a met step is re-run
        near = [v for v in first.verdicts if abs((v["bound_ms"] - v["value_ms"]) / v["bound_ms"]) < 0.1]
        assert near or abs(first.achieved_rate / first.rate - 0.9) < 0.03
    assert len(calls) == len(cap.steps)


def test_bad_search_settings_are_spec_errors():
    run = model_step(SLOS)
    with pytest.raises(SpecError, match="at least one SLO"):
        find_capacity(run, (), start_rate=1.0)
    with pytest.raises(SpecError, match="min_rate <= start_rate <= max_rate must hold"):
        find_capacity(run, SLOS, start_rate=0.01, min_rate=0.05)
    with pytest.raises(SpecError, match="resolution must be positive"):
        find_capacity(run, SLOS, start_rate=1.0, resolution=0)


def test_capacity_on_the_stand_in_server(tmp_path):
    """One launch of the stand-in (a real process and HTTP), several steps against it."""
    from servetune.bench import run_benchmark
    from servetune.context import Context
    from servetune.schema.workload import Workload
    from servetune.testing import StandinRunner

    slos = parse_slos(["p99_ttft_ms<=400"])
    workload = Workload(
        name="cap", summary="capacity test", requests=48, max_concurrency=None, input_tokens=64, output_tokens=32,
        warmup_requests=2,
    )  # fmt: skip
    ctx = Context.build("qwen3-8b", gpu="h200", sets=["max_running_requests=4"])
    with StandinRunner(client="builtin").start(ctx.resolve(), run_dir=tmp_path / "run") as server:

        def step(rate, requests, should_stop):
            w = workload.model_copy(update={"request_rate": rate, "requests": requests})
            return run_benchmark(server.url, w, requests=requests, client="builtin", slos=slos, should_stop=should_stop)

        cap = find_capacity(step, slos, start_rate=16.0, resolution=0.25, step_s=2.0, min_requests=32, max_steps=10)
    assert cap.request_rate is not None, cap.steps
    assert cap.lowest_missed is None or cap.lowest_missed > cap.request_rate
    met = [s for s in cap.steps if s.met]
    assert met and all(s.verdicts[0]["value_ms"] <= 400 for s in met)


def test_a_step_the_client_could_not_generate_is_not_met():
    """The builtin client measures how far it fell behind its Poisson schedule (`offered_ratio`); a
    step it could not offer did not test its rate and is not met, whatever the latencies read."""
    from servetune.bench import run_benchmark
    from servetune.bench.capacity import _judge
    from servetune.schema.workload import Workload
    from tests.bench.fakeserver import FakeServer

    slos = parse_slos(["p99_ttft_ms<=5000"])
    w = Workload(name="rate", summary="s", requests=60, max_concurrency=None, output_tokens=2, warmup_requests=0)
    with FakeServer(ttft_s=0.001, itl_s=0.001) as server:
        easy = run_benchmark(server.url, w.model_copy(update={"request_rate": 20.0}), slos=slos)
        flood = run_benchmark(server.url, w.model_copy(update={"request_rate": 1e6, "requests": 400}), slos=slos)
    assert easy.offered_ratio is not None and easy.offered_ratio > 0.95
    assert _judge(20.0, easy, 0.9, 0.01)[0]
    assert flood.offered_ratio is not None and flood.offered_ratio < 0.5
    met, why, _ = _judge(1e6, flood, 0.9, 0.01)
    assert not met and "the client sent only" in why
