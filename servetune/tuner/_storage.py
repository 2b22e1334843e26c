"""Study storage: SQLite in the run directory by default, any Optuna RDB URL otherwise.

Heartbeats: each running trial records a heartbeat every `HEARTBEAT_S`; a trial whose worker
stopped beating for `GRACE_S` is failed (`worker_lost`) by the next worker that asks, and a
retry of it is queued. On one host a dead worker is found at once by its pid, so a resume
after `kill -9` does not wait out the grace period.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import warnings
from pathlib import Path
from typing import Any

from servetune.errors import TuningError

HEARTBEAT_S = 5
GRACE_S = 30
MAX_RETRY = 2
RETRY_KEEPS = ("source", "fixed", "auto", "model_of")
"""What a retry keeps of the trial it repeats: where it came from and what made its launch (`auto`: the
fields a local or model trial leaves to SGLang; without it the retry would launch their placeholder values)."""
# failure classes that say nothing about the config: not deduplicated, retried when lost
NOT_CONFIG_FAILURES = frozenset({"worker_lost", "interrupted", "port_in_use", "stopped"})


def redact_url(url: str) -> str:
    """A storage URL without its password, for logs and files."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


_SQLITE_MAGIC = b"SQLite format 3\x00"
_STORAGE_HELP = "--storage takes sqlite:///PATH (relative) or sqlite:////ABS/PATH, or postgresql://USER@HOST/DB"
CONNECT_TIMEOUT_S = 10


def check_storage_url(url: str, *, existing: bool = False) -> None:
    """Refuse, before anything is opened or created, a storage URL that cannot work: a scheme other
    than sqlite/postgresql, an SQLite file in a missing or read-only folder, a directory, or a file
    that is not an SQLite database. `existing`: the SQLite file must already exist (reading a study).

    Raises:
        TuningError: naming the URL (password redacted) and what to pass instead.
    """
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    shown = redact_url(url)
    if not sep or base not in ("sqlite", "postgresql", "postgres"):
        raise TuningError(
            f"unsupported storage URL {shown!r}: only sqlite:// and postgresql:// storages are supported",
            help=_STORAGE_HELP,
        )
    if base != "sqlite":
        return
    path_text = rest.split("?", 1)[0]
    path_text = path_text[1:] if path_text.startswith("/") else path_text
    if path_text in ("", ":memory:"):
        return
    path = Path(path_text)
    problem = None
    if path.is_dir():
        problem = f"{path} is a directory"
    elif path.exists():
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
        if head and head != _SQLITE_MAGIC:
            problem = f"{path} is not an SQLite database"
    elif existing:
        problem = f"no such SQLite file {path}"
    elif not path.parent.is_dir():
        problem = f"the directory {path.parent} does not exist"
    elif not os.access(path.parent, os.W_OK | os.X_OK):
        problem = f"the directory {path.parent} is read-only"
    if problem is not None:
        raise TuningError(
            f"cannot use storage {shown}: {problem}",
            help="pass the study.db a `servetune tune` run wrote (runs/tune/<study>/study.db)"
            if existing
            else _STORAGE_HELP,
        )


def _check_reachable(url: str, connect_args: dict[str, Any], shown: str) -> None:
    """Connect once, so an unreachable server fails in seconds with its reason, not after retries."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = create_engine(url, connect_args=connect_args)
        try:
            engine.connect().close()
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise TuningError(
            f"cannot connect to storage {shown}: {reason}",
            help="check the host, port, user and database, and that PostgreSQL is running",
        ) from None


def open_storage(url: str, *, existing: bool = False):
    """An `RDBStorage` with heartbeats and the retry callback (imports optuna).

    Args:
        url: sqlite:// or postgresql:// URL.
        existing: Reading a study: the SQLite file must exist and the database must hold Optuna's
            tables already; no table or file is created in it.

    Raises:
        TuningError: an unsupported, unreachable or unusable storage (`check_storage_url`).
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    check_storage_url(url, existing=existing)
    shown = redact_url(url)
    url = _with_driver(url)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
        engine_kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        try:
            _check_reachable(url, engine_kwargs["connect_args"], shown)
        except ImportError as exc:
            raise TuningError(
                f"cannot open storage {redact_url(url)}: {exc}",
                help="PostgreSQL URLs need psycopg2: pip install 'servetune[postgres]'",
            ) from None
    kwargs: dict[str, Any] = {"heartbeat_interval": HEARTBEAT_S, "grace_period": GRACE_S}
    if existing:
        _check_optuna_schema(url, engine_kwargs, shown)
        kwargs["skip_table_creation"] = True  # a read creates nothing
    elif url.startswith("sqlite"):
        _check_sqlite_is_a_study(url, shown)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _create_rdb_storage(optuna, url, engine_kwargs, kwargs)
    except ImportError as exc:
        raise TuningError(
            f"cannot open storage {redact_url(url)}: {exc}",
            help="PostgreSQL URLs need psycopg2: pip install 'servetune[postgres]'",
        ) from None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise TuningError(f"cannot open storage {redact_url(url)}: {reason}", help=_STORAGE_HELP) from None


OPTUNA_TABLES = ("studies", "trials", "version_info")
"""Tables every Optuna RDB storage has: a database without them holds no study to read."""


def _check_optuna_schema(url: str, engine_kwargs: dict[str, Any], shown: str) -> None:
    """Refuse to read a database without Optuna's tables (a read must not create them there); an
    SQLite file is opened read-only for the look."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.exc import SQLAlchemyError

    look = url
    connect_args = dict(engine_kwargs.get("connect_args") or {})
    if url.startswith("sqlite"):
        look = _read_only_sqlite(_sqlite_path(url))
    try:
        engine = create_engine(look, connect_args=connect_args)
        try:
            missing = [t for t in OPTUNA_TABLES if not inspect(engine).has_table(t)]
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise TuningError(f"cannot read storage {shown}: {reason}", help=_STORAGE_HELP) from None
    if missing:
        raise TuningError(
            f"{shown} holds no Optuna study (no {', '.join(missing)} table); nothing was written to it",
            help="pass the storage a `servetune tune` run used (runs/tune/<study>/study.db by default)",
        )


def _sqlite_path(url: str) -> str:
    """The file an `sqlite:///path` URL names (relative, or absolute with four slashes)."""
    return url.split("://", 1)[1].split("?", 1)[0][1:]


def _read_only_sqlite(path: str) -> str:
    """A URL that opens the SQLite file at `path` read-only: a look creates no file and writes nothing."""
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def _sqlite_tables(url: str, shown: str) -> list[str] | None:
    """The tables of the SQLite file `url` names, looked at read-only; None when there is no such file yet."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.exc import SQLAlchemyError

    path = _sqlite_path(url)
    if not path or not Path(path).is_file() or Path(path).stat().st_size == 0:
        return None
    try:
        engine = create_engine(_read_only_sqlite(path))
        try:
            return inspect(engine).get_table_names()
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise TuningError(f"cannot read storage {shown}: {reason}", help=_STORAGE_HELP) from None


def _check_sqlite_is_a_study(url: str, shown: str) -> None:
    """A study writes Optuna's tables into a new SQLite file or one that holds them already, never into
    a database of something else (a PostgreSQL database is the operator's to share and is not checked)."""
    tables = _sqlite_tables(url, shown)
    if tables and any(t not in tables for t in OPTUNA_TABLES):
        raise TuningError(
            f"{shown} is an SQLite database of something else (tables: {', '.join(sorted(tables)[:6])}); "
            "nothing was written to it",
            help="give the study a file of its own (a new path, or the study.db of an earlier `servetune tune`)",
        )


def _create_rdb_storage(
    optuna: Any, url: str, engine_kwargs: dict[str, Any], kwargs: dict[str, Any], attempts: int = 6
):
    """`RDBStorage(...)`, retried when several workers create the schema of a fresh database at
    once: the loser of that race gets a duplicate-table error, and the schema is there on retry."""
    import random
    import time

    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(attempts):
        try:
            try:
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, heartbeat_stale_trial_callback=retry_lost_trial, **kwargs
                )
            except TypeError:  # optuna < 4.9 spells it failed_trial_callback
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, failed_trial_callback=retry_lost_trial, **kwargs
                )
        except (IntegrityError, ProgrammingError, OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1) + random.random() * 0.3)


def _with_driver(url: str) -> str:
    """`postgresql://` with the installed driver: SQLAlchemy 2.1 defaults to psycopg 3, while
    servetune's `postgres` extra installs psycopg2."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if (
        scheme in ("postgresql", "postgres")
        and sep
        and importlib.util.find_spec("psycopg") is None
        and importlib.util.find_spec("psycopg2") is not None
    ):
        return f"postgresql+psycopg2://{rest}"
    return url


def retry_lost_trial(study, trial) -> None:
    """Queue a trial whose worker died again, with its params and what made its config (`RETRY_KEEPS`;
    as Optuna's `RetryFailedTrialCallback`, but the retry starts with no measurement's attributes)."""
    import optuna

    history = list(trial.system_attrs.get("retry_history", [])) + [trial.number]
    if len(history) > MAX_RETRY:
        return
    system_attrs = {"failed_trial": history[0], "retry_history": history}
    if "fixed_params" in trial.system_attrs:
        system_attrs["fixed_params"] = trial.system_attrs["fixed_params"]
    user_attrs = {k: trial.user_attrs[k] for k in RETRY_KEEPS if k in trial.user_attrs}
    user_attrs["retry_of"] = trial.number
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            user_attrs=user_attrs,
            system_attrs=system_attrs,
        )
    )


def requeue_void_retries(study) -> list[int]:
    """Queue again each trial whose every retry launched another config than it (`config_hash` differs):
    such a retry measured something else, so the trial it repeats was never measured. Studies written
    before retries kept `auto` (`RETRY_KEEPS`) hold them: a model seed's retry launched the sampler's
    placeholders for the fields the seed leaves to SGLang. Done once: the new retry has `retry_of` too.
    Returns the trial numbers queued again."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    retries: dict[int, list] = {}
    for t in trials:
        if isinstance(t.user_attrs.get("retry_of"), int):
            retries.setdefault(t.user_attrs["retry_of"], []).append(t)
    queued = []
    for number, tries in sorted(retries.items()):
        original = by_number.get(number)
        want = original.user_attrs.get("config_hash") if original is not None else None
        if want is None or original.state != TrialState.FAIL or is_config_failure(original):
            continue
        if all(t.state.is_finished() and t.user_attrs.get("config_hash") not in (None, want) for t in tries):
            retry_lost_trial(study, original)
            queued.append(number)
    return queued


def failure_of(trial) -> dict[str, Any] | None:
    """A FAIL trial's failure record; one failed by Optuna's heartbeat check has none, so it
    reads as `worker_lost` (the attribute cannot be written once the trial is finished)."""
    if trial.state.name != "FAIL":
        return None
    return trial.user_attrs.get("failure") or _lost("its heartbeat stopped")


def is_config_failure(trial) -> bool:
    """True for a FAIL trial whose config is to blame (not a lost worker or Ctrl-C)."""
    failure = failure_of(trial)
    return failure is not None and failure.get("class") not in NOT_CONFIG_FAILURES


def _lost(why: str) -> dict[str, Any]:
    return {
        "class": "worker_lost",
        "message": f"the worker running this trial died ({why}); a retry was queued",
        "log_tail": "",
    }


def worker_identity() -> dict[str, Any]:
    """Who runs a trial: host, pid and the pid's start time (pids are reused)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_started": _start_time(os.getpid())}


def trial_id(storage, study, number: int) -> int:
    """The storage's id of trial `number` of `study`, through Optuna's public storage API
    (`BaseStorage.get_study_id_from_name`, `get_trial_id_from_study_id_trial_number`)."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def frozen_trial(study, number: int):
    """Trial `number` of `study` as it is stored now (`Study.get_trials`)."""
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def fail_lost_trials(study, storage) -> list[int]:
    """Fail RUNNING trials whose worker is gone: a dead pid on this host, or a stale heartbeat.
    `storage`: the study's (`optuna.storages`), written to directly where a trial's own worker is gone."""
    import optuna
    from optuna.trial import TrialState

    from servetune.launch import reap_orphan_server

    failed = []
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        who = t.user_attrs.get("worker") or {}
        if who.get("host") != host or _alive(who.get("pid"), who.get("pid_started")):
            continue
        tid = trial_id(storage, study, t.number)
        try:
            storage.set_trial_user_attr(tid, "failure", _lost(f"pid {who.get('pid')} on {host} is gone"))
            if not storage.set_trial_state_values(tid, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        if t.user_attrs.get("run_dir"):
            reap_orphan_server(Path(t.user_attrs["run_dir"]))
        retry_lost_trial(study, storage.get_trial(tid))
        failed.append(t.number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)
    return failed


def _alive(pid: Any, started: Any) -> bool:
    if not isinstance(pid, int):
        return True  # cannot tell: leave it to the heartbeat
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now_started = _start_time(pid)
    return started is None or now_started is None or abs(now_started - started) < 1.0


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:
        return None


class Heartbeat:
    """Records a trial's heartbeat from a daemon thread while the trial runs."""

    def __init__(self, storage, trial_id: int) -> None:
        self._storage = storage
        self._trial_id = trial_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        if getattr(self._storage, "get_heartbeat_interval", lambda: None)() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception:
                pass
            self._stop.wait(HEARTBEAT_S)
