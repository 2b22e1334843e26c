#!/usr/bin/env python3
"""`python3 -m sglang.bench_serving ARGS` with the client's preparation timed separately.

Same code path as `python3 -m sglang.bench_serving` (that module is a re-export of
sglang.benchmark.serving.cli_main in 0.5.17); this wrapper only times the processor load and the
image generation (sglang.benchmark.datasets.image.get_processor / sample_image_requests) and the
whole run, and writes them as JSON to $BENCH_TIMING_OUT (default bench-timing.json).
usage: python3 scripts/device/bench_timed.py [bench_serving args...]
"""

import json
import os
import sys
import time

T0 = time.time()
timing = {"argv": sys.argv[1:], "processor_load_s": 0.0, "image_generation_s": 0.0}


def _wrap(mod, name, key):
    fn = getattr(mod, name, None)
    if fn is None:
        timing.setdefault("notes", []).append(f"{mod.__name__}.{name} not found: not timed")
        return

    def timed(*a, **k):
        t = time.time()
        try:
            return fn(*a, **k)
        finally:
            timing[key] += time.time() - t

    setattr(mod, name, timed)


def _save():
    timing["total_wall_s"] = time.time() - T0
    with open(os.environ.get("BENCH_TIMING_OUT", "bench-timing.json"), "w") as f:
        json.dump(timing, f, indent=1)


try:
    import sglang.benchmark.datasets.image as image_mod

    _wrap(image_mod, "get_processor", "processor_load_s")
    _wrap(image_mod, "sample_image_requests", "image_generation_s")
except Exception as e:  # never break the benchmark for the sake of timing
    timing.setdefault("notes", []).append(f"patch failed: {e!r}")
timing["import_s"] = time.time() - T0

from sglang.benchmark.serving import cli_main  # noqa: E402

sys.argv = ["sglang.bench_serving"] + sys.argv[1:]
try:
    cli_main()
finally:
    _save()
