"""The builtin client against a local server with known delays: definitions, counts, images, stop."""

from __future__ import annotations

import hashlib
import io
import json
import socket

import pytest
from fakeserver import FakeServer
from typer.testing import CliRunner

from servetune.bench import run_benchmark
from servetune.bench.images import ImageFactory
from servetune.cli import app
from servetune.errors import BenchError
from servetune.schema.workload import ImageSpec, Workload

TEXT = Workload(
    name="tiny-text", summary="s", requests=24, max_concurrency=8, input_tokens=16, output_tokens=8, warmup_requests=0
)
IMAGES = Workload(
    name="tiny-images",
    summary="s",
    kind="multimodal",
    requests=12,
    max_concurrency=4,
    input_tokens=8,
    output_tokens=2,
    warmup_requests=2,
    images=ImageSpec(resolution="64x96"),
)


def test_latencies_match_the_injected_delays():
    """TTFT = first-chunk delay, ITL = chunk gap, TPOT = (e2e - ttft)/(n - 1), e2e ~ ttft + (n-1)*itl."""
    with FakeServer(ttft_s=0.06, itl_s=0.015) as server:
        m = run_benchmark(server.url, TEXT)
    assert (m.completed, m.failed, m.client, m.model) == (24, 0, "builtin", "fake-model")
    # The delays are floors. The ceilings leave room for a loaded 2-core CI machine (4 busy loops
    # beside the test read a median TTFT of 110-132 ms) yet catch a clock started in the
    # concurrency queue: the median request (wave 2 of 3) would wait a whole request (60 + 7 * 15 ms).
    assert 60 <= m.median_ttft_ms < 60 + 7 * 15 + 40
    assert 15 <= m.median_itl_ms < 15 + 20
    assert 15 <= m.median_tpot_ms < 15 + 20
    assert m.median_e2e_latency_ms == pytest.approx(m.median_ttft_ms + 7 * m.median_tpot_ms, rel=0.15)
    assert m.p99_ttft_ms >= m.median_ttft_ms


def test_counts_come_from_the_servers_usage():
    """Output tokens = usage.completion_tokens; input tokens = usage.prompt_tokens (source: server)."""
    with FakeServer(ttft_s=0.0, itl_s=0.0, prompt_tokens=91) as server:
        m = run_benchmark(server.url, TEXT, requests=10)
    assert (m.requests, m.completed, m.total_output_tokens, m.total_input_tokens) == (10, 10, 80, 910)
    assert m.input_tokens_source == "server"
    assert m.request_throughput == pytest.approx(10 / m.duration_s)


def test_prompts_are_sized_by_the_servers_tokens_per_word():
    """With 1.5 tokens per word, a 16-token prompt is ~11 words: the server counts ~16 text tokens."""
    with FakeServer(ttft_s=0.0, itl_s=0.0, tokens_per_word=1.5) as server:
        m = run_benchmark(server.url, TEXT, requests=10)
    assert m.text_tokens_per_word == pytest.approx(1.5, abs=0.02)
    assert abs(m.total_input_tokens / 10 - (10 + 16)) <= 1


def test_concurrency_never_exceeds_the_workload_limit():
    with FakeServer(ttft_s=0.02, itl_s=0.002) as server:
        run_benchmark(server.url, TEXT)
    assert server.max_in_flight == 8


def test_poisson_arrivals_spread_the_requests():
    """At 50 req/s, 12 requests take about 0.22 s of arrivals; unbounded rate takes none."""
    paced = TEXT.model_copy(update={"request_rate": 50.0, "requests": 12, "max_concurrency": None})
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        m = run_benchmark(server.url, paced)
    assert m.duration_s > 0.05 and m.completed == 12  # the arrivals were spread, not sent at once


def test_images_never_repeat_within_or_across_runs():
    """Every image the server receives is new, also in a second run of the same workload."""
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        first = run_benchmark(server.url, IMAGES)
        run_benchmark(server.url, IMAGES)
    assert first.images_sent == 12
    assert len(server.image_hashes) == 2 * (12 + 2)
    assert len(set(server.image_hashes)) == len(server.image_hashes)


def test_a_pool_workload_repeats_exactly_its_pool():
    pooled = IMAGES.model_copy(
        update={"images": ImageSpec(resolution="64x96", reuse="pool", pool_size=3), "warmup_requests": 0}
    )
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        run_benchmark(server.url, pooled)
    assert len(server.image_hashes) == 12 and len(set(server.image_hashes)) == 3


def test_generated_images_differ_in_their_pixels_and_decode():
    """Uniqueness survives decoding (what a media cache hashes), for spliced JPEG and for PNG."""
    from PIL import Image

    for factory in (ImageFactory(1280, 720), ImageFactory(160, 96, "png")):
        pixels = set()
        for index in range(6):
            image = Image.open(io.BytesIO(factory.image(index)))
            assert image.size == (factory.width, factory.height)
            pixels.add(hashlib.sha256(image.convert("RGB").tobytes()).hexdigest())
        assert len(pixels) == 6
    assert ImageFactory(1280, 720).spliced
    other_run = ImageFactory(1280, 720)
    assert other_run.image(0) != ImageFactory(1280, 720).image(0)


def test_should_stop_cuts_the_run_short_and_flags_it():
    """The tuner's pruning hook: True stops the run and returns what finished, stopped_early=True."""
    seen = []
    longer = TEXT.model_copy(update={"requests": 200})

    def stop(done, snapshot):
        seen.append((done, snapshot.done, snapshot.metrics().completed))
        return done >= 20

    with FakeServer(ttft_s=0.01, itl_s=0.01) as server:
        m = run_benchmark(server.url, longer, should_stop=stop)
    assert m.stopped_early and 20 <= m.completed < 200 and m.failed == 0
    assert seen[-1][0] >= 20 and all(done == covered == completed for done, covered, completed in seen)


@pytest.fixture
def computed(monkeypatch) -> list[int]:
    """The record counts the builtin client computed metrics over, in order (the real computation)."""
    import servetune.bench._builtin as builtin

    counts: list[int] = []
    real = builtin.compute_metrics

    def counted(records, *args, **kwargs):
        counts.append(len(records))
        return real(records, *args, **kwargs)

    monkeypatch.setattr(builtin, "compute_metrics", counted)
    return counts


def test_a_judged_step_builds_no_snapshot_on_the_send_loop(computed):
    """A capacity step or soak is decided by its judge; its hooks still run (the runaway guard, Ctrl-C)
    but get None, and the metrics are computed once, at the end: a snapshot of every record, recomputed
    on the send loop every 1/50 of the run, stalled the H200 client by up to 250 ms late in a 300 s soak.
    The same run unjudged gets its snapshots, computed when a hook reads them (here every one)."""
    from servetune.bench.slo import parse_slos
    from servetune.bench.verdict import StepJudge, StepRules

    slos = parse_slos(["p99_ttft_ms<=5000"])
    paced = TEXT.model_copy(update={"requests": 100, "max_concurrency": None, "request_rate": 400.0})
    for judged in (True, False):
        computed.clear()
        seen: list = []

        def stop(done, snapshot, seen=seen):
            seen.append(snapshot and snapshot.metrics())
            return False

        judge = StepJudge(slos, StepRules(warmup_s=0.0), rate=400.0, max_s=60.0) if judged else None
        with FakeServer(ttft_s=0.005, itl_s=0.001) as server:
            m = run_benchmark(server.url, paced, should_stop=stop, slos=slos, judge=judge)
        assert m.completed > 0 and seen
        if judged:
            assert all(p is None for p in seen) and computed == [m.completed]
        else:
            assert all(p is not None for p in seen) and len(computed) >= 50


def test_a_judged_step_builds_no_snapshot_while_no_request_completes(computed):
    """While no request completes for `LOOK_S`, the client still asks its hooks (a runaway config's first
    wave may take minutes); in a judged step it asked them with a full snapshot of every record. At 14 req/s
    a completion gap that long comes a few times in a 300 s soak, and each snapshot then took 300-420 ms
    on the send loop: the stand-in soaks' unexplained single stalls (docs/h200-results.md section 20)."""
    from servetune.bench.slo import parse_slos
    from servetune.bench.verdict import StepJudge, StepRules

    slos = parse_slos(["p99_ttft_ms<=5000"])
    sparse = TEXT.model_copy(update={"requests": 6, "max_concurrency": None, "request_rate": 1.5})
    asked: list = []

    def stop(done, snapshot):
        asked.append(snapshot)
        return False

    judge = StepJudge(slos, StepRules(warmup_s=0.0), rate=1.5, max_s=600.0)  # not futile: it could reach 433
    with FakeServer(ttft_s=0.005, itl_s=0.001) as server:
        m = run_benchmark(server.url, sparse, should_stop=stop, slos=slos, judge=judge)
    assert m.completed == 6 and len(asked) > 6  # asked while idle, between completions 0.67 s apart on average
    assert all(p is None for p in asked) and computed == [6]


def test_snapshots_no_hook_reads_are_never_computed(computed):
    """The progress display and the runaway guard take the client's snapshots (every 1/50 of the run) but
    do not read their metrics: none is computed, only the final metrics are. One hook that reads one
    snapshot gets the metrics of exactly the completions it covers."""
    longer = TEXT.model_copy(update={"requests": 100})
    views = []
    with FakeServer(ttft_s=0.001, itl_s=0.0) as server:
        m = run_benchmark(server.url, longer, on_progress=lambda done, total, snapshot: views.append(snapshot),
                          should_stop=lambda done, snapshot: False)  # fmt: skip
    taken = [v for v in views if v is not None]
    assert len(taken) >= 50 and computed == [m.completed]
    middle = taken[len(taken) // 2]
    assert middle.metrics().completed == middle.done < m.completed and computed[-1] == middle.done
    assert middle.metrics() is middle.metrics() and len(computed) == 2  # computed once, then kept


def test_the_client_reports_how_long_its_own_loop_stalled():
    """Work done on the send loop (here a hook that blocks 300 ms once) delays every send and every read
    behind it; the client samples its loop's lag and reports the longest, so a stall of the instrument is
    told apart from a slow server."""
    import time

    blocked = []

    def stop(done, snapshot):
        if not blocked:
            blocked.append(done)
            time.sleep(0.3)
        return False

    paced = TEXT.model_copy(update={"requests": 60, "max_concurrency": None, "request_rate": 40.0})
    with FakeServer(ttft_s=0.005, itl_s=0.001) as server:
        m = run_benchmark(server.url, paced, should_stop=stop)
    assert blocked and m.loop_lag_max_ms is not None and m.loop_lag_max_ms >= 250.0
    assert m.loop_lag_p99_ms is not None and m.loop_lag_p99_ms <= m.loop_lag_max_ms
    assert m.lateness_max_ms is not None and m.lateness_max_ms >= 200.0  # arrivals due during the stall went late


def test_partial_windows_mid_run_keep_the_whole_waves_after_the_first():
    """While requests are still being sent, a partial steady window runs from the end of the
    first wave over the whole waves completed since (the pruner's figure); the final one trims
    the drain."""
    longer = TEXT.model_copy(update={"requests": 120})
    seen = {}
    with FakeServer(ttft_s=0.005, itl_s=0.002) as server:
        m = run_benchmark(server.url, longer, should_stop=lambda done, view: seen.update({done: view.metrics()}))
    mid = [done for done in seen if 8 + 4 <= done < 120 - 8]  # past the first wave; fewer than 120 sent
    assert mid
    for done in mid:
        opens_after = max(int(0.1 * done), 8 - 1)  # the start trim, or the first wave's last completion
        since = done - 1 - opens_after
        expected = 8 * (since // 8) if since >= 8 else since  # whole waves, once there is one
        assert seen[done].steady is not None and seen[done].steady.completed == expected, done
    assert m.steady is not None and m.steady.completed < 120 - 8 - 12  # the finished run trims its last 10%


def test_the_run_dir_keeps_every_request_and_the_steady_figure_recomputes_from_it(tmp_path):
    from servetune.bench.schema import RequestRecord
    from servetune.bench.windows import steady_window

    longer = TEXT.model_copy(update={"requests": 64})
    with FakeServer(ttft_s=0.004, itl_s=0.002) as server:
        m = run_benchmark(server.url, longer, run_dir=tmp_path, client="builtin")
    from servetune.bench._builtin import load_requests

    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 64 and all(r["success"] and r["finished"] and r["output_len"] == 8 for r in rows)
    starts = [r["start"] for r in rows]
    assert starts == sorted(starts)  # arrival order, every request sent
    records = load_requests(tmp_path / "requests.jsonl")
    assert all(isinstance(r, RequestRecord) for r in records)
    again = steady_window(records, longer.steady_trim, longer.max_concurrency)
    assert m.steady is not None and again is not None
    assert again.request_throughput == pytest.approx(m.steady.request_throughput, rel=1e-3)


def test_progress_is_reported_up_to_the_total():
    calls = []
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        run_benchmark(server.url, TEXT, on_progress=lambda done, total, partial: calls.append((done, total)))
    assert calls[-1] == (24, 24) and [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_progress_is_also_reported_at_the_end_of_the_first_wave():
    """The tuner's first pruning look: a report at exactly max_concurrency completions, between the
    every-requests//50 ones (here every 2nd; 9 is odd)."""
    calls = []
    wave = TEXT.model_copy(update={"requests": 120, "max_concurrency": 9})
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        run_benchmark(server.url, wave, on_progress=lambda done, total, partial: calls.append(done))
    assert 9 in calls and 7 not in calls and 11 not in calls
    assert calls == sorted(calls) and calls[-1] == 120


def test_server_errors_count_as_failed():
    with FakeServer(ttft_s=0.0, itl_s=0.0, fail_every=4) as server:
        m = run_benchmark(server.url, TEXT)
    assert (m.completed, m.failed) == (18, 6)
    assert m.errors == ['HTTP 500: {"error": {"message": "injected failure"}}']


def test_all_requests_failing_is_a_bench_error():
    with FakeServer(ttft_s=0.0, itl_s=0.0, fail_every=1) as server, pytest.raises(BenchError) as info:
        run_benchmark(server.url, TEXT, requests=4)
    assert info.value.render() == (
        f"error[bench]: all 4 requests failed against {server.url}\n"
        '   = note: first error: HTTP 500: {"error": {"message": "injected failure"}}'
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_url_names_the_url_and_the_remedy():
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(BenchError) as info:
        run_benchmark(url, TEXT)
    assert info.value.render() == (
        f"error[bench]: cannot reach the server at {url} (ConnectError)\n"
        "   = help: start the server first (e.g. `servetune launch --model M`), or fix --url "
        "(SGLang listens on port 30000 by default)"
    )


def test_cli_bench_json_has_request_throughput_at_the_top(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "name: tiny\nsummary: s\nrequests: 6\nmax_concurrency: 3\n"
        "input_tokens: 4\noutput_tokens: 3\nwarmup_requests: 1\n"
    )
    with FakeServer(ttft_s=0.0, itl_s=0.0) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "--url",
                server.url,
                "--workload",
                str(workload),
                "--json",
                "--client",
                "builtin",
                "--run-dir",
                str(tmp_path / "run"),
            ],
        )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["request_throughput"] > 0 and data["completed"] == 6
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["completed"] == 6
    assert json.loads((tmp_path / "run" / "workload.json").read_text())["name"] == "tiny"
