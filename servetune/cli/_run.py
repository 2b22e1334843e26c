"""Exit-code discipline for the CLI: user errors print a message, bugs print a crash report, SIGINT
and SIGTERM (`servetune.interrupts`, installed for each command) end it with 130 or 143."""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback

import typer

try:  # recent typer vendors click (and does not install it); its usage errors are its own
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import ClickException

from servetune import interrupts
from servetune.errors import ServetuneError


class _StderrHandler(logging.StreamHandler):
    """Warnings from servetune's modules as `warning: ...` on the current sys.stderr (tests swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        self.setLevel(logging.WARNING)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace(record.levelname, record.levelname.lower(), 1)


def _show_warnings() -> None:
    logger = logging.getLogger("servetune")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


class StdoutWriteError(OSError):
    """Writing to stdout failed (disk full, I/O error): the output, not the command, is at fault."""


class _GuardedStdout:
    """sys.stdout during a command: a failed write or flush raises `StdoutWriteError`."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush of stdout cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _stdout_error(exc: OSError) -> int:
    _silence_stdout()
    print(
        f"error[output]: cannot write to stdout: {exc.strerror or exc}\n"
        "   = help: free space on the device stdout goes to, or redirect stdout elsewhere",
        file=sys.stderr,
    )
    return 1


def run_app(app: typer.Typer, argv: list[str]) -> int:
    """Run `app` on `argv` and return the process exit code."""
    _show_warnings()
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        with interrupts.installed():
            code = _invoke(app, argv)
        try:
            stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        except OSError as exc:
            return _stdout_error(exc)
        return code
    finally:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = stdout


def _invoke(app: typer.Typer, argv: list[str]) -> int:
    try:
        result = typer.main.get_command(app).main(args=argv, prog_name="servetune", standalone_mode=False)
    except ServetuneError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except typer.Exit as exc:
        return _interrupted(None) if interrupts.requested() is not None else exc.exit_code
    except ClickException as exc:
        exc.show()
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except StdoutWriteError as exc:
        return _stdout_error(exc)
    except OSError as exc:  # the machine, not servetune: a path or device that failed under us
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"error[os]: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception:
        return _bug()
    if interrupts.requested() is not None:  # typer turns an interrupt into an exit status of 130
        return _interrupted(None)
    return result if isinstance(result, int) else 0


def _interrupted(exc: KeyboardInterrupt | None) -> int:
    """128 + the signal (130 SIGINT, 143 SIGTERM); a generic line if the command printed none."""
    signum = interrupts.requested() or getattr(exc, "signum", signal.SIGINT)
    if not (interrupts.reported() or getattr(exc, "reported", False)):
        print(f"interrupted by {interrupts.signal_name(signum)}", file=sys.stderr)
    return 128 + signum


def _bug() -> int:
    print("servetune hit an internal error (this is a bug); please report it with this trace:", file=sys.stderr)
    traceback.print_exc()
    return 3
