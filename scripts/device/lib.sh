# Sourced by the device entry points (scripts/device/*.sh), ON the lent H200, from the repo root,
# with carry [".sgl", ".whl"]. Sets up Python paths, SGLang 0.5.17 (lean bundle) and the weight-free
# model dir, and makes sure no server we started outlives the call.
#   . scripts/device/lib.sh; dev_setup qwen2_5_vl_3b; ...; (EXIT trap stops our servers, packs $OUT)
# Python path order: /tmp/sgl/site (SGLang bundle, also servetune's pydantic 2.14.4 + pydantic-core 2.50.5:
# one copy, shared) : /tmp/site (.whl: optuna, alembic, sqlalchemy, mako, colorlog, typing-extensions) : repo.
set -uo pipefail
: "${OUT:?OUT must be set (device call)}"
REPO=$PWD
T0=$(date +%s)
STATE=/tmp/sgl/state            # pgids of servers this script family started (also across warm calls)
mkdir -p "$STATE" "$OUT"
# tee ignores INT and TERM (an ignored signal stays ignored across exec): a signal to the whole process group
# (detach.sh stop) must not end the log before the EXIT trap below has stopped our servers; it ends at EOF
exec > >(trap '' INT TERM; exec tee -a "$OUT/run.log") 2>&1

stamp() { echo "[$(date +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }

# Stop every process group recorded in $STATE (ours only), TERM then KILL.
stop_ours() {
  local f pg
  for f in "$STATE"/*.pgid; do
    [ -f "$f" ] || continue
    pg=$(cat "$f")
    # a member that is not a zombie (a SIGKILLed group's zombies wait for a reaper and hold nothing)
    if ps -e -o pgid=,stat= | awk -v g="$pg" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'; then
      stamp "stopping process group $pg ($(basename "$f"))"
      kill -TERM -- "-$pg" 2>/dev/null
      for _ in $(seq 30); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.5; done
      kill -KILL -- "-$pg" 2>/dev/null
    fi
    rm -f "$f"
  done
}

# Caches that make a fresh machine's first server start shorter (flashinfer JIT norm kernel,
# triton kernels, tvm-ffi): restored from .sgl/cache.tar.xz if carried (the last job's), else from the tracked
# scripts/device/jit-cache.tar.xz (session 39's, sm90: a new checkout has no .sgl/, and without caches the first
# launch took 154 s instead of 58); pack_cache saves them to $OUT.
export FLASHINFER_WORKSPACE_BASE=/tmp/sgl/fi
restore_cache() {
  local f
  for f in .sgl/cache.tar.xz scripts/device/jit-cache.tar.xz; do
    [ -f "$f" ] && [ ! -d /tmp/sgl/fi ] || continue
    stamp "restoring JIT caches from $f"
    tar xJf "$f" -C / || stamp "cache restore failed (continuing)"
    return 0
  done
  return 0
}
pack_cache() {
  local dirs=() d
  for d in /tmp/sgl/fi /tmp/sgl/triton /tmp/sgl/tvmffi; do [ -d "$d" ] && dirs+=("${d#/}"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  tar cf - -C / "${dirs[@]}" 2>/dev/null | xz -6 -T0 > "$OUT/cache.tar.xz"
  stamp "cache.tar.xz: $(du -h "$OUT/cache.tar.xz" | cut -f1)"
}

# HW_ARGS: the recorded H200 profile on an H200 (the earlier sections resolved from it); on any other card (an H100
# is lent too) none, so NVML detects the card and the rules and the study's model read the GPU that runs; a dry
# run here (DEV_DRYRUN, no GPU) keeps the H200 profile
H200_PROFILE=$REPO/tests/fixtures/hardware/h200-detected.yaml   # NVML's answers recorded on the lent H200
hardware_args() {
  HW_ARGS=(--hardware "$H200_PROFILE")
  [ -n "${DEV_DRYRUN:-}" ] || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 || HW_ARGS=()
  stamp "hardware: ${HW_ARGS[*]:-NVML detection}"
}

dev_setup() {  # ARCH
  local arch=${1:-qwen2_5_vl_3b}
  if [ -n "${DEV_DRYRUN:-}" ]; then   # here, no GPU: stand-in server, model dirs from $DEV_DRYRUN/<arch>
    export PYTHONPATH=$REPO/.sgl/src SGL_WRAP_MODULE=servetune.testing.standin SGL_MODEL_DIR=$DEV_DRYRUN/$arch
    stamp "DRY RUN: stand-in server, models from $DEV_DRYRUN"; return 0
  fi
  stop_ours                                 # a server left by an earlier (timed-out) call on a warm machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { stamp "wheel install failed"; return 1; }
  # servetune from a snapshot of a commit (.sgl/src, made by scripts/device/snapshot.sh) when there is one:
  # other people's uncommitted edits in the working tree then can't break the call.
  SERVETUNE_SRC=$REPO; [ -f .sgl/src/servetune/__init__.py ] && SERVETUNE_SRC=$REPO/.sgl/src
  export PYTHONPATH=/tmp/site:$SERVETUNE_SRC
  stamp "servetune from $SERVETUNE_SRC ($(cat .sgl/src/COMMIT 2>/dev/null || echo working tree))"
  restore_cache
  # serve.sh clobbers MODE/ARCH and prepends /tmp/sgl/site to PYTHONPATH
  # shellcheck disable=SC1091
  source .sgl/bin/serve.sh env "$arch"
  if [ -n "${GC_WATCH_S:-}" ]; then   # scripts/device/gcwatch: every process logs its collections of GC_WATCH_S s+
    export SERVETUNE_GC_WATCH_S=$GC_WATCH_S PYTHONPATH=$REPO/scripts/device/gcwatch:$PYTHONPATH
    stamp "GC watch: garbage collections of ${GC_WATCH_S} s or more go to each server's log"
  fi
  stamp "setup done: SGL_MODEL_DIR=$SGL_MODEL_DIR PYTHONPATH=$PYTHONPATH"
}

model_dir() {  # ARCH -> builds (if needed) and prints the weight-free model dir
  [ -n "${DEV_DRYRUN:-}" ] && { echo "$DEV_DRYRUN/$1"; return; }
  local m=/tmp/sgl/models/$1
  [ -f "$m/config.json" ] || python3 .sgl/bin/make_dummy_vlm.py "$1" "$m" >/dev/null
  echo "$m"
}

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

# start_sglang NAME PORT DEADLINE_S ARGS... : starts python3 -m sglang.launch_server ARGS in its own
# session (pgid recorded), waits for /health_generate; returns 1 (and stops it) if it dies or misses the deadline.
start_sglang() {
  local name=$1 port=$2 deadline=$3; shift 3
  port_free "$port" || { stamp "port $port is taken before start: refusing"; return 1; }
  setsid python3 -m sglang.launch_server --port "$port" "$@" > "/tmp/sgl/$name.log" 2>&1 < /dev/null &
  local pid=$! t=$(date +%s)
  sleep 0.2
  local pg; pg=$(ps -o pgid= -p "$pid" | tr -d ' '); pg=${pg:-$pid}
  echo "$pg" > "$STATE/$name.pgid"
  stamp "started $name pid $pid pgid $pg: python3 -m sglang.launch_server --port $port $*"
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then stamp "$name died"; tail -40 "/tmp/sgl/$name.log"; return 1; fi
    if curl -sf -m 20 "http://127.0.0.1:$port/health_generate" >/dev/null 2>&1; then
      stamp "$name ready after $(( $(date +%s) - t ))s"; return 0; fi
    if [ $(( $(date +%s) - t )) -gt "$deadline" ]; then
      stamp "$name not ready within ${deadline}s"; tail -40 "/tmp/sgl/$name.log"; stop_ours; return 1; fi
    sleep 2
  done
}

# seconds left of this call's own budget; a detached job's end can be moved by a later call (detach.sh poll
# with JOB_END_IN_S), which writes its epoch second to $DEADLINE_FILE
left() {
  local end; end=$(cat "${DEADLINE_FILE:-/nonexistent}" 2>/dev/null) || end=$(( T0 + ${BUDGET_S:-540} ))
  echo $(( end - $(date +%s) ))
}

on_exit() {
  stop_ours
  stamp "exit; wall $(( $(date +%s) - T0 ))s"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | sed 's/^/gpu memory used after stop: /'
}
trap on_exit EXIT
trap 'stamp "signal: stopping"; exit 130' INT TERM

# dev_begin NAME [ARCH]: the usual start of a device script: a stamp with the GPU, dev_setup, the weight-free model
# dir in M3 and SGLang's base flags in BASE (--model-path M3 + LEAN_ARGS); exits the script if the set-up fails
dev_begin() {
  local arch=${2:-qwen2_5_vl_3b}
  stamp "$1 on $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>/dev/null)"
  dev_setup "$arch" || exit 1
  M3=$(model_dir "$arch")
  BASE=(--model-path "$M3" "${LEAN_ARGS[@]}")
}

# SGLang flags the lean bundle needs (its kernels), with weight-free loading: LEAN_ARGS=(...) after dev_setup
LEAN_ARGS=(--load-format dummy --attention-backend triton --mm-attention-backend triton_attn --sampling-backend pytorch
           --grammar-backend none)
# The pruner's partial figure against the server on port 30000 (scripts/device/partial_windows.py), 768 requests
PARTIAL_WINDOWS="python3 scripts/device/partial_windows.py --url http://127.0.0.1:30000 --workload single-image-stream --requests 768"

# partial_runs NAME COUNT [REQUESTS] [RUN_ROOT]: COUNT runs of $PARTIAL_WINDOWS (REQUESTS per run, default 768) against
# the server on port 30000, each to $OUT/partial-NAME-i.json; with RUN_ROOT, every request's record under RUN_ROOT/NAME-i
partial_runs() {
  local name=$1 count=$2 requests=${3:-768} root=${4:-} i
  for i in $(seq "$count"); do
    [ "$(left)" -gt 90 ] || { stamp "skipping $name-$i: $(left)s left"; break; }
    stamp "partial windows: $name run $i ($requests requests)"
    timeout $(( $(left) - 30 )) $PARTIAL_WINDOWS --requests "$requests" --label "$name-$i" --out "$OUT/partial-$name-$i.json" \
      ${root:+--run-dir "$root/$name-$i"}
  done
}

# config_runs NAME DEADLINE_S COUNT REQUESTS RUN_ROOT [SGLANG FLAGS...]: SGLang with $BASE and FLAGS on port 30000
# (start deadline DEADLINE_S), COUNT partial_runs of REQUESTS (RUN_ROOT: keep every request, may be ""), then stop it
config_runs() {
  local name=$1 deadline=$2 count=$3 requests=$4 root=$5
  shift 5
  if start_sglang "$name" 30000 "$deadline" "${BASE[@]}" "$@"; then partial_runs "$name" "$count" "$requests" "$root"; fi
  stop_ours
}
