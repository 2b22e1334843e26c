#!/bin/bash
# Certified capacity on real SGLang 0.5.17 (issue 19): `servetune bench --capacity` with the new protocol's
# defaults (95% confidence, steps up to 120 s, 5 s warm-up span, 30 s backlog window, 300 s soak horizon,
# resolution 5%, a 64-request warm-up wave after each launch) and `servetune bench --soak-seconds`, on the
# weight-free Qwen2.5-VL-3B, single-image-stream (one unique 720p image per request), one launch per item.
#   run(command="PLAN='cap:defaults:12 cap:mrr48:18' bash scripts/device/certified_capacity.sh",
#       carry=[".sgl", ".whl"], timeout_s=598)
# PLAN items, run in order while the call's budget allows (MIN_S seconds left):
#   cap:CONFIG:START[:SEED]        a capacity search of CONFIG from START req/s (sequence seed SEED, default 0)
#   soak:CONFIG:RATE:SECS[:SEED]   a soak of CONFIG at RATE req/s for SECS seconds
# CONFIG: defaults, mrr48 (--max-running-requests 48), or seed51 (issue 20's seed: 51 and a 152-wide decode graph). SLO (env SLO): p99 TTFT <= 2000 ms, p99 TPOT <= 25 ms.
# Back in $OUT: run.log, certified.tar.xz (every run dir with its steps, plots, telemetry; --json outputs), cache.tar.xz
BUDGET_S=${BUDGET_S:-580}
. scripts/device/lib.sh
stamp "certified_capacity on $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader)"
stamp "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"  # lent machines differ
dev_setup qwen2_5_vl_3b || exit 1
M3=$(model_dir qwen2_5_vl_3b)
HW=$REPO/tests/fixtures/hardware/h200-detected.yaml
PINS=(--set attention_backend=triton --set mm_attention_backend=triton_attn --set sampling_backend=pytorch
      --set grammar_backend=none --set load_format=dummy)
export SERVETUNE_SGLANG_CMD="bash $REPO/scripts/device/sgl_fast_stop.sh"
SLO_ARGS=(${SLO:---slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=25})
C=/tmp/sgl/certified; mkdir -p $C
n=$(ls $C | grep -c '\.json$' || true)
for item in ${PLAN:?set PLAN}; do
  IFS=: read -r kind cfg a b c <<< "$item"
  case $cfg in
    mrr48) extra=(--set max_running_requests=48) ;;
    seed51) extra=(--set max_running_requests=51 --set cuda_graph_max_bs_decode=152) ;;  # issue 20's seed
    *) extra=() ;;
  esac
  if [ "$(left)" -lt "${MIN_S:-200}" ]; then stamp "skipping $item: $(left)s left"; continue; fi
  n=$((n + 1)); name=$(printf '%02d' $n)-$kind-$cfg
  case $kind in
    cap) what=(--capacity --start-rate "$a" --seed "${b:-0}") ;;
    soak) what=(--soak-seconds "$b" --request-rate "$a" --seed "${c:-0}") ;;
    *) stamp "unknown item $item"; continue ;;
  esac
  stamp "== $name: ${what[*]} ($(left)s left)"
  timeout -s INT -k 20 $(( $(left) - 25 )) python3 -m servetune bench --model "$M3" --hardware "$HW" \
    --sglang-version 0.5.17 --workload single-image-stream "${PINS[@]}" "${extra[@]}" "${SLO_ARGS[@]}" \
    "${what[@]}" --run-dir $C/$name --json > $C/$name.json 2> $C/$name.err
  stamp "rc=$?"; tail -25 $C/$name.err
  python3 - "$C/$name.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
t = d.get("timings") or {}
if "capacity" in d:
    c = d["capacity"]
    print("capacity", c["request_rate"], "bracket", c["lowest_missed"], "certified", c["certified"], "steps",
          len(c["steps"]), "bench_s", round(c["bench_s"]), "start_s", t.get("startup_s"), "note", c["note"])
    for s in c["steps"]:
        print("  step", s["index"], round(s["rate"], 3), s["state"], round(s["at_s"], 1), s["judged"], s["why"][:150])
else:
    s = d["soak"]
    print("soak", s["rate"], s["state"], round(s["at_s"], 1), s["why"][:200], s["latency_ms"], "start_s", t.get("startup_s"))
PY
done
stop_ours
tar cf - -C /tmp/sgl certified | xz -6 -T0 > "$OUT/certified.tar.xz"
pack_cache
ls -la "$OUT"
