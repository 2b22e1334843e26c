"""Output files named on the command line (`--out`, `--save`, `--out-dir`, `--run-dir`): checked
before a long command starts, written with errors that name the option and the path."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from servetune.errors import SpecError

__all__ = ["check_output_dir", "check_output_file", "write_output"]


def _problem(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return exc.strerror or str(exc)


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, an output file that cannot be written: its folder is missing or
    not a folder, the path is a directory, or the folder is read-only.

    Raises:
        SpecError: naming `option` and `path`, with a hint.
    """
    if path.is_dir():
        raise SpecError(f"{option} {path} is a directory", help=f"give {option} a file path, e.g. {path / 'out.yaml'}")
    parent = path.parent
    if not parent.exists():
        raise SpecError(
            f"cannot write {option} {path}: the directory {parent} does not exist",
            help=f"create it first (mkdir -p {parent}) or choose another path",
        )
    if not parent.is_dir():
        raise SpecError(f"cannot write {option} {path}: {parent} is not a directory", help="choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"cannot write {option} {path}: {parent} is read-only", help="choose a writable directory")


def check_output_dir(path: Path, option: str) -> None:
    """Refuse a directory that cannot be created or written: it (or a parent) is a file, or read-only.

    Raises:
        SpecError: naming `option` and `path`, with a hint.
    """
    from servetune.launch import dir_problem

    problem = dir_problem(path)
    if problem is not None:
        raise SpecError(f"{option} {path} {problem}", help=f"give {option} a directory path you can write")


def write_output(path: Path, text: str, option: str) -> None:
    """Write `text` to `path` (UTF-8).

    Raises:
        SpecError: the file cannot be written (missing folder, a directory, read-only, disk full),
            naming `option` and `path`.
    """
    check_output_file(path, option)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write {option} {path}: {_problem(exc)}", help="choose another path") from None
