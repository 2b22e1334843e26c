"""The server model (`servetune.bench.servermodel`): step profiles from every request's record and the
scheduler's lines, the fit against servers whose mechanics are known, and its predictions.

The simulated stand-in (`testing.simulated.StandinServer`) runs the stand-in's own rules in simulated
time: a decode step of (8 + 0.1 B + 8 past the CUDA graph) simulated ms at a time scale of 0.25, so
0.2 ms + 0.025 ms per running request + 2 ms past the graph, in real ms per token."""

from __future__ import annotations

import math

import pytest

from servetune.bench.capacity import find_capacity
from servetune.bench.servermodel import ServerModel, _erlang_c, profile_step
from servetune.bench.slo import parse_slos
from servetune.testing.simulated import StandinServer, arrivals, simulated_step

SLOS = parse_slos(["p99_ttft_ms<=500", "p99_tpot_ms<=3.5"])


def _profiles(server: StandinServer, rates, n: int = 1500):
    out = []
    graph = server.resolved()["cuda_graph_max_bs_decode"]
    for rate in rates:
        run = server.run(arrivals(rate, n, int(rate)), int(rate))
        profile = profile_step(run.records, rate, warmup_s=5.0, telemetry=run.telemetry, graph_bs=graph)
        assert profile is not None
        out.append(profile)
    return out


def test_the_fit_recovers_the_decode_step_and_the_eager_penalty_of_a_known_server():
    """Text requests (no prefill worth stalling for), the stand-in's default 32-wide decode graph:
    the per-request regression finds 2 ms per token, 0.025 ms per running request, 2 ms past the graph."""
    server = StandinServer(argv=[], input_tokens=128, output_tokens=128, noise=0.0)
    model = ServerModel.fit(_profiles(server, (20, 60, 100)), running_limit=267, graph_bs=32)
    assert model.base_ms == pytest.approx(2.0, rel=0.05)
    assert model.per_running_ms == pytest.approx(0.025, rel=0.15)
    assert model.eager_ms == pytest.approx(2.0, rel=0.15)
    assert model.r2 > 0.95 and model.graph_bs == 32 and model.out_tokens == 128


def test_without_a_batch_past_the_graph_the_eager_penalty_is_unknown_not_zero():
    server = StandinServer(argv=["--cuda-graph-max-bs-decode", "256"], input_tokens=128, output_tokens=128)
    model = ServerModel.fit(_profiles(server, (20, 60, 100)), running_limit=267, graph_bs=256)
    assert model.eager_ms is None
    assert model.per_running_ms == pytest.approx(0.025, rel=0.15)


def test_profiles_read_the_telemetry_kv_pool_and_graph():
    """The telemetry's `#token / token usage` is the KV pool (the stand-in's: (0.8 - 0.45) * 400000 -
    100 * 32 tokens), `#token / #running-req` a request's share (1128 + 128 tokens), and a decode line
    outside the CUDA graph shows the graph's size when the caller does not know it (bracketed by the
    largest batch seen in a graph and the smallest outside: at 60 req/s the batch crosses 32 now and then)."""
    server = StandinServer(argv=[], input_tokens=128, output_tokens=128, images=1, noise=0.0)
    run = server.run(arrivals(60, 1500, 1), 1)
    profile = profile_step(run.records, 60, warmup_s=5.0, telemetry=run.telemetry)
    assert profile.kv_tokens == pytest.approx(136_800, rel=0.05)
    # 1128 + 128 tokens each; a few over, as the stand-in's `#token` counts requests still in prefill
    assert profile.kv_per_request == pytest.approx(1256, rel=0.03)
    assert profile.graph_bs == 32 and 0 < profile.graph_false_share < 1
    busy = server.run(arrivals(80, 1500, 1), 1)  # every decode line past the graph: its size is unknown
    assert profile_step(busy.records, 80, warmup_s=5.0, telemetry=busy.telemetry).graph_bs is None
    assert profile.running_max >= profile.batch_mean > 0
    assert profile_step(run.records[:10], 80, warmup_s=5.0) is None  # too few requests to fit
    # the stand-in logs one prefill line per request: no batch to share a prefill's cost, whatever share is assumed
    assert profile.prefill_batches == profile.prefill_requests >= 1000  # of 1,500 arrivals
    model = ServerModel.fit([profile, profile_step(busy.records, 80, warmup_s=5.0, telemetry=busy.telemetry)],
                            running_limit=267, graph_bs=32, prefill_fixed_share=0.45)  # fmt: skip
    assert model.prefill_batch_mean == 1.0 and model.prefill_fixed_ms == 0.0


def test_erlang_c_matches_the_textbook_values():
    assert _erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert _erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert _erlang_c(10, 8.0) == pytest.approx(0.409, abs=0.002)
    assert _erlang_c(4, 4.0) == 1.0 and _erlang_c(4, 0.0) == 0.0


def _baseline_model(seed: int = 0):
    """The model of SGLang-default-like stand-in (unbounded batch past a 32-wide decode graph), fitted
    on one certified search of it, as a capacity study fits it on its baseline."""
    server = StandinServer(argv=[], input_tokens=128, output_tokens=128, images=1, noise=0.05, launch_seed=seed)
    cap = find_capacity(simulated_step(server), SLOS, start_rate=20.0, seed=seed)
    model = ServerModel.fit([s.profile for s in cap.steps if s.profile], running_limit=267, graph_bs=32)
    return model, cap


def test_a_running_limit_at_the_graph_trades_tpot_for_ttft_in_the_model():
    """The model sees the batch break the TPOT bound past the graph, and a running limit at the graph
    hold it there at the price of a queue: under the limit p99 TPOT stays lower and a wait appears."""
    model, cap = _baseline_model()
    free, capped = model.point(80.0, None, 32), model.point(80.0, 30, 32)
    assert capped.tpot_p99_ms < free.tpot_p99_ms and capped.wait_p99_ms > free.wait_p99_ms == 0.0


def test_a_copy_with_other_costs_reads_its_own_capacity():
    """Capacities are memoised per model: a copy with a dearer prefill (as `benchmarks/model_pairs.py` and the
    fit's spread make them) reads its own, not the original's."""
    model, _ = _baseline_model()
    own = model.capacity(SLOS, screen=True)
    dearer = model.model_copy(update={"prefill_ms": model.prefill_ms * 3 + 1.0})
    assert dearer.capacity(SLOS, screen=True) < own == model.capacity(SLOS, screen=True)


def _long_run_share(server: StandinServer, rate: float) -> float:
    """The larger share of 20,000 arrivals over an SLO's bound: a capacity's long-run truth keeps it within 1%."""
    from servetune.bench.slo import samples_ms

    records = server.serve(arrivals(rate, 20_000, 5), 5)
    return max(sum(not s.holds(v) for v in samples_ms(records, s.metric)) / len(records) for s in SLOS)


def test_it_reads_the_baselines_long_run_capacity():
    """Fitted on each of three launches' searches (their own noise), the model's capacity is the launch's
    long-run capacity (20,000 arrivals keep each SLO's share over its bound within 1%) within 8%: its final
    reading simulates 300 s of arrivals (`SIM_HORIZON_S`). Measured: -4.0% to -4.4%; the first, 2,000-arrival
    reading (`screen`) read +7% to +10% (the queue near saturation had not built), and is never below the
    final one. The searches themselves certified 4-9% above the long run, so the model is not checked
    against them. (Before the tail's spread was fitted on finished steps only, it read +14%, +11% and -19%
    of the searches.)"""
    for seed in (0, 1, 2):
        model, _ = _baseline_model(seed)
        capacity = model.capacity(SLOS)
        assert model.capacity(SLOS, screen=True) >= capacity
        server = StandinServer(argv=[], input_tokens=128, output_tokens=128, images=1, noise=0.05, launch_seed=seed)
        assert _long_run_share(server, 0.92 * capacity) <= 0.01 < _long_run_share(server, 1.08 * capacity), seed


def test_the_best_running_limit_it_predicts_is_certified_within_15_percent():
    """Fit on the defaults' search, the best running limit under the graph is predicted well above the
    baseline; certified on a fresh launch it lands within 15% of the prediction."""
    model, cap = _baseline_model()
    from servetune.tuner._model import SCREEN_TOP

    # as a study's seed is found (`tuner._model.seed`): every limit by the first, cheaper reading, then the
    # best of those in full
    screened = sorted(range(16, 65), key=lambda limit: -model.capacity(SLOS, running_limit=limit, graph_bs=32,
                                                                        screen=True))  # fmt: skip
    best = max(screened[:SCREEN_TOP], key=lambda limit: model.capacity(SLOS, running_limit=limit, graph_bs=32))
    predicted = model.capacity(SLOS, running_limit=best, graph_bs=32)
    assert predicted > 1.2 * model.capacity(SLOS) and best <= 32
    other = StandinServer(argv=["--max-running-requests", str(best)], input_tokens=128, output_tokens=128, images=1,
                          noise=0.05, launch_seed=7)  # fmt: skip
    measured = find_capacity(simulated_step(other), SLOS, start_rate=predicted, seed=2).request_rate
    assert math.isclose(predicted, measured, rel_tol=0.15), (best, predicted, measured)
    assert measured > 1.3 * cap.request_rate
