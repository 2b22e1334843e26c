"""Device-only diagnostic: which process's garbage collections pause SGLang (scripts/device/README.md, "GC watch").

With `SERVETUNE_GC_WATCH_S` set and this folder on `PYTHONPATH` (lib.sh's `dev_setup` puts it there when the
job sets `GC_WATCH_S`), every Python process that starts (SGLang's HTTP/tokenizer process and the scheduler and
detokenizer it spawns, which inherit the environment) writes one line to its stderr, so to the server's log,
for each garbage collection that took at least that many seconds, in the shape of SGLang's own warning
(`--gc-warning-threshold-secs`, which 0.5.17 installs in the HTTP/tokenizer process only) plus the process:

    [2026-12-07 10:54:10.123] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.9123s |
        # Objects: unread | (gcwatch pid 1234 sglang::schedul)

(one line).
servetune's telemetry reads it (`kind` "gc"), and `servetune.bench.stalls` names the collection a front-end stall
overlapped. It changes no server setting: a callback on `gc.callbacks` that times each collection.
"""

import os

if os.environ.get("SERVETUNE_GC_WATCH_S"):
    import gc
    import sys
    import time

    _threshold = float(os.environ["SERVETUNE_GC_WATCH_S"])
    _started = [0.0]

    def _process() -> str:
        try:
            with open("/proc/self/comm", encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError:
            return "?"

    def _watch(phase, info):
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        took = time.perf_counter() - _started[0]
        if took < _threshold:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        sys.stderr.write(
            f"[{stamp}] LONG GARBAGE COLLECTION DETECTED | Generation {info.get('generation', '?')} | "
            f"Duration: {took:.4f}s | # Objects: unread | (gcwatch pid {os.getpid()} {_process()})\n"
        )
        sys.stderr.flush()

    gc.callbacks.append(_watch)
