#!/bin/bash
# Device calls for issue 5: servetune resolve / tune / launch + bench against real SGLang 0.5.17 on the H200.
#   run(command="STEPS='resolve tune launch8b' TUNE_TRIALS=4 TUNE_CONFIRM=0 bash scripts/device/resolve_tune_launch.sh",
#       carry=[".sgl", ".whl"], timeout_s=590)
# STEPS (in order given): resolve   servetune resolve --sglang-version 0.5.17 for the weight-free 3B and 8B dirs
#                         tune      servetune tune on Qwen2.5-VL-3B, single-image-stream; resumes .sgl/tune/study.db
#                                   (TUNE_FRESH=1: a new study; TUNE_REQUESTS=N: requests per trial; TUNE_LOCAL=N: --local-trials N;
#                                   TUNE_OBJECTIVE=capacity with TUNE_SPACE=scripts/device/space-0.5.17-capacity.yaml: capacity at
#                                   TUNE_SLO_TTFT / TUNE_SLO_TPOT (default p99 TTFT <= 2000 ms, p99 TPOT <= 25 ms), backends searched
#                                   over the lean-bundle-0.5.17.yaml preset; TUNE_SEARCH: the capacity search's options;
#                                   TUNE_BUDGET=480s: --budget, launch no trial the call cannot finish; TUNE_SOAK=300:
#                                   --confirm-soak-seconds; TUNE_NO_RULES=1: one baseline, SGLang's defaults)
#                                   A study longer than one call (issue 20's): copy the call's tune.tar.xz (or its study.db)
#                                   into .sgl/tune/ before the next call (TUNE_RESUME_ONLY=1: stop if there is none); a trial
#                                   cut by the call's end keeps the steps it finished, a confirmation resumes where it stopped.
#                         launch8b  servetune launch of the resolved Qwen3-VL-8B + servetune bench --cross-check on it
# Back in $OUT: run.log, resolve.tar, tune.tar.xz (study.db, tune.json, best.yaml, trial dirs), launch8b.tar.xz, cache.tar.xz
BUDGET_S=${BUDGET_S:-560}
. scripts/device/lib.sh
stamp "resolve_tune_launch STEPS='$STEPS' on $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader)"
dev_setup qwen2_5_vl_3b || exit 1
M3=$(model_dir qwen2_5_vl_3b); M8=$(model_dir qwen3_vl_8b)
HW=$H200_PROFILE   # resolve and launch8b: the recorded H200 profile on any card
hardware_args   # tune: the recorded H200 profile on an H200, else NVML detection
PINS=(--set attention_backend=triton --set mm_attention_backend=triton_attn --set sampling_backend=pytorch
      --set grammar_backend=none --set load_format=dummy)
export SERVETUNE_SGLANG_CMD="bash $REPO/scripts/device/sgl_fast_stop.sh"
ST="python3 -m servetune"
W=/tmp/sgl/p3; mkdir -p $W

step_resolve() {
  mkdir -p $W/resolve
  for m in "$M3" "$M8"; do
    n=$(basename "$m")
    for wl in none single-image-stream; do
      wla=(); [ $wl = none ] || wla=(--workload $wl)
      $ST resolve --sglang-version 0.5.17 --hardware "$HW" --model "$m" "${PINS[@]}" "${wla[@]}" -f json -o $W/resolve/$n-$wl.json
      $ST resolve --sglang-version 0.5.17 --hardware "$HW" --model "$m" "${PINS[@]}" "${wla[@]}" > $W/resolve/$n-$wl.txt 2>&1
    done
    $ST resolve --sglang-version 0.5.17 --hardware "$HW" --model "$m" "${PINS[@]}" --workload single-image-stream -f shell
  done
  tar cf "$OUT/resolve.tar" -C $W resolve
}

step_tune() {
  local T=/tmp/sgl/tune
  [ -n "${TUNE_FRESH:-}" ] && rm -rf $T  # a warm machine keeps an earlier call's study
  mkdir -p $T
  if [ -z "${TUNE_FRESH:-}" ] && [ ! -f $T/study.db ]; then  # a cold machine: the study (and its trials' directories) carried
    if [ -f .sgl/tune/tune.tar.xz ]; then
      tar xJf .sgl/tune/tune.tar.xz -C /tmp/sgl && stamp "resuming study and trial directories from .sgl/tune/tune.tar.xz"
    elif [ -f .sgl/tune/study.db ]; then
      cp .sgl/tune/study.db $T/study.db && stamp "resuming study from .sgl/tune/study.db"
    fi
  fi
  if [ -n "${TUNE_RESUME_ONLY:-}" ] && [ ! -f $T/study.db ]; then stamp "TUNE_RESUME_ONLY: no study to resume"; return 1; fi
  local lim=$(( $(left) - 45 ))
  stamp "servetune tune (trials ${TUNE_TRIALS:-4}, confirm ${TUNE_CONFIRM:-0}), limit ${lim}s"
  local pins=("${PINS[@]}") objective=()
  if [ "${TUNE_OBJECTIVE:-}" = capacity ]; then  # the backends are searched (space-0.5.17-capacity.yaml), not pinned
    # the lean bundle's backends come from a preset under the trials, so both baselines can start
    pins=(--set sampling_backend=pytorch --set grammar_backend=none --set load_format=dummy
          --preset scripts/device/lean-bundle-0.5.17.yaml)
    objective=(--objective capacity --slo "${TUNE_SLO_TTFT:-p99_ttft_ms<=2000}" --slo "${TUNE_SLO_TPOT:-p99_tpot_ms<=25}"
               ${TUNE_SEARCH:---start-rate 12})
  fi
  timeout --foreground -s INT -k 40 $lim $ST tune --model "$M3" "${HW_ARGS[@]}" --sglang-version 0.5.17 --workload single-image-stream \
    "${pins[@]}" "${objective[@]}" --space "${TUNE_SPACE:-scripts/device/space-0.5.17.yaml}" --trials ${TUNE_TRIALS:-4} --confirm ${TUNE_CONFIRM:-0} \
    --storage sqlite:///$T/study.db --study h200-qwen2_5_vl_3b-single-image-stream --run-dir $T \
    --startup-timeout 300 --seed ${TUNE_SEED:-0} ${TUNE_REQUESTS:+--requests $TUNE_REQUESTS} ${TUNE_LOCAL:+--local-trials $TUNE_LOCAL} \
    ${TUNE_BUDGET:+--budget $TUNE_BUDGET} ${TUNE_SOAK:+--confirm-soak-seconds $TUNE_SOAK} ${TUNE_NO_RULES:+--no-rules} --out $T/best.yaml --json > $T/tune-${TUNE_TAG:-a}.json 2> $T/tune-${TUNE_TAG:-a}.err
  stamp "tune rc=$?"; cat $T/tune-${TUNE_TAG:-a}.err | tail -30
  $ST tune report --storage sqlite:///$T/study.db --study h200-qwen2_5_vl_3b-single-image-stream > $T/report-${TUNE_TAG:-a}.txt 2>&1 || true
  tar cf - -C /tmp/sgl tune | xz -6 -T0 > "$OUT/tune.tar.xz"
}

step_launch8b() {
  local L=/tmp/sgl/launch8b; mkdir -p $L
  stamp "servetune launch Qwen3-VL-8B (resolved, single-image-stream facts) on port 30000"
  port_free 30000 || { stamp "port 30000 taken: skipping"; return 1; }
  setsid $ST launch --model "$M8" --hardware "$HW" --sglang-version 0.5.17 --workload single-image-stream "${PINS[@]}" \
    --port 30000 --run-dir $L/run --quiet --stop-grace 10 --startup-timeout 300 > $L/launch.out 2>&1 < /dev/null &
  local pid=$! t=$(date +%s); sleep 0.2
  echo "$(ps -o pgid= -p $pid | tr -d ' ')" > "$STATE/launch8b.pgid"
  while :; do
    kill -0 $pid 2>/dev/null || { stamp "servetune launch exited"; tail -30 $L/launch.out; break; }
    curl -sf -m 20 http://127.0.0.1:30000/health_generate >/dev/null 2>&1 && { stamp "8B ready after $(( $(date +%s) - t ))s"; break; }
    [ $(( $(date +%s) - t )) -gt 320 ] && { stamp "8B not ready in 320 s"; break; }
    sleep 2
  done
  if curl -sf -m 20 http://127.0.0.1:30000/health_generate >/dev/null 2>&1; then
    curl -s -m 20 http://127.0.0.1:30000/server_info > $L/server_info.json
    local n=${XCHECK_N:-384}; [ "$(left)" -lt 260 ] && n=192
    if [ "$(left)" -gt 150 ]; then
      stamp "servetune bench --cross-check on the 8B (-n $n)"
      timeout $(( $(left) - 40 )) $ST bench --url http://127.0.0.1:30000 -w single-image-stream -n $n --cross-check --json \
        --run-dir $L/xcheck > $L/xcheck.json 2> $L/xcheck.err; stamp "cross-check rc=$?"
      head -c 1200 $L/xcheck.json; tail -5 $L/xcheck.err
    fi
  fi
  # SIGTERM, not SIGINT: a background job of a non-interactive shell starts with SIGINT ignored
  stamp "stopping servetune launch (SIGTERM; it stops its server)"
  kill -TERM $pid 2>/dev/null
  for _ in $(seq 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  stamp "servetune launch exit: $(kill -0 $pid 2>/dev/null && echo still running || echo gone)"
  stop_ours
  tail -5 $L/launch.out
  tar cf - -C /tmp/sgl launch8b | xz -6 -T0 > "$OUT/launch8b.tar.xz"
}

declare -A NEED=([resolve]=40 [tune]=${TUNE_MIN_S:-200} [launch8b]=${LAUNCH8B_MIN_S:-280})
for s in ${STEPS:-resolve tune}; do
  if [ "$(left)" -lt "${NEED[$s]:-60}" ]; then stamp "skipping $s: $(left)s left, needs ${NEED[$s]:-60}s"; continue; fi
  stamp "== step $s ($(left)s left)"
  step_$s
done
stop_ours
pack_cache
ls -la "$OUT"
