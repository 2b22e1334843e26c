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
# or, on one server that several items share (as a user would: `servetune launch`, then `bench --url`):
#   launch:CONFIG                  `servetune launch` of CONFIG on port 30000, in its own session (stopped by `stop`)
#   ucap:START:SEED[:SOAK_S[:TRIES]] `bench --url --capacity` from START, then (SOAK_S) its soaks: at the capacity
#                                  found and, while one fails, a resolution lower, up to TRIES (default 1) soaks;
#                                  START `=F`: from the capacity this CONFIG's last ucap found, `--bracket-factor F`
#                                  (a second round that starts at the edge: 4-5 steps, not 8)
#   usoak:RATE:SECS[:SEED]         `bench --url --soak-seconds SECS` at RATE; RATE `xF`: F times the last ucap's capacity,
#                                  `@CONFIG`: the capacity CONFIG's last ucap found (the baseline at the winner's rate)
#                                  (skipped when fewer than SECS + 40 s are left: a cut soak has no verdict)
#   stop                           stops the launched server
#   freeze                         POST /freeze_gc to the launched server (SGLang freezes the GC of its processes)
# CAP_ARGS (env): more `bench --capacity` options for every search, e.g. CAP_ARGS='--bracket-factor 1.25'.
# CONFIG: defaults, mrr48 (--max-running-requests 48), seed51 (issue 20's seed: 51 and a 152-wide decode graph), or
# limNgG (a running limit of N and a G-wide decode graph, e.g. lim54g152: a model's pick), gcA_B_C (--gc-threshold A B C,
# which SGLang 0.5.17 sets in its HTTP/tokenizer process only). SLO (env SLO): p99 TTFT <= 2000 ms, p99 TPOT <= 25 ms.
# Back in $OUT: run.log, certified.tar.xz (every run dir with its steps, plots, telemetry; --json outputs), cache.tar.xz
BUDGET_S=${BUDGET_S:-580}
. scripts/device/lib.sh
stamp "certified_capacity on $(nvidia-smi --query-gpu=name,uuid,driver_version,memory.used --format=csv,noheader)"
stamp "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"  # lent machines differ
dev_setup qwen2_5_vl_3b || exit 1
M3=$(model_dir qwen2_5_vl_3b)
hardware_args
PINS=(--set attention_backend=triton --set mm_attention_backend=triton_attn --set sampling_backend=pytorch
      --set grammar_backend=none --set load_format=dummy)
export SERVETUNE_SGLANG_CMD="bash $REPO/scripts/device/sgl_fast_stop.sh"
SLO_ARGS=(${SLO:---slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=25})
C=/tmp/sgl/certified; mkdir -p $C
# the next item's number follows the highest already in $C (a second job on a warm machine adds to the first's)
n=$(ls $C | sed -n 's/^\([0-9][0-9]*\)-.*/\1/p' | sort -n | tail -1); n=$((10#${n:-0}))
URL=http://127.0.0.1:30000
LAUNCH=""    # the run dir of the server `launch` started (its server.log is the telemetry's source)
LASTCAP=""   # the capacity the last ucap found
LCFG=""      # the config the launched server runs
declare -A CAPOF   # CONFIG -> the capacity its last ucap found
cfg_flags() {
  case $1 in
    mrr48) extra=(--set max_running_requests=48) ;;
    seed51) extra=(--set max_running_requests=51 --set cuda_graph_max_bs_decode=152) ;;  # issue 20's seed
    lim*g*) local r=${1#lim}; extra=(--set "max_running_requests=${r%%g*}" --set "cuda_graph_max_bs_decode=${r#*g}") ;;
    gc*_*_*) local g=${1#gc}; extra=(--set "gc_threshold=[${g//_/, }]") ;;  # gc700_10_1000: --gc-threshold 700 10 1000
    *) extra=() ;;
  esac
}
# launch_server NAME CONFIG: `servetune launch` in a new session (pgid in $STATE: stop_ours ends it), ready or 1
launch_server() {
  port_free 30000 || { stamp "port 30000 is taken before launch: refusing"; return 1; }
  cfg_flags "$2"
  setsid python3 -m servetune launch --model "$M3" "${HW_ARGS[@]}" --sglang-version 0.5.17 \
    --workload single-image-stream "${PINS[@]}" "${extra[@]}" --run-dir "$C/$1" > "$C/$1.out" 2>&1 < /dev/null &
  local pid=$! t=$(date +%s) pg
  sleep 0.2; pg=$(ps -o pgid= -p "$pid" | tr -d ' '); echo "${pg:-$pid}" > "$STATE/$1.pgid"
  stamp "servetune launch $2: pid $pid pgid ${pg:-$pid} (${extra[*]})"
  while :; do
    kill -0 "$pid" 2>/dev/null || { stamp "launch died"; tail -30 "$C/$1.out"; return 1; }
    curl -sf -m 20 "$URL/health_generate" >/dev/null 2>&1 && { stamp "ready after $(( $(date +%s) - t ))s"; LAUNCH=$C/$1; LCFG=$2; return 0; }
    [ "$(left)" -gt 60 ] || { stamp "not ready with $(left)s left"; stop_ours; return 1; }
    sleep 2
  done
}
for item in ${PLAN:?set PLAN}; do
  IFS=: read -r kind cfg a b c <<< "$item"
  cfg_flags "$cfg"
  case $kind in
    stop) stamp "== stop"; stop_ours; LAUNCH=""; continue ;;
    freeze)   # SGLang's POST /freeze_gc: gc.freeze() in its HTTP/tokenizer, scheduler and detokenizer processes
      [ -n "$LAUNCH" ] || { stamp "skipping freeze: no launched server"; continue; }
      stamp "== freeze: $(curl -sS -m 30 -X POST "$URL/freeze_gc" 2>&1 | head -c 200)"; continue ;;
  esac
  if [ "$(left)" -lt "${MIN_S:-200}" ]; then stamp "skipping $item: $(left)s left"; continue; fi
  n=$((n + 1)); name=$(printf '%02d' $n)-$kind-$cfg
  served=(--model "$M3" "${HW_ARGS[@]}" --sglang-version 0.5.17 "${PINS[@]}" "${extra[@]}")
  case $kind in
    cap) what=(--capacity --start-rate "$a" --seed "${b:-0}" ${CAP_ARGS:-}) ;;
    soak) what=(--soak-seconds "$b" --request-rate "$a" --seed "${c:-0}") ;;
    launch) name=$(printf '%02d' $n)-launch-$cfg; launch_server "$name" "$cfg"; continue ;;
    ucap|usoak)
      [ -n "$LAUNCH" ] || { stamp "skipping $item: no launched server"; continue; }
      served=(--url "$URL" --server-log "$LAUNCH/server.log"); name=$(printf '%02d' $n)-$kind
      if [ "$kind" = ucap ]; then   # here cfg is START, a SEED, b SOAK_S, c TRIES
        start=$cfg again=()
        if [ "${start#=}" != "$start" ]; then
          [ -n "${CAPOF[$LCFG]:-}" ] || { stamp "skipping $item: $LCFG has no capacity yet"; continue; }
          again=(--bracket-factor "${start#=}"); start=${CAPOF[$LCFG]}
        fi
        what=(--capacity --start-rate "$start" --seed "${a:-0}" ${CAP_ARGS:-} "${again[@]}")
        [ -n "${b:-}" ] && what+=(--soak-seconds "$b" --soak-tries "${c:-1}")
      else                          # here cfg is RATE (or xF), a SECS, b SEED
        rate=$cfg
        if [ "${rate#x}" != "$rate" ]; then
          [ -n "$LASTCAP" ] || { stamp "skipping $item: no capacity to scale"; continue; }
          rate=$(python3 -c "print(round(${rate#x} * $LASTCAP, 3))")
        elif [ "${rate#@}" != "$rate" ]; then
          [ -n "${CAPOF[${rate#@}]:-}" ] || { stamp "skipping $item: ${rate#@} has no capacity yet"; continue; }
          rate=${CAPOF[${rate#@}]}
        fi
        what=(--soak-seconds "$a" --request-rate "$rate" --seed "${b:-0}")
        [ "$(left)" -ge $(( a + 40 )) ] || { stamp "skipping $item: $(left)s left"; continue; }
      fi ;;
    *) stamp "unknown item $item"; continue ;;
  esac
  stamp "== $name: ${what[*]} ($(left)s left)"
  timeout --foreground -s INT -k 20 $(( $(left) - 25 )) python3 -m servetune bench "${served[@]}" --workload single-image-stream \
    "${SLO_ARGS[@]}" "${what[@]}" --run-dir $C/$name --json > $C/$name.json 2> $C/$name.err
  stamp "rc=$?"; tail -25 $C/$name.err
  if [ "$kind" = ucap ]; then
    LASTCAP=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capacity']['request_rate'] or '')" "$C/$name.json" 2>/dev/null)
    [ -n "$LASTCAP" ] && CAPOF[$LCFG]=$LASTCAP
  fi
  python3 - "$C/$name.json" "$C/$name" <<'PY' || true
import json, pathlib, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:  # cut by the budget (SIGINT): no --json; the verdicts of the steps it finished
    print("no result (cut); finished steps:")
    for v in sorted(pathlib.Path(sys.argv[2]).glob("steps/*/verdict.json")):
        s = json.loads(v.read_text())
        print("  step", v.parent.name, s["state"], round(s["at_s"], 1), s["judged"], s["why"][:150])
    sys.exit(0)
t = d.get("timings") or {}
if "capacity" in d:
    c = d["capacity"]
    print("capacity", c["request_rate"], "bracket", c["lowest_missed"], "certified", c["certified"], "steps",
          len(c["steps"]), "bench_s", round(c["bench_s"]), "start_s", t.get("startup_s"), "note", c["note"])
    for s in c["steps"]:
        print("  step", s["index"], round(s["rate"], 3), s["state"], round(s["at_s"], 1), s["judged"], s["why"][:150],
              "lateness p99", s.get("lateness_p99_ms"), "loop lag max", s.get("loop_lag_max_ms"))
    for s in c.get("soaks") or []:
        print("  soak", s["rate"], s["state"], round(s["at_s"], 1), s["why"][:200], s.get("latency_ms"),
              "lateness p99", s.get("lateness_p99_ms"), "loop lag max", s.get("loop_lag_max_ms"))
else:
    s = d["soak"]
    print("soak", s["rate"], s["state"], round(s["at_s"], 1), s["why"][:200], s["latency_ms"], "start_s", t.get("startup_s"),
          "lateness p99", s.get("lateness_p99_ms"), "loop lag max", s.get("loop_lag_max_ms"))
PY
done
stop_ours
tar cf - -C /tmp/sgl certified | xz -6 -T0 > "$OUT/certified.tar.xz"
pack_cache
ls -la "$OUT"
