#!/bin/bash
# Device call (issue 4): the pruner's partial figure on real SGLang 0.5.17 (weight-free Qwen2.5-VL-3B, H200).
#   run(command="bash scripts/device/pruner_partial_figures.sh", carry=[".sgl", ".whl"], timeout_s=590)
# Two server configs (SGLang's defaults with the lean pins; the same with --max-running-requests 16, an
# admission-bound server), 768 requests of single-image-stream each (defaults twice), every partial result
# the pruner would see recorded by scripts/device/partial_windows.py.
# Back in $OUT: run.log, partial-*.json, cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
. scripts/device/lib.sh
dev_begin pruner_partial_figures

config_runs defaults 300 2 768 ""
[ "$(left)" -gt 260 ] && config_runs mrr16 200 1 768 "" --max-running-requests 16
pack_cache
ls -la "$OUT"
