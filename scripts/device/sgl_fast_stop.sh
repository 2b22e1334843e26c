#!/bin/bash
# --sglang-cmd prefix for device runs:  SERVETUNE_SGLANG_CMD="bash scripts/device/sgl_fast_stop.sh"
# Runs `python3 -m sglang.launch_server ARGS` (same python as the launcher's default on the device image).
# Why: SGLang 0.5.17 did not exit within 15 s of SIGTERM on the H200 (endpoints_and_nvml.sh, call 1), so every stop by the launcher
# would wait its full 30 s grace before SIGKILL. Here, on SIGTERM/SIGINT the server gets 5 s, then this
# process group (the one the launcher created for us, and only it) is SIGKILLed. Our pgid is recorded in
# /tmp/sgl/state so the device scripts can end a server that outlived its launcher.
mkdir -p /tmp/sgl/state
PG=$(ps -o pgid= -p $$ | tr -d ' ')
echo "$PG" > /tmp/sgl/state/wrap-$$.pgid
python3 -m "${SGL_WRAP_MODULE:-sglang.launch_server}" "$@" &   # SGL_WRAP_MODULE=servetune.testing.standin for a dry run here
child=$!
on_term() {
  kill -TERM "$child" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
  rm -f /tmp/sgl/state/wrap-$$.pgid
  kill -KILL -- "-$PG" 2>/dev/null
}
trap on_term TERM INT
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
rm -f /tmp/sgl/state/wrap-$$.pgid
exit $rc
