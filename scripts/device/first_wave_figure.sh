#!/bin/bash
# Device call (issue 4, session 4): the pruner's first-wave look on real SGLang 0.5.17 (weight-free Qwen2.5-VL-3B,
# H200). At exactly 64 completions (the first wave of 64 clients) the tuner judges the run's rate so far; a server
# whose running limit sits just under the 64 clients completes its first 64 requests in two batches, the worst case
# for that figure. SGLang's defaults, then --max-running-requests 60 and 56: 384-request single-image-stream runs,
# every request's record kept (scripts/device/first_wave.py reads them).
#   run(command="bash scripts/device/first_wave_figure.sh", carry=[".sgl", ".whl"], timeout_s=590)
# Back in $OUT: run.log, partials.tar.xz (partial-*.json), requests.tar.xz (each run's requests.jsonl), cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
. scripts/device/lib.sh
dev_begin first_wave_figure
R=/tmp/sgl/p7; mkdir -p $R
config_runs defaults 300 3 384 $R
for m in 60 56; do
  [ "$(left)" -gt 170 ] || { stamp "skipping mrr$m: $(left)s left"; break; }
  config_runs "mrr$m" 150 3 384 $R --max-running-requests $m
done
tar cf - -C $R . | xz -6 -T0 > "$OUT/requests.tar.xz"
(cd "$OUT" && ls partial-*.json >/dev/null 2>&1 && tar cf - partial-*.json | xz -6 > partials.tar.xz && rm -f partial-*.json)
pack_cache
ls -la "$OUT"
