"""SGLang's own logger (`configure_logger`, run in the CPU-only harness for each installed release) stamps its
scheduler lines to the millisecond under `SGLANG_LOG_MS`, which `servetune launch` sets, and to the second
without it; servetune's telemetry and start-up parsers read both."""

from __future__ import annotations

import re

import pytest

from servetune.catalog._harness import run_in_harness
from servetune.launch import startup_phases
from servetune.launch._telemetry import parse_scheduler_line

SCRIPT = """
import logging, sys, types
from sglang.srt.utils.common import configure_logger
configure_logger(types.SimpleNamespace(log_level="info"), prefix=sys.argv[1])
log = logging.getLogger("sglang.srt.managers.scheduler")
log.info("server_args=ServerArgs(model_path='m')")
log.info("Init torch distributed begin.")
log.info("Decode batch, #running-req: 25, #token: 35768, token usage: 0.01, cuda graph: True, "
         "gen throughput (token/s): 3347.04, #queue-req: 0")
"""


def _log(version: str, prefix: str) -> list[str]:
    """The harness's stderr lines of `SCRIPT` (it inherits this process's environment)."""
    proc = run_in_harness(version, ["-c", SCRIPT, prefix], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("[")]


@pytest.mark.parametrize("prefix", ["", " TP0"])
def test_sglang_stamps_milliseconds_under_sglang_log_ms_and_servetune_reads_them(sglang_versions, prefix, monkeypatch):
    monkeypatch.setenv("SGLANG_LOG_MS", "1")
    for version in sglang_versions:
        lines = _log(version, prefix)
        assert len(lines) == 3, (version, lines)
        stamp = re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.(\d{3})" + re.escape(prefix) + r"\]", lines[-1])
        assert stamp is not None, (version, lines[-1])
        record = parse_scheduler_line(lines[-1])
        assert record is not None and record["kind"] == "decode" and record["running_req"] == 25, version
        assert round(record["ts"] % 1, 3) == int(stamp.group(1)) / 1000, version
        phases = startup_phases("\n".join(lines))
        assert phases.processes_s is not None and 0.0 <= phases.processes_s < 1.0, version


def test_without_it_sglang_stamps_whole_seconds(sglang_versions, monkeypatch):
    monkeypatch.delenv("SGLANG_LOG_MS", raising=False)
    for version in sglang_versions:
        lines = _log(version, "")
        assert all(re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", line) for line in lines), (version, lines)
        record = parse_scheduler_line(lines[-1])
        assert record is not None and record["ts"] % 1 == 0.0, version
