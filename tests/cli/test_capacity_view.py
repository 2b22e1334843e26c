"""The lines `bench --capacity` ends with (`servetune.cli._capacity_view`): the sustained figure and
where the time went, from a capacity result built as the search builds one."""

from __future__ import annotations

from servetune.bench.capacity import Capacity, CapacityStep, SoakResult
from servetune.cli._capacity_view import cost_line, sustained_line
from servetune.runner import RunTimings


def _capacity(soaks: list[SoakResult], sustained: float | None) -> Capacity:
    steps = [
        CapacityStep(index=i + 1, rate=r, state="met" if r < 14 else "missed", met=r < 14, bench_s=s)
        for i, (r, s) in enumerate([(12.0, 47.7), (24.0, 8.9), (13.5, 38.2), (14.1, 22.4)])
    ]
    return Capacity(slos=["p99_tpot_ms<=25"], request_rate=13.5, certified=True, goodput=13.4, verdicts=[],
                    lowest_missed=14.1, resolution=0.05, steps=steps, bench_s=117.2, soaks=soaks,
                    sustained=sustained)  # fmt: skip


def _soak(rate: float, met: bool, bench_s: float) -> SoakResult:
    return SoakResult(index=1, rate=rate, state="met" if met else "undecided", met=met, seconds=300.0, bench_s=bench_s)


def test_the_cost_line_splits_a_managed_run_into_start_wave_search_and_soaks():
    cap = _capacity([_soak(13.5, False, 131.0), _soak(12.86, True, 300.5)], 12.86)
    timings = RunTimings(startup_s=61.2, bench_s=117.2 + 431.5 + 4.3, stop_s=1.1, total_s=615.0)
    line = cost_line(cap, timings)
    assert line.startswith("cost ")
    assert "start-up 61 s" in line and "warm-up wave 4.3 s" in line
    assert "search 117 s (4 steps)" in line and "soaks 432 s (2)" in line and line.endswith("615 s in all")
    assert cost_line(_capacity([], None)).endswith("search 117 s (4 steps): 117 s in all")  # --url: no launch


def test_the_sustained_line_gives_the_soaked_rate_and_its_bracket_or_says_none_held():
    held = sustained_line(_capacity([_soak(13.5, False, 131.0), _soak(12.86, True, 300.5)], 12.86))
    assert held is not None and "12.86 req/s" in held and "bracket [12.86, 13.5]" in held and "300 s" in held
    first = sustained_line(_capacity([_soak(13.5, True, 300.5)], 13.5))
    assert first is not None and "bracket [13.5, 14.1]" in first  # the first soak held: the search's bracket
    none = sustained_line(_capacity([_soak(13.5, False, 131.0), _soak(12.86, False, 90.0)], None))
    assert none is not None and "none found" in none and "12.86" in none
    assert sustained_line(_capacity([], None)) is None
