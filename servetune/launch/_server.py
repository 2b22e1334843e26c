"""Start an SGLang server (or anything with its argv and endpoints), know it serves, stop it cleanly."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servetune import interrupts
from servetune.errors import LaunchError
from servetune.launch import _registry
from servetune.launch._diff import ServerInfoDiff, diff_server_info
from servetune.launch._failures import (
    FAILURE_HELP,
    FAILURE_PHRASE,
    classify_failure,
    describe_exit,
    is_stop,
    read_tail,
)
from servetune.launch._gpu import visible_gpu_indices
from servetune.launch._http import connect_host, http_get
from servetune.launch._identity import identity_problems
from servetune.launch._options import LaunchOptions, argv_value, check_command, strip_host_port
from servetune.launch._phases import StartupPhases, read_startup_phases
from servetune.launch._ports import PortReservation, reserve_launch_port
from servetune.launch._proc import any_running, create_time, descendants, group_alive, signal_group
from servetune.launch._record import SERVER_ID_ENV, new_server_id, read_stop_request, write_server_record
from servetune.launch._rundir import (
    RedactedLog,
    default_run_dir,
    make_dir,
    write_argv,
    write_env,
    write_json,
    write_server_info_diff,
)
from servetune.launch._spawn import spawn_guarded

__all__ = ["ServerHandle", "check_launch", "start_server"]

log = logging.getLogger("servetune.launch")

LOG_ENV: dict[str, str] = {"SGLANG_LOG_MS": "1"}
"""Set for every server (and written to `env.json`) unless servetune's own environment, the resolved env or
`extra_env` sets it: SGLang (0.5.10 on) then stamps its log lines to the millisecond, so the telemetry's times
and the start-up phases are SGLang's own clock (else whole seconds, each second's lines spread evenly)."""


class ServerHandle:
    """A started server: its process group, port reservation, log and `/server_info` diff.

    Use as a context manager (`with start_server(...) as server:`); `stop()` is idempotent.
    """

    def __init__(
        self,
        proc: subprocess.Popen,
        *,
        pid: int | None = None,
        reservation: PortReservation | None,
        host: str,
        port: int,
        run_dir: Path,
        log_path: Path,
        options: LaunchOptions,
        headers: dict[str, str],
    ) -> None:
        self.proc = proc
        self.pid = proc.pid if pid is None else pid
        self.pgid = self.pid
        self.host = host
        self.port = port
        self.run_dir = run_dir
        self.log_path = log_path
        self.options = options
        self.server_info: dict[str, Any] = {}
        self.diff: ServerInfoDiff = ServerInfoDiff(fields=[])
        self.startup_s: float | None = None
        self.stop_s: float | None = None
        self.started_at: float | None = None
        """When it was spawned (epoch seconds)."""
        self.ready_at: float | None = None
        """When its health check first answered 200 (epoch seconds)."""
        self._reservation = reservation
        self._headers = headers
        self._stop_lock = threading.RLock()
        self._stopped = False
        self._gpu_baseline: dict[int, float] | None = None
        self._create_time = create_time(self.pid)
        self.server_log: RedactedLog | None = None
        self.server_id: str | None = None
        """`SERVETUNE_SERVER_ID` of the server (its `server.json`)."""

    def __repr__(self) -> str:
        return f"ServerHandle(pid={self.pid}, url={self.url!r}, run_dir={str(self.run_dir)!r})"

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. `http://127.0.0.1:31234`."""
        host = connect_host(self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def exit_code(self) -> int | None:
        """The server's exit status, None while it runs."""
        return self.proc.poll()

    @property
    def alive(self) -> bool:
        """Whether the server process is running."""
        return self.proc.poll() is None

    def log_tail(self, lines: int | None = None) -> str:
        """The last lines of server.log."""
        return self._read_tail(lines or self.options.log_tail_lines)

    def startup_phases(self) -> StartupPhases | None:
        """Where this server's start-up went, from its log (`_phases`); None before it is ready."""
        if self.ready_at is None:
            return None
        if self.server_log is not None:
            self.server_log.flush()
        return read_startup_phases(self.log_path, started_at=self.started_at, ready_at=self.ready_at)

    def _read_tail(self, lines: int) -> str:
        if self.server_log is not None:
            self.server_log.flush()
        return read_tail(self.log_path, lines)

    def failure(self) -> str | None:
        """The failure class of an exited server (`stopped` when it was told to stop), None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        if self.stopped_by() is not None:
            return "stopped"
        return classify_failure(code, self._read_tail(400))

    def stopped_by(self) -> str | None:
        """Who stopped the server, when it exited because it was told to rather than by failing:
        `servetune stop` (its request in the run directory names it), or a signal from outside
        (`launch._failures.is_stop`). None while it runs, after our own `stop()`, or when it failed."""
        code = self.proc.poll()
        if code is None or self._stopped:
            return None
        request = read_stop_request(self.run_dir, self.server_id) if self.server_id else None
        if request is not None:
            return f"`servetune stop` (pid {request.get('pid')})"
        if is_stop(code, self._read_tail(400)):
            return f"a signal from outside servetune ({describe_exit(code)})"
        return None

    def check_alive(self) -> None:
        """Raise `LaunchError` (classified, with the log tail; `stopped` when it was told to stop from
        outside) when the server has exited."""
        code = self.proc.poll()
        if code is not None:
            raise self._exit_error("the server exited", code)

    def _exit_error(self, what: str, code: int) -> LaunchError:
        who = self.stopped_by()
        if who is not None:
            return LaunchError(
                f"{what} ({describe_exit(code)}): stopped by {who}",
                failure="stopped",
                exit_code=code,
                notes=[f"server log: {self.log_path}"],
            )
        failure = classify_failure(code, self._read_tail(400))
        return LaunchError(
            f"{what} ({describe_exit(code)}): {FAILURE_PHRASE.get(failure, failure)}",
            failure=failure,
            log_tail=self.log_tail(),
            exit_code=code,
            help=FAILURE_HELP.get(failure),
            notes=[f"server log: {self.log_path}"],
        )

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes] | None:
        return http_get(self.host, self.port, path, timeout=timeout, headers=self._headers)

    def get_json(self, path: str, timeout: float = 10.0) -> dict[str, Any] | None:
        """GET a JSON endpoint of the server; None when it does not answer 200 with JSON."""
        got = self._get(path, timeout)
        if got is None or got[0] != 200:
            return None
        try:
            data = json.loads(got[1])
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def wait_ready(self, timeout_s: float) -> None:
        """Poll the health endpoint until 200; fail fast if the process exits; time out with the log tail."""
        started = time.monotonic()
        deadline = started + timeout_s
        delay = 0.01
        while True:
            signum = interrupts.requested()
            if signum is not None:  # a worker thread's start-up: the main thread was told already
                raise interrupts.Interrupted(signum)
            code = self.proc.poll()
            if code is not None:
                raise self._exit_error("the server exited during start-up", code)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LaunchError(
                    f"the server did not become ready within {timeout_s:g} s "
                    f"({self.options.health_path} never answered 200)",
                    failure="startup_timeout",
                    log_tail=self.log_tail(),
                    help=FAILURE_HELP["startup_timeout"],
                    notes=[f"server log: {self.log_path}"],
                )
            got = self._get(self.options.health_path, timeout=min(max(remaining, 0.1), 30.0))
            if got is not None and got[0] == 200:
                self.ready_at = time.time()
                return
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.05 if time.monotonic() - started < 30 else 0.5)

    def verify_identity(self, requested: Mapping[str, Any]) -> None:
        """Check that the server answering on our port is the process group we started.

        Raises:
            LaunchError: `failure="wrong_server"`, naming what does not match.
        """
        problems = identity_problems(
            exit_code=self.proc.poll(),
            pgid=self.pgid,
            pids=[self.pid, *(c.pid for c in descendants(self.pid))],
            port=self.port,
            created=self._create_time,
            server_info=self.server_info,
            requested=requested,
        )
        if problems:
            raise LaunchError(
                "the server answering on our port is not the one servetune started: " + "; ".join(problems),
                failure="wrong_server",
                log_tail=self.log_tail(),
                help=FAILURE_HELP["wrong_server"],
                notes=[f"server log: {self.log_path}"],
            )

    def read_server_info(self, requested: Mapping[str, Any]) -> ServerInfoDiff:
        """Read `/server_info` (or the deprecated `/get_server_info`), diff and record it.

        The diff holds every requested field, plus the options' `watched_fields` left to the
        server (status `resolved`), so a run records what SGLang chose for what servetune did not set.
        """
        info = self.get_json("/server_info") or self.get_json("/get_server_info") or {}
        self.server_info = info
        watched = {name: None for name in self.options.watched_fields if name in info and name not in requested}
        self.diff = diff_server_info({**requested, **watched}, info)
        write_json(self.run_dir, "server_info.json", info)
        write_server_info_diff(self.run_dir, self.diff)
        return self.diff

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM our process group, wait `grace_s`, then SIGKILL it; reap; release the port. Idempotent.

        Only our own group is signalled (and descendants that left it, which we started);
        never a process found by name or by port.

        A first SIGINT/SIGTERM does not break into it (`servetune.interrupts.shielded`); a second
        one SIGKILLs the group at once.

        Returns:
            The server's exit status.
        """
        with interrupts.shielded(deliver=False), self._stop_lock:
            if self._stopped:
                return self.proc.returncode
            t0 = time.monotonic()
            grace = self.options.stop_grace_s if grace_s is None else grace_s
            children = descendants(self.pid)
            if self.proc.poll() is None or group_alive(self.pgid):
                signal_group(self.pgid, signal.SIGTERM)
                deadline = t0 + grace
                try:
                    self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                while group_alive(self.pgid) and time.monotonic() < deadline:
                    time.sleep(0.02)
                if self.proc.poll() is None or group_alive(self.pgid):
                    log.info("server group %d did not exit within %.1f s of SIGTERM; sending SIGKILL", self.pgid, grace)
                    signal_group(self.pgid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # our guard (or the server itself), never anything else
                self.proc.wait()
            for child in children:
                try:
                    if child.is_running():
                        child.kill()
                except Exception:
                    pass
            settle = time.monotonic() + 5.0
            while (group_alive(self.pgid) or any_running(children)) and time.monotonic() < settle:
                time.sleep(0.02)
            self._stopped = True
            if self._reservation is not None:
                self._reservation.release()
            _registry.untrack(self)
            if self.server_log is not None:
                self.server_log.close()
            self.stop_s = time.monotonic() - t0
        if self.options.wait_gpu_release:
            from servetune.launch._gpu import wait_gpu_memory_released

            wait_gpu_memory_released(
                [self.pid, *(c.pid for c in children)],
                visible_gpu_indices(self.options.cuda_visible_devices),
                baseline_mib=self._gpu_baseline,
                timeout_s=self.options.gpu_release_timeout_s,
            )
        return self.proc.returncode


def check_launch(options: LaunchOptions) -> None:
    """Refuse, before anything is created, a launch that cannot start: a command prefix that cannot
    run, or an explicit port that is reserved or in use. Call it before making a run directory.

    Raises:
        LaunchError: `bad_command` or `port_in_use`, as `start_server` would.
    """
    check_command(options.command_prefix())
    if options.port is not None:
        reservation, _ = reserve_launch_port(options.host, options.port)
        reservation.release()


def start_server(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    requested: Mapping[str, Any] | None = None,
    options: LaunchOptions | None = None,
) -> ServerHandle:
    """Start the server, wait until it serves, check it is ours, and record its `/server_info` diff.

    Args:
        argv: Flags after the command prefix (`--model-path` first, as `Resolution.argv()`);
            any `--host/--port` in it are replaced by the options'.
        env: Environment variables decided for the server (`Resolution.env()`), added to ours (with
            `LOG_ENV` where neither sets its variables).
        requested: {field: value} to compare with `/server_info` (`Resolution.requested()`);
            a None value records what the server chose.
        options: How to start it; defaults to `LaunchOptions()`.

    Returns:
        A ready `ServerHandle`; stop it (or use it as a context manager).

    Raises:
        LaunchError: with `failure` one of oom, crash, startup_timeout, port_in_use,
            bad_command, wrong_server; the log tail and exit status attached. Nothing is left
            running when it is raised.
    """
    options = options or LaunchOptions()
    env = dict(env or {})
    requested = dict(requested or {})
    prefix = options.command_prefix()
    check_command(prefix)  # before anything is created: a refused launch leaves no run directory
    reservation, port = reserve_launch_port(options.host, options.port)
    try:
        run_dir = Path(options.run_dir) if options.run_dir else default_run_dir("launch")
        make_dir(run_dir)
    except BaseException:
        reservation.release()
        raise
    full = [*prefix, *strip_host_port(argv), "--host", options.host, "--port", str(port)]
    server_env = {**{k: v for k, v in LOG_ENV.items() if k not in os.environ}, **env, **options.extra_env}
    if options.cuda_visible_devices is not None:
        server_env["CUDA_VISIBLE_DEVICES"] = options.cuda_visible_devices
    write_argv(run_dir, full)
    write_env(run_dir, server_env)
    api_key = argv_value(full, "--api-key")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    log_path = run_dir / "server.log"
    gpu_baseline = None
    if options.wait_gpu_release:
        from servetune.launch._gpu import gpu_memory_used_mib

        gpu_baseline = gpu_memory_used_mib(visible_gpu_indices(options.cuda_visible_devices))
    server_id = new_server_id()
    started_at = time.time()
    t0 = time.monotonic()
    try:
        server_log = RedactedLog(log_path)  # the log passes through servetune.secrets on its way to the file
        try:
            proc, pid = spawn_guarded(
                full,
                {**os.environ, **server_env, SERVER_ID_ENV: server_id},
                server_log.fd,
                lock_path=reservation.lock_path,
            )
        finally:
            server_log.close_writer()
    except OSError as exc:
        reservation.release()
        raise LaunchError(
            f"cannot run {shlex.join(prefix)!r}: {exc.strerror or exc}",
            failure="bad_command",
            help=FAILURE_HELP["bad_command"],
        ) from None
    except BaseException:
        reservation.release()
        raise
    handle = ServerHandle(
        proc,
        pid=pid,
        reservation=reservation,
        host=options.host,
        port=port,
        run_dir=run_dir,
        log_path=log_path,
        options=options,
        headers=headers,
    )
    handle._gpu_baseline = gpu_baseline
    handle.server_log = server_log
    handle.server_id = server_id
    handle.started_at = started_at
    _registry.track(handle)
    _registry.install_signal_handlers()
    try:
        write_server_record(
            run_dir,
            server_id=server_id,
            pid=pid,
            guard_pid=proc.pid,
            host=options.host,
            port=port,
            argv=full,
            model=argv_value(full, "--model-path"),
            started_at=started_at,
        )
        handle.wait_ready(options.startup_timeout_s)
        handle.read_server_info(requested)
        if options.check_identity:
            handle.verify_identity(requested)
    except BaseException:
        handle.stop(grace_s=min(options.stop_grace_s, 5.0))
        raise
    handle.startup_s = time.monotonic() - t0
    return handle
