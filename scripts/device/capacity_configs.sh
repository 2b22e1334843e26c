#!/bin/bash
# Capacity at an SLO on real SGLang 0.5.17 (issue 14): `servetune bench --capacity` of the weight-free
# Qwen2.5-VL-3B, single-image-stream (one unique 720p image per request), for SGLang's defaults and for
# each extra flag set in CONFIGS, one launch each, every step kept (capacity.json, steps/*/requests.jsonl).
#   run(command="bash scripts/device/capacity_configs.sh", carry=[".sgl", ".whl"], timeout_s=590)
# MIN_S (default 200): seconds a config needs left to be run. SLO (SLO env, default): p99 TTFT <= 2000 ms and p99 TPOT <= 25 ms: an interactive VLM chat answers
# within two seconds for 99 in 100 requests and streams at 40 tokens/s or faster.
# Back in $OUT: run.log, capacity.tar.xz (every run dir, the plots, the --json outputs), cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
. scripts/device/lib.sh
stamp "capacity_configs on $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader)"
dev_setup qwen2_5_vl_3b || exit 1
M3=$(model_dir qwen2_5_vl_3b)
HW=$REPO/tests/fixtures/hardware/h200-detected.yaml
PINS=(--set attention_backend=triton --set mm_attention_backend=triton_attn --set sampling_backend=pytorch
      --set grammar_backend=none --set load_format=dummy)
export SERVETUNE_SGLANG_CMD="bash $REPO/scripts/device/sgl_fast_stop.sh"
SLO_ARGS=(${SLO:---slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=25})
# (the old protocol ran this with --step-seconds 12 --step-requests 96: sections 9 and 11, burst figures)
SEARCH=(--start-rate ${START_RATE:-8} --resolution ${RESOLUTION:-0.05} --step-seconds ${STEP_S:-120})
C=/tmp/sgl/capacity; mkdir -p $C
i=0
for cfg in "defaults" ${CONFIGS:-max_running_requests=48}; do
  i=$((i + 1)); name=$(echo "$cfg" | tr '=' '-')
  extra=(); [ "$cfg" = defaults ] || extra=(--set "$cfg")
  if [ "$(left)" -lt ${MIN_S:-200} ]; then stamp "skipping $cfg: $(left)s left"; continue; fi
  stamp "== capacity of $cfg ($(left)s left)"
  timeout -s INT -k 30 $(( $(left) - 40 )) python3 -m servetune bench --model "$M3" --hardware "$HW" \
    --sglang-version 0.5.17 --workload single-image-stream "${PINS[@]}" "${extra[@]}" --capacity "${SLO_ARGS[@]}" \
    "${SEARCH[@]}" --run-dir $C/$i-$name --json > $C/$i-$name.json 2> $C/$i-$name.err
  stamp "rc=$?"; tail -12 $C/$i-$name.err
  python3 - "$C/$i-$name.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))["capacity"]
print("capacity", d["request_rate"], "lowest missed", d["lowest_missed"], "steps", len(d["steps"]), "bench_s", round(d["bench_s"]))
PY
done
stop_ours
tar cf - -C /tmp/sgl capacity | xz -6 -T0 > "$OUT/capacity.tar.xz"
pack_cache
ls -la "$OUT"
