"""Metrics: SGLang's statistics, its JSONL result lines, and the steady-state window."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servetune.bench import parse_sglang_jsonl
from servetune.bench.metrics import compute_metrics, summarize
from servetune.bench.schema import RequestRecord
from servetune.bench.stats import percentile
from servetune.bench.windows import FIT_MIN_WAVES, fitted_rate, steady_window
from servetune.errors import BenchError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "bench"


def test_percentiles_interpolate_linearly_like_numpy():
    """p50/p90/p99 equal numpy.percentile's default (linear) method."""
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0])
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(6.6)
    assert percentile(values, 99) == pytest.approx(8.76)
    np = pytest.importorskip("numpy")
    for q in (0, 10, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_summary_uses_the_population_standard_deviation_and_zero_for_no_samples():
    stats = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert (stats["mean"], stats["std"], stats["median"]) == (5.0, 2.0, 4.5)
    assert summarize([]) == dict.fromkeys(("mean", "median", "std", "p90", "p95", "p99"), 0.0)


def test_tpot_itl_ttft_e2e_follow_sglang_definitions():
    """TPOT = (e2e - ttft) / (output - 1); ITL pools chunk gaps; single-token requests have no TPOT."""
    records = [
        RequestRecord(success=True, start=0.0, ttft=0.1, latency=0.5, itl=[0.1, 0.1, 0.2], output_len=5, prompt_len=10),
        RequestRecord(success=True, start=0.1, ttft=0.2, latency=0.2, itl=[], output_len=1, prompt_len=10),
        RequestRecord(success=False, start=0.2, error="HTTP 500"),
    ]
    m = compute_metrics(records, 1.0, requests=3)
    assert (m.completed, m.failed, m.total_input_tokens, m.total_output_tokens) == (2, 1, 20, 6)
    assert m.mean_tpot_ms == pytest.approx(100.0)
    assert m.mean_itl_ms == pytest.approx(400 / 3)
    assert m.mean_ttft_ms == pytest.approx(150.0) and m.mean_e2e_latency_ms == pytest.approx(350.0)
    assert m.request_throughput == 2.0 and m.errors == ["HTTP 500"]
    assert m.concurrency == pytest.approx(0.7)


def _closed_loop(n: int, concurrency: int, service: float) -> list[RequestRecord]:
    """n requests, `concurrency` slots, each taking `service` s: a wave-by-wave closed loop."""
    free = [0.0] * concurrency
    records = []
    for _ in range(n):
        slot = min(range(concurrency), key=free.__getitem__)
        start = free[slot]
        free[slot] = start + service
        records.append(
            RequestRecord(success=True, start=start, ttft=0.01, latency=service, output_len=10, prompt_len=5)
        )
    return records


def test_steady_window_leaves_out_the_first_wave_and_the_drain():
    """With 8 slots of 1 s each, the steady rate is 8 req/s whatever the run length."""
    for n in (64, 200):
        window = steady_window(_closed_loop(n, 8, 1.0), 0.1, 8)
        assert window is not None
        assert window.request_throughput == pytest.approx(8.0)
        assert window.output_throughput == pytest.approx(80.0)


def test_a_partial_window_while_sending_keeps_whole_waves_up_to_the_newest():
    """Mid-run nothing drains yet: the window keeps the newest whole waves (the pruner decides
    sooner) and measures the same rate; the finished-run rule would cut the last wave."""
    so_far = _closed_loop(40, 8, 1.0)  # 40 of a longer run completed, in bursts of 8 at t = 1..5 s
    live = steady_window(so_far, 0.1, 8, sending=True)
    assert live is not None
    assert live.completed == 32 and (live.start_s, live.end_s) == (1.0, 5.0)
    assert live.request_throughput == pytest.approx(8.0)
    finished_rule = steady_window(so_far, 0.1, 8)
    assert finished_rule is not None and finished_rule.completed == 24 and finished_rule.end_s == 4.0
    partial = compute_metrics(so_far, 5.0, requests=200, max_concurrency=8, sending=True)
    assert partial.steady is not None and partial.steady.completed == 32


def test_a_partial_window_never_ends_inside_a_burst():
    """Three requests of the sixth burst have completed: counting them over the whole burst's
    time would read high; the window stops at the end of the last whole wave."""
    burst = _closed_loop(48, 8, 1.0)
    so_far = sorted(burst, key=lambda r: r.end)[:43]
    live = steady_window(so_far, 0.1, 8, sending=True)
    assert live is not None and live.completed == 32 and live.end_s == 5.0
    assert live.request_throughput == pytest.approx(8.0)
    short = steady_window(so_far[:14], 0.0, 8, sending=True)  # less than a wave after the first: up to the newest
    assert short is not None and short.completed == 6 and short.request_throughput == pytest.approx(6.0)


def _batched(n: int, clients: int, batch: int, period: float, spread: float) -> list[RequestRecord]:
    """A closed loop of `clients` against a batched server: every `period` s it takes up to `batch`
    waiting requests and completes them by the next batch, over the batch's last `spread` s."""
    waiting = [0.0] * min(clients, n)  # send times of the requests not yet in a batch
    sent, t, records = len(waiting), 0.0, []
    while len(records) < n:
        take, waiting = waiting[:batch], waiting[batch:]
        ends = [t + period - spread + j * spread / len(take) for j in range(len(take))]
        records += [
            RequestRecord(success=True, start=s, ttft=0.01, latency=e - s, output_len=10, prompt_len=5)
            for s, e in zip(take, ends)
        ]
        for e in ends[: max(0, n - sent)]:
            waiting.append(e)
            sent += 1
        t += period
    return records[:n]


def test_a_finished_window_fits_the_rate_wherever_its_ends_fall_between_bursts():
    """Batches of 48 every 2.4 s (20 req/s) under 64 clients: as the run length moves the window's
    ends through the bursts, completions over the window's length swing by several percent; the
    fitted slope stays within 1% of the true rate (on the H200: 18.95 vs 20.40 counted, 18.54 vs
    18.60 fitted, for two runs of one config)."""
    fitted, counted = [], []
    for n in range(704, 768 + 1, 8):
        w = steady_window(_batched(n, 64, 48, 2.4, 0.3), 0.1, 64)
        assert w is not None
        fitted.append(w.request_throughput)
        counted.append(w.completed / (w.end_s - w.start_s))
    assert max(abs(r / 20.0 - 1) for r in fitted) < 0.01, fitted
    assert max(counted) / min(counted) > 1.05, counted
    short = steady_window(_batched(192, 64, 48, 2.4, 0.3), 0.1, 64)  # about one wave: a fit would sit inside a burst
    assert short is not None and short.completed < FIT_MIN_WAVES * 64
    assert short.request_throughput == pytest.approx(short.completed / (short.end_s - short.start_s))
    assert fitted_rate([1.0, 1.0]) is None and fitted_rate([2.0]) is None
    assert fitted_rate([0.0, 0.5, 1.0, 1.5]) == pytest.approx(2.0)


def test_no_steady_window_when_everything_is_one_wave():
    assert steady_window(_closed_loop(8, 8, 1.0), 0.1, 8) is None


def test_the_tuner_figure_prefers_the_steady_window():
    m = compute_metrics(_closed_loop(100, 4, 1.0), 25.0, requests=100, max_concurrency=4)
    assert m.request_throughput == pytest.approx(4.0)
    assert m.comparable_request_throughput() == pytest.approx(4.0)
    short = compute_metrics(_closed_loop(4, 4, 1.0), 1.0, requests=4, max_concurrency=4)
    assert short.steady is None and short.comparable_request_throughput() == short.request_throughput


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_recorded_sglang_line_parses(path: Path):
    """Each SGLang JSONL fixture (synthesized or recorded on the GPU) becomes a consistent Metrics."""
    m = parse_sglang_jsonl(path)
    assert m.client == "sglang" and m.completed > 0 and m.duration_s > 0
    assert m.request_throughput == pytest.approx(m.completed / m.duration_s, rel=1e-3)
    assert m.output_throughput == pytest.approx(m.total_output_tokens / m.duration_s, rel=1e-3)
    for name in ("ttft", "tpot", "itl", "e2e_latency"):
        assert getattr(m, f"mean_{name}_ms") > 0
        assert getattr(m, f"median_{name}_ms") <= getattr(m, f"p99_{name}_ms")


def test_the_synthetic_h200_line_maps_every_key():
    m = parse_sglang_jsonl(FIXTURES / "sglang-0.5.23-image-synthetic.jsonl", requests=384)
    assert (m.completed, m.failed, m.max_concurrency, m.request_rate) == (384, 0, 64, None)
    assert m.request_throughput == pytest.approx(18.9, abs=0.01)
    assert (m.mean_ttft_ms, m.p90_ttft_ms, m.mean_tpot_ms, m.p99_itl_ms, m.std_e2e_latency_ms) == (
        1770.41,
        2280.12,
        12.06,
        118.6,
        402.17,
    )
    assert m.total_input_tokens == 384 * 1344 and m.input_tokens_source == "client"
    assert math.isclose(m.concurrency, 62.39)


def test_failed_requests_come_from_the_planned_count_or_the_details():
    line = (FIXTURES / "sglang-0.5.23-image-synthetic.jsonl").read_text().strip()
    assert parse_sglang_jsonl(line, requests=400).failed == 16
    detailed = line[:-1] + ', "errors": ["", "HTTP 500: boom", ""]}'
    m = parse_sglang_jsonl(detailed.replace('"completed": 384', '"completed": 2'))
    assert (m.requests, m.failed, m.errors) == (3, 1, ["HTTP 500: boom"])


def test_the_last_line_of_an_appended_file_is_the_latest_run(tmp_path: Path):
    line = (FIXTURES / "sglang-0.5.23-image-synthetic.jsonl").read_text().strip()
    path = tmp_path / "out.jsonl"
    path.write_text(line.replace('"completed": 384', '"completed": 100') + "\n" + line + "\n")
    assert parse_sglang_jsonl(path).completed == 384
    assert parse_sglang_jsonl(path, line=0).completed == 100


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "SGLang benchmark output is empty: {path}"),
        ("not json\n", "SGLang benchmark output is not JSON (Expecting value at column 1): {path}"),
        (
            '{"duration": 1.0}\n',
            "SGLang benchmark output lacks completed, total_input_tokens, total_output_tokens, "
            "request_throughput, input_throughput, output_throughput: {path}",
        ),
    ],
)
def test_a_bad_sglang_output_file_is_a_bench_error(tmp_path: Path, content: str, message: str):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BenchError) as info:
        parse_sglang_jsonl(path)
    assert info.value.message == message.format(path=path)
