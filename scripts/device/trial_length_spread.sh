#!/bin/bash
# Device call (issue 4, session 3): how well does one trial's steady figure resolve a config, at 384 vs 768
# requests? Real SGLang 0.5.17 (weight-free Qwen2.5-VL-3B, H200), SGLang's defaults with the lean pins, one
# server: single-image-stream runs of 384 and 768 requests, interleaved (so drift hits both alike).
#   run(command="bash scripts/device/trial_length_spread.sh", carry=[".sgl", ".whl"], timeout_s=590)
# Back in $OUT (at most 8 files come back, so they are bundled): run.log, partials.tar.xz (partial-*.json: each
# run's finished and partial figures), requests.tar.xz (every request's record), server.log.xz (SGLang's own log,
# with its decode-batch lines), cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
ROUNDS=${ROUNDS:-4}
. scripts/device/lib.sh
dev_begin trial_length_spread
R=/tmp/sgl/p6; mkdir -p $R
if start_sglang defaults 30000 300 "${BASE[@]}"; then
  for k in $(seq "$ROUNDS"); do
    partial_runs "r384-$k" 1 384 $R
    partial_runs "r768-$k" 1 768 $R
  done
fi
stop_ours
tar cf - -C $R . | xz -6 -T0 > "$OUT/requests.tar.xz"
(cd "$OUT" && ls partial-*.json >/dev/null 2>&1 && tar cf - partial-*.json | xz -6 > partials.tar.xz && rm -f partial-*.json)
[ -f /tmp/sgl/defaults.log ] && xz -6 -c /tmp/sgl/defaults.log > "$OUT/server.log.xz"
pack_cache
ls -la "$OUT"
