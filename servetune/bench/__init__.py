"""Benchmarks: workloads, two clients (servetune's own and SGLang's), typed metrics.

CONTRACT (stable for launch and tune):

    from servetune.bench import run_benchmark, Metrics
    metrics = run_benchmark(url, workload, *, requests=None, run_dir=None, client="auto",
                            model=None, on_progress=None, should_stop=None) -> Metrics

- `workload`: a `Workload`, or a shipped name / file path (`load_workload`).
- `requests`: overrides the workload's measured request count (a quick run; runs of
  different length are not comparable, see `Metrics.comparable_request_throughput`).
- `run_dir`: where the run's files go (`metrics.json`, `workload.json`, the SGLang client's
  JSONL and log); created when missing.
- `client`: `builtin` (httpx; no SGLang needed), `sglang` (SGLang's `bench_serving`), or
  `auto`: SGLang's client for text workloads when it is importable here and no `should_stop`
  is given; otherwise the builtin one. Image workloads default to the builtin client, whose
  images cost ~0.5 ms each (SGLang's spent ~80 s per run on the H200 making and processing
  them) and never repeat across runs (SGLang's repeat for a fixed `--seed`).
- `on_progress(done, total, snapshot)`: called about 50 times per run with a `Snapshot` (its
  `metrics()`, those of the first `snapshot.done` completions, computed only when called: on the
  client's send loop, so a hook that does not need them should not call it), and at least every
  second in between with None (once, at the end, for the SGLang client). None throughout a judged
  step (`judge`).
- `should_stop(done, snapshot) -> bool`: checked at the same points; True cancels the
  requests in flight and returns the metrics of those finished with `stopped_early=True`
  (builtin client only).
- Raises `BenchError` (unreachable server, all requests failed, SGLang client failure) and
  `SpecError`/`UnknownNameError` (bad workload).
"""

from __future__ import annotations

from servetune.bench._run import CrossCheck, choose_client, cross_check, run_benchmark
from servetune.bench._sglang_jsonl import parse_sglang_jsonl
from servetune.bench.metrics import Snapshot
from servetune.bench.schema import Metrics, SteadyWindow
from servetune.bench.workloads import list_workloads, load_workload

__all__ = [
    "CrossCheck",
    "Metrics",
    "Snapshot",
    "SteadyWindow",
    "choose_client",
    "cross_check",
    "list_workloads",
    "load_workload",
    "parse_sglang_jsonl",
    "run_benchmark",
]
