"""Start-up phases from SGLang's log, read from a real H200 log (SGLang 0.5.17) and made-up shapes.

The stand-in's run end to end: tests/runner/test_startup_phases.py."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from servetune.launch import read_startup_phases, startup_phases

H200 = Path(__file__).parents[1] / "fixtures" / "h200" / "capacity-3b-defaults"
"""The 3B's server.log (as sglang-starts.log) of three capacity rounds on one reused run directory
(three starts appended: the first cold, CUDA graphs 71.65 s), with the per-request lines removed;
its server.json and timings."""


@pytest.fixture
def utc(monkeypatch):
    """The H200 stamped its log in UTC; read it as its own machine would."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_h200_start_reads_as_sglang_logged_it(utc):
    record = json.loads((H200 / "server.json").read_text())
    startup_s = json.loads((H200 / "timings.json").read_text())["timings"]["startup_s"]
    started = record["started_at"]
    phases = read_startup_phases(H200 / "sglang-starts.log", started_at=started, ready_at=started + startup_s)
    assert phases is not None
    # SGLang's exact figures, from the log's last start (`Load weight end. elapsed=0.15 s`, ...)
    assert (phases.weights_s, phases.kv_cache_s, phases.cuda_graphs_s) == (0.15, 0.04, 4.91)
    assert phases.cuda_graph_batch_sizes == 36  # bs=[1, 2, 4, 8, 12, 16, 24, ..., 256]
    # from the stamps (18:05:29.3 spawn; 18:05:53 first line; 18:06:22 torch init; 18:06:29 engine; 18:06:32 up)
    assert phases.imports_s == pytest.approx(53 - 29.33, abs=0.01)
    assert (phases.processes_s, phases.engine_s, phases.warmup_s) == (29.0, 7.0, 3.0)
    assert phases.total_s == pytest.approx(startup_s, abs=0.01)
    parts = phases.imports_s + phases.processes_s + phases.engine_s + phases.warmup_s + phases.ready_s
    assert parts == pytest.approx(phases.total_s, abs=0.01)
    assert phases.cuda_graphs_s < phases.engine_s
    assert phases.summary().startswith("imports 23.7 s, processes 29.0 s, engine 7.0 s (CUDA graphs 4.9 s)")


def test_a_reused_log_gives_the_start_asked_for(utc):
    text = (H200 / "sglang-starts.log").read_text()
    last = startup_phases(text)  # no spawn time: the last start
    assert last.cuda_graphs_s == 4.91 and last.imports_s is None and last.ready_s is None
    first_stamp = re.search(r"^\[([\d-]+ [\d:]+)\]", text, re.MULTILINE).group(1)
    first = startup_phases(text, started_at=time.mktime(time.strptime(first_stamp, "%Y-%m-%d %H:%M:%S")))
    assert first.cuda_graphs_s == 71.65 and first.weights_s == 0.30  # the cold start only, not a sum of three
    assert first.engine_s > 70


def test_other_log_shapes():
    """Tensor-parallel stamps (`[... TP0]`), the older `Time elapsed: N s`, and a log without milestones."""
    text = "\n".join(
        [
            "[2026-01-01 10:00:00] server_args=ServerArgs(...)",
            "[2026-01-01 10:00:05 TP0] Init torch distributed begin.",
            "[2026-01-01 10:00:06 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=70.00 GB",
            "[2026-01-01 10:00:07 TP0] Memory pool end. avail mem=9.00 GB",
            "[2026-01-01 10:00:07 TP0] Capture cuda graph begin. This can take up to several minutes.",
            "[2026-01-01 10:00:19 TP0] Capture cuda graph end. Time elapsed: 11.50 s. mem usage=1.2 GB.",
            "[2026-01-01 10:00:21] The server is fired up and ready to roll!",
        ]
    )
    p = startup_phases(text)
    assert (p.processes_s, p.engine_s, p.cuda_graphs_s, p.warmup_s) == (5.0, 14.0, 11.5, 2.0)
    assert p.weights_s is None and p.cuda_graph_batch_sizes is None
    bare = startup_phases("starting\n[2026-01-01 10:00:00] hello\n")
    assert bare.engine_s is None and bare.cuda_graphs_s is None and bare.summary() == ""
    assert read_startup_phases(Path("/nonexistent/server.log")) is None


def test_millisecond_stamps_give_sub_second_phases(utc):
    """With `SGLANG_LOG_MS` (which `servetune launch` sets) SGLang stamps `[2026-12-01 18:05:53.120]`: the
    phases keep the fraction. The H200 start, its stamps given made-up milliseconds, reads each phase that
    many milliseconds apart from the whole-second reading."""
    text = (H200 / "sglang-starts.log").read_text()
    whole = startup_phases(text)
    fractions = iter(range(1000))

    def stamped(m: re.Match) -> str:
        return f"[{m.group(1)}.{next(fractions) % 1000:03d}"

    ms = startup_phases(re.sub(r"^\[([\d-]+ [\d:]+)", stamped, text, flags=re.MULTILINE))
    assert (ms.weights_s, ms.kv_cache_s, ms.cuda_graphs_s) == (whole.weights_s, whole.kv_cache_s, whole.cuda_graphs_s)
    for name in ("processes_s", "engine_s", "warmup_s"):
        got, was = getattr(ms, name), getattr(whole, name)
        assert got is not None and got != was and abs(got - was) < 1.0, name
