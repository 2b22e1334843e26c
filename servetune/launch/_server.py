"""Start an SGLang server (or anything with its argv and endpoints), know it serves, stop it cleanly."""

from __future__ import annotations

import atexit
import contextlib
import http.client
import importlib.util
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servetune.errors import LaunchError
from servetune.launch._diff import ServerInfoDiff, diff_server_info
from servetune.launch._failures import classify_failure, describe_exit, read_tail
from servetune.launch._ports import PortReservation, port_is_free, reserve_free_port
from servetune.launch._rundir import new_run_dir, write_argv, write_env, write_json, write_server_info_diff

log = logging.getLogger("servetune.launch")

SGLANG_CMD_ENV = "SERVETUNE_SGLANG_CMD"
RUNS_DIR_ENV = "SERVETUNE_RUNS_DIR"
DEFAULT_SGLANG_MODULE = "sglang.launch_server"
WATCHED_FIELDS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "cuda_graph_max_bs_decode",
    "schedule_policy",
    "prefill_decode_interval",
    "radix_eviction_policy",
    "mm_feature_transport",
    "mm_preprocess_cache_size_mb",
    "attention_backend",
    "decode_attention_backend",
    "page_size",
    "max_total_tokens",
)
"""Tuning-relevant fields recorded as `resolved` in the diff when servetune left them to the server."""

_PHRASE = {
    "oom": "out of GPU memory (oom)",
    "crash": "crashed (crash)",
    "port_in_use": "its port is taken (port_in_use)",
    "bad_command": "the command or its flags were rejected (bad_command)",
}
_HELP = {
    "oom": "the GPU ran out of memory: lower --mem-fraction-static, max_running_requests or the CUDA-graph "
    "batch size, and check that no other process holds GPU memory (nvidia-smi)",
    "crash": "the server exited; the full log is in the run directory",
    "startup_timeout": "the server did not become ready in time: raise the start-up timeout "
    "(first starts compile kernels and capture CUDA graphs), or read the log for a stall",
    "port_in_use": "another process is bound to that port: pick another --port, or omit it in managed "
    "mode to get a free one",
    "bad_command": "check the command prefix (--sglang-cmd or SERVETUNE_SGLANG_CMD) and the SGLang flags; "
    "the command run is in argv.txt in the run directory",
    "wrong_server": "a server that servetune did not start answers on that port (often one left from an "
    "earlier run): stop it, or use another port",
}


class LaunchOptions(BaseModel):
    """How to start the server process; the argv and env come from the resolver."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    sglang_cmd: list[str] | None = None
    """Command prefix the argv is appended to (e.g. `srun --gpus 1 python -m sglang.launch_server`).
    None: `$SERVETUNE_SGLANG_CMD` (split with shlex), else `python -m sglang.launch_server`."""
    host: str = "127.0.0.1"
    """Address the server binds (`--host`)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port (`--port`); None picks a free one, safe under parallel launches."""
    startup_timeout_s: float = Field(default=900.0, gt=0)
    """Seconds to wait for readiness (a first SGLang start on a fresh GPU machine took 128 s)."""
    stop_grace_s: float = Field(default=30.0, ge=0)
    """Seconds between SIGTERM and SIGKILL of the server's process group."""
    run_dir: Path | None = None
    """Where server.log, argv.txt, env.json and the server_info diff go; None makes a new one
    under `$SERVETUNE_RUNS_DIR` (default `./runs`)."""
    cuda_visible_devices: str | None = None
    """`CUDA_VISIBLE_DEVICES` for the server (e.g. `"0,1"`); None inherits."""
    extra_env: dict[str, str] = Field(default_factory=dict)
    """More environment variables for the server (after the resolved ones)."""
    health_path: str = "/health_generate"
    """Readiness endpoint: 200 means a generation went through."""
    check_identity: bool = True
    """Refuse a ready answer that does not come from the process started (see `wrong_server`)."""
    wait_gpu_release: bool = True
    """After stop, wait until NVML shows the server's GPU memory released (no-op without NVML)."""
    gpu_release_timeout_s: float = Field(default=120.0, ge=0)
    """Longest wait for that release."""
    log_tail_lines: int = Field(default=40, ge=1)
    """Lines of server log carried by a `LaunchError`."""

    @field_validator("sglang_cmd", mode="before")
    @classmethod
    def _split_cmd(cls, value: Any) -> Any:
        if isinstance(value, str):
            return shlex.split(value)
        return value

    def command_prefix(self) -> list[str]:
        """The command prefix actually used (option, then env, then the default)."""
        if self.sglang_cmd:
            return list(self.sglang_cmd)
        from_env = os.environ.get(SGLANG_CMD_ENV, "").strip()
        if from_env:
            return shlex.split(from_env)
        return [sys.executable, "-m", DEFAULT_SGLANG_MODULE]


def _check_command(prefix: list[str]) -> None:
    if not prefix:
        raise LaunchError("the SGLang command prefix is empty", failure="bad_command", help=_HELP["bad_command"])
    prog = prefix[0]
    found = (os.path.isfile(prog) and os.access(prog, os.X_OK)) if os.sep in prog else shutil.which(prog) is not None
    if not found:
        raise LaunchError(
            f"cannot run the SGLang command {shlex.join(prefix)!r}: {prog!r} is not an executable file or on PATH",
            failure="bad_command",
            help="pass --sglang-cmd 'python -m sglang.launch_server' (or set SERVETUNE_SGLANG_CMD) "
            "with a program that exists",
        )
    if prog == sys.executable and len(prefix) >= 3 and prefix[1] == "-m":
        module = prefix[2]
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise LaunchError(
                f"module {module.split('.')[0]!r} is not installed in {sys.executable}, so `-m {module}` cannot run",
                failure="bad_command",
                help="install SGLang in this Python, or pass --sglang-cmd with the Python or container that has it",
            )


def _strip_host_port(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port"):
            skip = True
            continue
        if arg.startswith(("--host=", "--port=")):
            continue
        out.append(arg)
    return out


def _argv_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _connect_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def http_get(
    host: str, port: int, path: str, *, timeout: float = 5.0, headers: Mapping[str, str] | None = None
) -> tuple[int, bytes] | None:
    """GET `path`; (status, body), or None when nothing answers (refused, reset, timeout)."""
    conn = http.client.HTTPConnection(_connect_host(host), port, timeout=timeout)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _create_time(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


def _any_running(procs: Sequence[Any]) -> bool:
    """Whether any of these psutil processes still runs (zombies do not count)."""
    import psutil

    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is alive (zombies waiting for a reaper do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil

    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _listener_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on `port` from /proc/net/tcp{,6}; None where /proc does not tell."""
    inodes: set[str] = set()
    found_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found_table = True
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes if found_table else None


def _pids_holding(pids: Sequence[int], inodes: set[str]) -> bool:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False


def _listener_pids(port: int) -> set[int] | None:
    """Pids listening on `port` (a full scan: only used to name a foreign listener), or None."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    pids = {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    return pids or None


_LIVE: set[ServerHandle] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _stop_all_live() -> None:
    with _LIVE_LOCK:
        handles = list(_LIVE)
    for handle in handles:
        try:
            handle.stop()
        except Exception:
            log.exception("stopping %s at exit failed", handle)


def _exit_on_signal(signum: int, frame: Any) -> None:
    if os.getpid() != _HANDLER_OWNER[0]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


_HANDLER_OWNER = [os.getpid()]


def _forget_servers_in_child() -> None:
    """A forked child (multiprocessing worker) owns none of its parent's servers: it forgets them,
    gets a fresh lock (another thread may have held the parent's at the fork), and gets the default
    SIGTERM/SIGHUP back. A Python-level handler runs only between bytecodes, so a worker blocked
    in C (a pool worker waiting on its queue) would not die of `Pool.terminate()`'s SIGTERM."""
    global _HANDLERS_INSTALLED, _LIVE_LOCK
    _LIVE.clear()
    _LIVE_LOCK = threading.Lock()
    if _HANDLERS_INSTALLED:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is _exit_on_signal:
                with contextlib.suppress(
                    ValueError
                ):  # not the main thread: keep the handler (it re-raises the default)
                    signal.signal(sig, signal.SIG_DFL)
    _HANDLERS_INSTALLED = False


def install_signal_handlers() -> None:
    """Make SIGTERM/SIGHUP of this process unwind (SystemExit), so servers are stopped on the way out.

    Only replaces default handlers and only from the main thread; a forked child (e.g. a
    multiprocessing worker) that inherits them gets the default action. Ctrl-C (SIGINT) already
    raises KeyboardInterrupt. Together with the `atexit` hook, nothing started is left behind,
    except after SIGKILL of this process (then the server's group outlives it; its pid is in
    the run directory's `server.pid`).
    """
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    _HANDLER_OWNER[0] = os.getpid()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit_on_signal)
    _HANDLERS_INSTALLED = True


atexit.register(_stop_all_live)
os.register_at_fork(after_in_child=_forget_servers_in_child)


class ServerHandle:
    """A started server: its process group, port reservation, log and `/server_info` diff.

    Use as a context manager (`with start_server(...) as server:`); `stop()` is idempotent.
    """

    def __init__(
        self,
        proc: subprocess.Popen,
        *,
        reservation: PortReservation | None,
        host: str,
        port: int,
        run_dir: Path,
        log_path: Path,
        options: LaunchOptions,
        headers: dict[str, str],
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid
        self.host = host
        self.port = port
        self.run_dir = run_dir
        self.log_path = log_path
        self.options = options
        self.server_info: dict[str, Any] = {}
        self.diff: ServerInfoDiff = ServerInfoDiff(fields=[])
        self.startup_s: float | None = None
        self.stop_s: float | None = None
        self._reservation = reservation
        self._headers = headers
        self._stop_lock = threading.RLock()
        self._stopped = False
        self._started = time.monotonic()
        self._gpu_baseline: dict[int, float] | None = None
        self._create_time = _create_time(proc.pid)

    def __repr__(self) -> str:
        return f"ServerHandle(pid={self.pid}, url={self.url!r}, run_dir={str(self.run_dir)!r})"

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. `http://127.0.0.1:31234`."""
        host = _connect_host(self.host)
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
        return read_tail(self.log_path, lines or self.options.log_tail_lines)

    def failure(self) -> str | None:
        """The failure class of an exited server, None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return classify_failure(code, read_tail(self.log_path, 400))

    def check_alive(self) -> None:
        """Raise `LaunchError` (classified, with the log tail) when the server has exited."""
        code = self.proc.poll()
        if code is not None:
            raise self._exit_error("the server exited", code)

    def _exit_error(self, what: str, code: int) -> LaunchError:
        failure = classify_failure(code, read_tail(self.log_path, 400))
        return LaunchError(
            f"{what} ({describe_exit(code)}): {_PHRASE.get(failure, failure)}",
            failure=failure,
            log_tail=self.log_tail(),
            exit_code=code,
            help=_HELP.get(failure),
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
                    help=_HELP["startup_timeout"],
                    notes=[f"server log: {self.log_path}"],
                )
            got = self._get(self.options.health_path, timeout=min(max(remaining, 0.1), 30.0))
            if got is not None and got[0] == 200:
                return
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.05 if time.monotonic() - started < 30 else 0.5)

    def verify_identity(self, requested: Mapping[str, Any]) -> None:
        """Check that the server answering on our port is the process group we started."""
        problems: list[str] = []
        if self.proc.poll() is not None:
            problems.append(f"our process has exited ({describe_exit(self.proc.poll())}) yet the port answers")
        inodes = _listener_inodes(self.port)
        if inodes and not _pids_holding([self.pid, *(c.pid for c in self._descendants())], inodes):
            others = sorted(_listener_pids(self.port) or [])
            older = [pid for pid in others if self._older_than_ours(pid)]
            if older:
                problems.append(
                    f"port {self.port} is held by pid(s) {older}, outside our process group {self.pgid} "
                    "and started no later than our server"
                )
            else:
                log.info(
                    "port %d is held by pid(s) %s outside group %d but started after it (a container proxy?); accepted",
                    self.port,
                    others or "unknown",
                    self.pgid,
                )
        info = self.server_info
        pid = info.get("pid")
        if isinstance(pid, int) and not self._ours(pid) and self._older_than_ours(pid):
            problems.append(
                f"/server_info reports pid {pid}, outside our process group {self.pgid} "
                "and started no later than our server"
            )
        if "port" in info and str(info["port"]) != str(self.port):
            problems.append(f"/server_info reports port {info['port']}, expected {self.port}")
        want_model = requested.get("model_path")
        if want_model is not None and "model_path" in info and str(info["model_path"]) != str(want_model):
            problems.append(f"/server_info reports model_path {info['model_path']!r}, expected {want_model!r}")
        if problems:
            raise LaunchError(
                "the server answering on our port is not the one servetune started: " + "; ".join(problems),
                failure="wrong_server",
                log_tail=self.log_tail(),
                help=_HELP["wrong_server"],
                notes=[f"server log: {self.log_path}"],
            )

    def _older_than_ours(self, pid: int) -> bool:
        """Whether `pid` is a process on this host that started before our server (an old server).

        A foreign listener that started *after* ours is accepted: with a container or `srun`
        prefix the port is held by a proxy or a process outside our group that our command
        created; an old server left from an earlier run is always older than ours."""
        import psutil

        try:
            return psutil.Process(pid).create_time() <= self._create_time
        except psutil.Error:
            return False

    def _ours(self, pid: int) -> bool:
        try:
            return pid == self.pid or os.getpgid(pid) == self.pgid
        except (ProcessLookupError, PermissionError):
            return False

    def read_server_info(self, requested: Mapping[str, Any]) -> ServerInfoDiff:
        """Read `/server_info` (or the deprecated `/get_server_info`), diff and record it.

        The diff holds every requested field, plus the `WATCHED_FIELDS` left to the server
        (status `resolved`), so a run records what SGLang chose for what servetune did not set.
        """
        info = self.get_json("/server_info") or self.get_json("/get_server_info") or {}
        self.server_info = info
        watched = {name: None for name in WATCHED_FIELDS if name in info and name not in requested}
        self.diff = diff_server_info({**requested, **watched}, info)
        write_json(self.run_dir, "server_info.json", info)
        write_server_info_diff(self.run_dir, self.diff)
        return self.diff

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM our process group, wait `grace_s`, then SIGKILL it; reap; release the port. Idempotent.

        Only our own group is signalled (and descendants that left it, which we started);
        never a process found by name or by port.

        Returns:
            The server's exit status.
        """
        with self._stop_lock:
            if self._stopped:
                return self.proc.returncode
            t0 = time.monotonic()
            grace = self.options.stop_grace_s if grace_s is None else grace_s
            descendants = self._descendants()
            if self.proc.poll() is None or _group_alive(self.pgid):
                self._signal_group(signal.SIGTERM)
                deadline = t0 + grace
                try:
                    self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                while _group_alive(self.pgid) and time.monotonic() < deadline:
                    time.sleep(0.02)
                if self.proc.poll() is None or _group_alive(self.pgid):
                    log.info("server group %d did not exit within %.1f s of SIGTERM; sending SIGKILL", self.pgid, grace)
                    self._signal_group(signal.SIGKILL)
            self.proc.wait()
            for child in descendants:
                try:
                    if child.is_running():
                        child.kill()
                except Exception:
                    pass
            settle = time.monotonic() + 5.0
            while (_group_alive(self.pgid) or _any_running(descendants)) and time.monotonic() < settle:
                time.sleep(0.02)
            self._stopped = True
            self._release()
            self.stop_s = time.monotonic() - t0
        if self.options.wait_gpu_release:
            from servetune.launch._gpu import wait_gpu_memory_released

            pids = [self.pid, *(c.pid for c in descendants)]
            wait_gpu_memory_released(
                pids,
                _gpu_indices(self.options),
                baseline_mib=self._gpu_baseline,
                timeout_s=self.options.gpu_release_timeout_s,
            )
        return self.proc.returncode

    def _descendants(self) -> list[Any]:
        import psutil

        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def _release(self) -> None:
        if self._reservation is not None:
            self._reservation.release()
        with _LIVE_LOCK:
            _LIVE.discard(self)


def _gpu_indices(options: LaunchOptions) -> list[int] | None:
    """The NVML indices the server may use (its CUDA_VISIBLE_DEVICES), so parallel trials on other
    GPUs do not hold up this one's release; None (all) when not given as integers."""
    visible = options.cuda_visible_devices
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return None
    try:
        return [int(x) for x in visible.split(",") if x.strip()]
    except ValueError:
        return None


def _reserve(options: LaunchOptions) -> tuple[PortReservation | None, int]:
    host = options.host
    if options.port is None:
        try:
            res = reserve_free_port(host)
        except OSError as exc:
            raise LaunchError(str(exc), failure="port_in_use", help=_HELP["port_in_use"]) from None
        return res, res.port
    port = options.port
    res = PortReservation.try_acquire(port)
    if res is None:
        raise LaunchError(
            f"port {port} is reserved by another servetune launch in progress",
            failure="port_in_use",
            help=_HELP["port_in_use"],
        )
    if not port_is_free(host, port):
        res.release()
        notes = []
        got = http_get(host, port, "/server_info", timeout=0.5)
        if got is not None and got[0] == 200:
            try:
                info = json.loads(got[1])
                notes.append(
                    f"it answers /server_info: model_path={info.get('model_path')!r}, version={info.get('version')!r}, "
                    f"pid={info.get('pid', 'not reported')}"
                )
            except ValueError:
                pass
        raise LaunchError(
            f"port {port} on {host} is already in use; servetune will not start a second server there "
            "nor talk to one it did not start",
            failure="port_in_use",
            help=_HELP["port_in_use"],
            notes=notes,
        )
    return res, port


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
        env: Environment variables decided for the server (`Resolution.env()`), added to ours.
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
    _check_command(prefix)
    run_dir = (
        Path(options.run_dir) if options.run_dir else new_run_dir(Path(os.environ.get(RUNS_DIR_ENV, "runs")), "launch")
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    reservation, port = _reserve(options)
    full = [*prefix, *_strip_host_port(argv), "--host", options.host, "--port", str(port)]
    server_env = {**env, **options.extra_env}
    if options.cuda_visible_devices is not None:
        server_env["CUDA_VISIBLE_DEVICES"] = options.cuda_visible_devices
    write_argv(run_dir, full)
    write_env(run_dir, server_env)
    api_key = _argv_value(full, "--api-key")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    log_path = run_dir / "server.log"
    gpu_baseline = None
    if options.wait_gpu_release:
        from servetune.launch._gpu import gpu_memory_used_mib

        gpu_baseline = gpu_memory_used_mib(_gpu_indices(options))
    t0 = time.monotonic()
    try:
        with open(log_path, "ab") as log_fh:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **server_env},
                start_new_session=True,
                close_fds=True,
            )
    except OSError as exc:
        reservation.release() if reservation else None
        raise LaunchError(
            f"cannot run {shlex.join(prefix)!r}: {exc.strerror or exc}",
            failure="bad_command",
            help=_HELP["bad_command"],
        ) from None
    (run_dir / "server.pid").write_text(f"{proc.pid}\n")
    handle = ServerHandle(
        proc,
        reservation=reservation,
        host=options.host,
        port=port,
        run_dir=run_dir,
        log_path=log_path,
        options=options,
        headers=headers,
    )
    handle._gpu_baseline = gpu_baseline
    with _LIVE_LOCK:
        _LIVE.add(handle)
    install_signal_handlers()
    try:
        handle.wait_ready(options.startup_timeout_s)
        handle.read_server_info(requested)
        if options.check_identity:
            handle.verify_identity(requested)
    except BaseException:
        handle.stop(grace_s=min(options.stop_grace_s, 5.0))
        raise
    handle.startup_s = time.monotonic() - t0
    return handle
