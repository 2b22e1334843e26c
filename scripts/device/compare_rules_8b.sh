#!/bin/bash
# Issue 14 item 3: `servetune compare` on capacity of the rule-resolved Qwen3-VL-8B launch (B) against
# SGLang's defaults (A, --a-no-rules), single-image-stream, real SGLang 0.5.17 (lean bundle), ROUNDS rounds
# of fresh launches A B A B...
#   run(command="bash scripts/device/compare_rules_8b.sh", carry=[".sgl", ".whl"], timeout_s=590)
# SLO as capacity_configs.sh: p99 TTFT <= 2000 ms, p99 TPOT <= 25 ms.
# Back in $OUT: run.log, compare8b.tar.xz (both runs' dirs, compare.json), cache.tar.xz
BUDGET_S=${BUDGET_S:-540}
. scripts/device/lib.sh
stamp "compare_rules_8b on $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader)"
dev_setup qwen3_vl_8b || exit 1
M8=$(model_dir qwen3_vl_8b)
HW=$REPO/tests/fixtures/hardware/h200-detected.yaml
PINS=(--set attention_backend=triton --set mm_attention_backend=triton_attn --set sampling_backend=pytorch
      --set grammar_backend=none --set load_format=dummy)
export SERVETUNE_SGLANG_CMD="bash $REPO/scripts/device/sgl_fast_stop.sh"
C=/tmp/sgl/compare8b; mkdir -p $C
python3 -m servetune resolve --model "$M8" --hardware "$HW" --sglang-version 0.5.17 --workload single-image-stream \
  "${PINS[@]}" > $C/resolve-rules.txt 2>&1
timeout -s INT -k 30 $(( $(left) - 30 )) python3 -m servetune compare --model "$M8" --hardware "$HW" \
  --sglang-version 0.5.17 --workload single-image-stream "${PINS[@]}" --a-no-rules --rounds ${ROUNDS:-1} \
  --objective capacity --slo 'p99_ttft_ms<=2000' --slo 'p99_tpot_ms<=25' --start-rate ${START_RATE:-6} \
  --step-seconds ${STEP_S:-120} --resolution ${RESOLUTION:-0.05} --run-dir $C/runs \
  --json > $C/compare.json 2> $C/compare.err
stamp "compare rc=$?"; tail -20 $C/compare.err; head -c 1500 $C/compare.json
stop_ours
tar cf - -C /tmp/sgl compare8b | xz -6 -T0 > "$OUT/compare8b.tar.xz"
pack_cache
ls -la "$OUT"
