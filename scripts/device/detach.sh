#!/bin/bash
# Runs a device script as one job that outlives the call, so a plan longer than one call's 600 s runs on ONE
# machine, start to end (a server and the steps measured on it are not cut at call boundaries):
#   run(command="JOB='PLAN=\"launch:seed51 ucap:16:4:300 stop\" bash scripts/device/certified_capacity.sh' \
#                JOB_BUDGET_S=1600 bash scripts/device/detach.sh start", carry=[".sgl", ".whl"], timeout_s=598)
#   run(command="bash scripts/device/detach.sh poll", timeout_s=598)    # each next call, at once (warm machine)
# start: copies the repo (with .sgl and .whl) to /tmp/sgl/job/repo and runs JOB there in a new session
# (setsid: the device keeps such a process until the machine goes back), with OUT=/tmp/sgl/job/out and
# BUDGET_S=JOB_BUDGET_S, then polls. poll: waits up to WAIT_S (default 570) for the job to end, copying
# into this call's $OUT, every 30 s and at the end, the job's run.log and snapshots of /tmp/sgl/certified and
# /tmp/sgl/tune (resolve_tune_launch.sh's study) without server logs (certified-snap.tar.xz, tune-snap.tar.xz),
# so a call cut by the session's budget still brings back what was measured; once the job has ended, everything
# it left in its OUT too. It prints JOB RUNNING or JOB DONE. The machine goes back when idle: each poll must
# follow the last within its warm window.
# The job stops its own servers at its end (lib.sh's stop_ours); `stop` ends the job's process group.
# JOB_END_IN_S=N on a poll moves the job's budget to end N s from now (lib.sh's `left` reads it), e.g. once
# the first call's reply tells how much device time the machine's start left.
set -uo pipefail
: "${OUT:?OUT must be set (device call)}"
J=/tmp/sgl/job
mode=${1:?start, poll or stop}
snap() {
  cp -f "$J/out/run.log" "$OUT/run.log" 2>/dev/null
  local d; for d in certified tune; do   # certified_capacity.sh's runs, resolve_tune_launch.sh's study
    [ -d /tmp/sgl/$d ] && tar cf - -C /tmp/sgl --exclude server.log --exclude '*.log.gz' $d 2>/dev/null \
      | xz -3 -T0 > "$OUT/$d-snap.tar.xz.part" && mv -f "$OUT/$d-snap.tar.xz.part" "$OUT/$d-snap.tar.xz"
  done
}
running() { [ -f "$J/pgid" ] && kill -0 -- "-$(cat "$J/pgid")" 2>/dev/null; }
case $mode in
  start)
    running && { echo "a job is running (pgid $(cat "$J/pgid")): poll it or stop it"; exit 1; }
    rm -rf "$J"; mkdir -p "$J/out" /tmp/sgl
    cp -a "$PWD" "$J/repo"
    # the job's own shell writes its pid, its new session's and process group's id (setsid): the pid of a
    # subshell started here would be in this call's group, which ends with the call
    ( cd "$J/repo" && OUT=$J/out BUDGET_S=${JOB_BUDGET_S:?} DEADLINE_FILE=$J/deadline exec setsid bash -c 'echo $$ > "$1/pgid"; eval "$2"' \
        job "$J" "${JOB:?}" > "$J/job.out" 2>&1 < /dev/null & )
    for _ in $(seq 50); do [ -s "$J/pgid" ] && break; sleep 0.1; done
    [ -s "$J/pgid" ] || { echo "the job did not start: $(tail -5 "$J/job.out")"; exit 1; }
    echo "job started: pgid $(cat "$J/pgid") (its own session), budget ${JOB_BUDGET_S}s"
    exec bash "$0" poll ;;
  poll)
    t0=$(date +%s); wait_s=${WAIT_S:-570}
    if [ -n "${JOB_END_IN_S:-}" ]; then   # the job must end within JOB_END_IN_S s from now
      echo $(( t0 + JOB_END_IN_S )) > "$J/deadline"
      echo "job now ends in ${JOB_END_IN_S}s"
    fi
    while running && [ $(( $(date +%s) - t0 )) -lt "$wait_s" ]; do
      sleep 30; snap
    done
    snap
    if running; then echo "JOB RUNNING"; tail -15 "$J/out/run.log"
    else cp -rf "$J/out/." "$OUT/"; echo "JOB DONE"; tail -40 "$J/out/run.log"; tail -5 "$J/job.out"; fi
    ls -la "$OUT" ;;
  stop)
    running && kill -TERM -- "-$(cat "$J/pgid")"
    for _ in $(seq 120); do running || break; sleep 0.5; done   # its EXIT trap stops its servers (15 s each at most)
    running && kill -KILL -- "-$(cat "$J/pgid")"
    snap; echo "job stopped" ;;
esac
