"""Launch SGLang with a resolved config, know when it serves and what it chose, stop it cleanly.

This package starts and stops servers; it knows neither benchmarks nor tuning. One measurement
(start, benchmark, record, stop) is `servetune.runner`'s job (`SglangRunner.measure`).

API (stable for `servetune launch`, `servetune bench`, the runner and the tuner)::

    from servetune.launch import LaunchOptions, start_server

    opts = LaunchOptions(sglang_cmd="python -m sglang.launch_server", startup_timeout_s=600)
    with start_server(res.argv(), res.env(), res.requested(), opts) as server:
        server.url            # "http://127.0.0.1:2xxxx" (a free port was reserved)
        server.diff           # ServerInfoDiff: requested vs effective per field (/server_info)
        server.check_alive()  # raises a classified LaunchError if it died
    # leaving the block: SIGTERM to the server's process group, grace, SIGKILL; port released

- `LaunchOptions` (`_options`): command prefix (`sglang_cmd`, else `$SERVETUNE_SGLANG_CMD`, else
  `python -m sglang.launch_server`; the argv is appended, then `--host H --port P`), host, port
  (None = a free port), start-up timeout, stop grace, run_dir, CUDA_VISIBLE_DEVICES, extra env,
  and `watched_fields`: fields not requested whose `/server_info` value the diff records as
  `resolved` (the caller names them; the runner passes `servetune.runner.WATCHED_FIELDS`).
- `check_launch(options)` (`_server`): refuses a command that cannot run or an explicit port in
  use, before anything is created (`start_server` does the same before making its run directory).
- `start_server(argv, env, requested, options) -> ServerHandle` (`_server`): starts the command
  under its guard (`_spawn`, `_guard`) in its own process group (a new session, an argv list,
  never a shell), logs to `run_dir/server.log`, writes `argv.txt`, `env.json`, `server.pid` and
  `server.json` (the identity: pid, group, start time, port, model, the starting servetune), polls
  `/health_generate` until 200 (failing fast when the process exits), then reads `/server_info`,
  checks that the answering server is ours (`_identity`: nothing listened on the port before;
  the process is alive; the port's listener, from /proc, and any reported pid are in our process
  group, or else started after our server, as a container proxy does, never before it, as a
  server left from an earlier run does; reported port and model_path match), and writes
  `server_info.json` and `server_info_diff.json`. Raises `servetune.errors.LaunchError` with
  `.failure` in {oom, crash, startup_timeout, port_in_use, bad_command, wrong_server},
  `.log_tail`, `.exit_code`; nothing is left running when it raises.
- `ServerHandle`: `.url .pid .pgid .port .log_path .run_dir .server_info .diff .startup_s
  .stop_s .started_at .ready_at .alive .exit_code`, `.startup_phases()`, `.check_alive()`,
  `.failure()`, `.log_tail()`, `.get_json(path)`, `.stop()` (idempotent: SIGTERM to our group only,
  grace, SIGKILL, reap, release the port, then wait for NVML to show GPU memory released).
- No server outlives servetune: the guard (`_guard.py`, stdlib only, run by path) is the server's
  parent; it gives the server PDEATHSIG (set by the single-threaded guard, so it does not fire when
  a servetune worker thread exits) and, when servetune dies by any signal, stops the server's
  group (SIGTERM, 3 s, SIGKILL) and removes the port's lock file. It exits as the server did.
- Live servers (`_registry`): stopped at exit; SIGTERM and SIGHUP of the parent unwind through
  them (`install_signal_handlers`); a forked child forgets its parent's.
  `reap_orphan_server(run_dir)` kills a server of `run_dir` whose parent died by SIGKILL and whose
  guard could not stop it (the tuner calls it for a lost worker's trial).
- Recorded servers (`_record`): `find_servers(root)` (live servers under a runs directory, each
  `running` or `orphan`), `live_server(run_dir)`, `stop_recorded_server(run_dir, grace_s)`; a
  process is ours only if it matches `server.json` (`servetune runs` / `servetune stop`).
- `classify_failure(exit_code, log_text)` (`_failures`): the failure class from exit status and log markers.
- Ports (`_ports`): `reserve_free_port(host)` (flock reservation + bind check; the lock file is
  removed on release).
- Run directories (`_rundir`): `new_run_dir(base, kind)`, `default_run_dir(kind)` (under
  `$SERVETUNE_RUNS_DIR`, default `./runs`), `write_facts`, `write_resolved`, `write_argv`,
  `write_env`, `write_metrics`, `write_server_info_diff`, `write_json`; `redact_argv` /
  `redact_env` hide HF_TOKEN, *_TOKEN, *_KEY, *API_KEY* and `--api-key` values.
- GPUs (`_gpu`): `wait_gpu_memory_released(pids, devices, baseline_mib=...)` (NVML, imported
  lazily; a no-op without it).
- Start-up phases (`_phases`): `ServerHandle.startup_phases()` / `read_startup_phases(log, started_at=,
  ready_at=)` -> `StartupPhases` (imports, processes, engine with weights / KV cache / CUDA graphs,
  warm-up, ready), from the milestones and exact figures in SGLang's log.
- Scheduler telemetry (`_telemetry`): `parse_scheduler_line(line)` (SGLang's `Prefill batch` /
  `Decode batch` log lines as records: kind, ts, normalized fields; None for other lines),
  `read_scheduler_lines(path, offset)` (tails a growing log), `write_telemetry(path, records, t0)`
  (JSONL with `t`; `read_telemetry(path)` reads it back), `TELEMETRY_FIELDS`.
- Internals: `_http` (the stdlib HTTP probe), `_proc` (process groups, /proc listeners, start times).
"""

from __future__ import annotations

from servetune.launch._diff import FieldDiff, ServerInfoDiff, diff_server_info
from servetune.launch._failures import FailureClass, classify_failure, read_tail
from servetune.launch._foreground import run_foreground
from servetune.launch._gpu import gpu_memory_used_mib, wait_gpu_memory_released
from servetune.launch._options import LaunchOptions, dir_problem
from servetune.launch._phases import StartupPhases, read_startup_phases, startup_phases
from servetune.launch._ports import PortReservation, port_is_free, reserve_free_port
from servetune.launch._record import (
    LiveServer,
    ServerRecord,
    find_servers,
    live_server,
    read_server_record,
    stop_recorded_server,
)
from servetune.launch._registry import install_signal_handlers, reap_orphan_server
from servetune.launch._rundir import (
    RUNS_DIR_ENV,
    default_run_dir,
    make_dir,
    new_run_dir,
    redact_argv,
    redact_env,
    runs_root,
    write_argv,
    write_env,
    write_facts,
    write_json,
    write_metrics,
    write_resolved,
    write_server_info_diff,
)
from servetune.launch._server import ServerHandle, check_launch, start_server
from servetune.launch._telemetry import (
    TELEMETRY_FIELDS,
    parse_scheduler_line,
    read_scheduler_lines,
    read_telemetry,
    timed_records,
    write_telemetry,
)

__all__ = [
    "dir_problem",
    "RUNS_DIR_ENV",
    "TELEMETRY_FIELDS",
    "FailureClass",
    "FieldDiff",
    "LaunchOptions",
    "LiveServer",
    "PortReservation",
    "ServerHandle",
    "ServerInfoDiff",
    "ServerRecord",
    "StartupPhases",
    "check_launch",
    "classify_failure",
    "default_run_dir",
    "diff_server_info",
    "find_servers",
    "gpu_memory_used_mib",
    "install_signal_handlers",
    "live_server",
    "make_dir",
    "new_run_dir",
    "parse_scheduler_line",
    "port_is_free",
    "read_scheduler_lines",
    "read_telemetry",
    "timed_records",
    "read_server_record",
    "read_startup_phases",
    "read_tail",
    "reap_orphan_server",
    "run_foreground",
    "redact_argv",
    "redact_env",
    "runs_root",
    "reserve_free_port",
    "start_server",
    "startup_phases",
    "stop_recorded_server",
    "wait_gpu_memory_released",
    "write_argv",
    "write_env",
    "write_facts",
    "write_json",
    "write_metrics",
    "write_resolved",
    "write_server_info_diff",
    "write_telemetry",
]
