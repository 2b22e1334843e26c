"""SLO parsing, per-request goodput and attainment, the confident verdict, latency from the schedule."""

from __future__ import annotations

import pytest

from servetune.bench.metrics import compute_metrics
from servetune.bench.schema import RequestRecord
from servetune.bench.slo import (
    LatencySlo,
    MetricBound,
    parse_bound,
    parse_slo,
    parse_slos,
    request_latency_ms,
    request_meets,
)
from servetune.errors import SpecError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("p99_ttft_ms<=800", LatencySlo("p99", "ttft", 800.0)),
        ("p50_tpot_ms<40", LatencySlo("p50", "tpot", 40.0, strict=True)),
        ("median_e2e_latency_ms <= 2500", LatencySlo("median", "e2e", 2500.0)),
        ("p90_itl<=25", LatencySlo("p90", "itl", 25.0)),
        ("mean_e2el_ms<=3000", LatencySlo("mean", "e2e", 3000.0)),
    ],
)
def test_slos_parse_to_a_statistic_a_latency_and_a_bound(text, expected):
    assert parse_slo(text) == expected


def test_an_slo_names_the_metrics_field_it_reads():
    assert parse_slo("p50_ttft_ms<=1").key == "median_ttft_ms"
    assert parse_slo("p99_e2e_ms<=1").key == "p99_e2e_latency_ms"
    assert str(parse_slo("p99_tpot_ms <= 40")) == "p99_tpot_ms<=40"


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("p99_ttft_ms>=800", "cannot read the SLO 'p99_ttft_ms>=800'", "p99_ttft_ms<=800"),
        ("p98_ttft_ms<=800", "unknown statistic 'p98' in the SLO 'p98_ttft_ms<=800'", "statistics: p50, p90"),
        ("p99_ttfb_ms<=800", "unknown latency 'ttfb' in the SLO 'p99_ttfb_ms<=800'", "did you mean 'ttft'"),
        ("p99_ttft_ms<=fast", "the SLO bound 'fast' is not a number", "STAT_METRIC_ms<=N"),
        ("p99_ttft_ms<=-5", "the SLO bound must be a positive number of milliseconds, but got '-5'", "<=N"),
        ("p99_ttft_ms<=inf", "the SLO bound must be a positive number of milliseconds, but got 'inf'", "<=N"),
        ("", "cannot read the SLO ''", "e.g. --slo"),
    ],
)
def test_a_bad_slo_is_a_spec_error_that_says_what_and_how(text, message, hint):
    with pytest.raises(SpecError) as err:
        parse_slo(text)
    assert err.value.message == message
    assert hint in err.value.render()


def test_the_same_statistic_twice_is_refused():
    with pytest.raises(SpecError, match="p99_ttft_ms twice"):
        parse_slos(["p99_ttft_ms<=800", "p99_ttft<=900"])


def _rec(ttft: float, latency: float, out: int = 11, ok: bool = True, start: float = 0.0) -> RequestRecord:
    gaps = [(latency - ttft) / (out - 1)] * (out - 1) if out > 1 else []
    return RequestRecord(success=ok, start=start, ttft=ttft, latency=latency, itl=gaps, output_len=out)


def test_a_request_meets_an_slo_by_its_own_latencies():
    ttft, tpot = parse_slo("p99_ttft_ms<=100"), parse_slo("p99_tpot_ms<=10")
    assert request_meets(_rec(0.1, 0.2), [ttft, tpot])  # TTFT 100 ms, TPOT 10 ms: on the bounds
    assert not request_meets(_rec(0.101, 0.2), [ttft])
    assert not request_meets(_rec(0.05, 0.2), [tpot])  # TPOT 15 ms
    assert request_meets(_rec(0.05, 0.2, out=1), [tpot])  # one token: no TPOT to miss
    assert not request_meets(_rec(0.0, 0.0, ok=False), [ttft])


def test_goodput_counts_requests_that_met_every_bound_over_the_run():
    slos = parse_slos(["p99_ttft_ms<=100", "p99_e2e_ms<=1000"])
    records = [_rec(0.05, 0.5, start=i * 0.1) for i in range(6)]
    records += [_rec(0.2, 0.5, start=0.6), _rec(0.05, 1.5, start=0.7), _rec(0, 0, ok=False, start=0.8)]
    m = compute_metrics(records, 2.0, requests=9, slos=slos)
    assert m.slo is not None
    assert m.slo.goodput == pytest.approx(6 / 2.0)
    assert m.slo.attainment == pytest.approx(6 / 9)
    by = {v.slo: v for v in m.slo.verdicts}
    assert by["p99_ttft_ms<=100"].over == 1 and by["p99_e2e_ms<=1000"].over == 1
    assert by["p99_ttft_ms<=100"].met is False  # p99 of eight TTFTs with one at 200 ms
    assert by["p99_ttft_ms<=100"].value_ms == pytest.approx(m.p99_ttft_ms)
    assert m.slo.met is False


def test_no_slo_no_report():
    assert compute_metrics([_rec(0.1, 0.2)], 1.0, requests=1).slo is None


def test_a_run_states_each_percentile_verdict_at_its_confidence():
    """`p99 <= bound` on a point statistic says "at most one of ~100 over"; the confident verdict says
    whether the count over the bound certifies it: 200 clean requests do not, 450 do, 6 of 100 over miss.
    A run is judged once, at its end: the fixed-length test's 299 clean requests suffice (MLPerf's count;
    a sequential test, for counts looked at again and again, would need 433)."""
    slo = parse_slos(["p99_ttft_ms<=100"])

    def verdict(n: int, over: int):
        records = [_rec(0.2 if i < over else 0.05, 0.5, start=i * 0.01) for i in range(n)]
        return compute_metrics(records, 5.0, requests=n, slos=slo).slo.verdicts[0]

    short, long, bad = verdict(200, 0), verdict(450, 0), verdict(100, 6)
    assert short.met and short.confident == "undecided" and short.samples == 200
    assert verdict(298, 0).confident == "undecided" and verdict(299, 0).confident == "met"
    assert long.met and long.confident == "met"
    assert not bad.met and bad.confident == "missed" and bad.over == 6
    assert (
        compute_metrics([_rec(0.05, 0.5)], 1.0, requests=1, slos=parse_slos(["mean_ttft_ms<=100"]))
        .slo.verdicts[0]
        .confident
        is None
    )


def test_slo_latencies_run_from_the_scheduled_arrival():
    """A request sent 0.3 s after its schedule with a 0.1 s TTFT: 400 ms against the SLO, 100 ms in
    SGLang's own definition (from the send), and the lateness is reported."""
    late = RequestRecord(success=True, finished=True, start=1.3, scheduled=1.0, ttft=0.1, latency=0.5, output_len=11)
    m = compute_metrics([late], 1.0, requests=1, slos=parse_slos(["p99_ttft_ms<=200", "p99_e2e_ms<=1000"]))
    by = {v.slo: v for v in m.slo.verdicts}
    assert by["p99_ttft_ms<=200"].value_ms == pytest.approx(400.0) and not by["p99_ttft_ms<=200"].met
    assert by["p99_e2e_ms<=1000"].value_ms == pytest.approx(800.0)
    assert m.p99_ttft_ms == pytest.approx(100.0)
    assert m.lateness_max_ms == pytest.approx(300.0)


def test_one_grammar_for_every_slo():
    """bench, compare and tune read `--slo` one way: a latency statistic is a `LatencySlo` (verdicts,
    goodput, capacity), any other metric a `MetricBound` (a study's constraint); a latency SLO is also
    a bound on its statistic's field."""
    assert parse_bound("p99_ttft_ms<=800") == LatencySlo("p99", "ttft", 800.0)
    assert parse_bound("median_e2e_latency_ms < 50") == LatencySlo("median", "e2e", 50.0, strict=True)
    assert parse_bound("steady_request_throughput>=10") == MetricBound("steady_request_throughput", ">=", 10.0)
    assert MetricBound.of(parse_slo("p50_tpot_ms<=40")) == MetricBound("median_tpot_ms", "<=", 40.0)
    # a figure in ms that is not one of the four latencies bounds a metric; a near miss is a typo
    assert parse_bound("p99_queue_delay_ms<=100") == MetricBound("p99_queue_delay_ms", "<=", 100.0)
    assert parse_bound("lateness_p99_ms<=5") == MetricBound("lateness_p99_ms", "<=", 5.0)
    for text, message in (
        ("steady_request_throughput>=ten", "the SLO bound 'ten' is not a number"),
        ("throughput>=inf", "the SLO bound must be a finite number, but got 'inf'"),
        ("=10", "cannot read the SLO '=10'"),
        ("p99_ttfb_ms<=800", "unknown latency 'ttfb' in the SLO 'p99_ttfb_ms<=800'"),
    ):
        with pytest.raises(SpecError) as err:
            parse_bound(text)
        assert err.value.message == message


def test_a_latency_the_judges_do_not_know_is_an_error_not_another_latency():
    record = RequestRecord(success=True, finished=True, ttft=0.1, latency=1.0, output_len=10, itl=[0.1])
    assert request_latency_ms(record, "itl") == pytest.approx(100.0)
    with pytest.raises(ValueError, match="no per-request latency 'queue'"):
        request_latency_ms(record, "queue")


def test_a_run_a_comparison_and_a_capacity_take_latency_slos_only():
    with pytest.raises(SpecError) as err:
        parse_slos(["p99_ttft_ms<=800", "steady_request_throughput>=10"])
    assert (
        err.value.message == "the SLO 'steady_request_throughput>=10' bounds steady_request_throughput, not a latency"
    )
    assert "a study's constraint (tune)" in err.value.help
