#!/bin/bash
# Device call (issue 4): run-to-run spread of the steady figure on real SGLang 0.5.17 (weight-free
# Qwen2.5-VL-3B, H200), fitted slope vs completions counted over the window, from every request's record.
#   run(command="bash scripts/device/steady_rate_spread.sh", carry=[".sgl", ".whl"], timeout_s=590)
# SGLang's defaults with the lean pins, 768 requests of single-image-stream three times; then
# --max-running-requests 48 (batches that do not line up with the 64 clients) twice.
# Back in $OUT: run.log, partial-*.json, requests.tar.xz (each run's requests.jsonl), cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
. scripts/device/lib.sh
dev_begin steady_rate_spread
R=/tmp/sgl/p5; mkdir -p $R
config_runs defaults 300 3 768 $R
[ "$(left)" -gt 200 ] && config_runs mrr48 150 2 768 $R --max-running-requests 48
tar cf - -C $R . | xz -6 -T0 > "$OUT/requests.tar.xz"
pack_cache
ls -la "$OUT"
