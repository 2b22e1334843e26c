#!/bin/bash
# Device call 1 (issue 2 item 2, issue 3 fixtures): real NVML facts through servetune, then SGLang 0.5.17
# (lean bundle, weight-free Qwen2.5-VL-3B) started as shipped by serve.sh's flags, its endpoints recorded,
# one small sglang.bench_serving image run (JSONL sample for parser tests), server stopped by its pgid.
# Run:  run(command="bash scripts/device/endpoints_and_nvml.sh", carry=[".sgl", ".whl"], timeout_s=570)
# Back in $OUT: run.log, h200.yaml, hardware.json, nvml-h200.json, sglang-0.5.17-image.jsonl,
#               endpoints.tar (server_info, model_info, v1_models, server log, bench log, timing, nvml raw), cache.tar.xz
BUDGET_S=${BUDGET_S:-540}
. scripts/device/lib.sh
stamp "endpoints_and_nvml start on $(hostname); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
dev_setup qwen2_5_vl_3b || exit 1
E=/tmp/sgl/endpoints; mkdir -p $E
nvidia-smi -q > $E/nvidia-smi-q.txt 2>&1
python3 scripts/device/nvml_dump.py $E/nvml-raw.json > /dev/null 2>$E/nvml-raw.err || stamp "nvml_dump failed"

stamp "servetune hardware"
python3 -m servetune hardware --help > $E/servetune-hardware-help.txt 2>&1
python3 -m servetune hardware --json --save "$OUT/h200.yaml" > "$OUT/hardware.json" 2> $E/hardware.err; echo "rc=$?"
python3 -m servetune hardware > $E/hardware-table.txt 2>&1
python3 -m servetune hardware --record-nvml "$OUT/nvml-h200.json" > $E/record-nvml.out 2>&1; echo "rc=$?"
cat "$OUT/hardware.json" $E/hardware.err; head -c 1500 "$OUT/nvml-h200.json" 2>/dev/null; echo

M=$SGL_MODEL_DIR
stamp "start SGLang 0.5.17 (serve.sh's flags) on $M"
if start_sglang server 30000 300 --model-path "$M" --load-format dummy \
     --attention-backend triton --mm-attention-backend triton_attn --sampling-backend pytorch --grammar-backend none; then
  for ep in server_info get_server_info model_info get_model_info v1/models; do
    curl -s -m 20 "http://127.0.0.1:30000/$ep" > "$E/$(echo $ep | tr / _).json"; echo "$ep: $(head -c 300 "$E/$(echo $ep | tr / _).json")"
  done
  curl -s -m 20 http://127.0.0.1:30000/version > $E/version.json
  stamp "bench_serving (64 unique 720p JPEGs, 128/128 tokens, max concurrency 32)"
  t=$(date +%s.%N)
  BENCH_TIMING_OUT=$E/bench-timing.json timeout $(( $(left) - 60 )) python3 scripts/device/bench_timed.py \
    --backend sglang-oai-chat --dataset-name image --image-count 1 --image-resolution 720p --image-format jpeg \
    --random-input-len 128 --random-output-len 128 --num-prompts 64 --max-concurrency 32 \
    --output-file "$OUT/sglang-0.5.17-image.jsonl" --base-url http://127.0.0.1:30000 --seed 20261129 2>&1 | tee $E/bench.log | grep -v "it/s\]$"
  stamp "bench wall $(python3 -c "import time;print(round(time.time()-$t,1))")s; timing: $(cat $E/bench-timing.json 2>/dev/null | tr -d '\n ')"
  curl -s -m 20 http://127.0.0.1:30000/server_info > $E/server_info_after.json
  # servetune's bench on the same server: SGLang's client then the builtin one, same workload shape
  if [ "$(left)" -gt 200 ]; then
    stamp "servetune bench --cross-check (single-image-stream, 384 requests at 64 in flight)"
    timeout $(( $(left) - 40 )) python3 -m servetune bench --url http://127.0.0.1:30000 -w single-image-stream \
      --cross-check --json --run-dir /tmp/sgl/xcheck > /tmp/sgl/xcheck.json 2> /tmp/sgl/xcheck.err; echo "rc=$?"
    cat /tmp/sgl/xcheck.json | head -c 3000; tail -20 /tmp/sgl/xcheck.err
    stamp "cross-check done"
  else
    stamp "skipping cross-check: only $(left)s left"
  fi
fi
stop_ours
cp /tmp/sgl/server.log $E/ 2>/dev/null
tar cf "$OUT/endpoints.tar" -C /tmp/sgl endpoints server.log xcheck xcheck.json xcheck.err 2>/dev/null
pack_cache
ls -la "$OUT"
