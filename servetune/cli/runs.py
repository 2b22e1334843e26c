"""`servetune runs` and `servetune stop`: find the servers servetune started that still run, and stop them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from servetune.launch import LiveServer

RunsDirOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--runs-dir",
        help="Where to look, recursively (launches, bench runs, tune trials); default $SERVETUNE_RUNS_DIR or ./runs.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _runs_dir(runs_dir: Path | None) -> Path:
    from servetune.launch import RUNS_DIR_ENV

    root = runs_dir if runs_dir is not None else Path(os.environ.get(RUNS_DIR_ENV, "runs"))
    if root.exists() and not root.is_dir():
        from servetune.errors import SpecError

        option = "--runs-dir" if runs_dir is not None else f"${RUNS_DIR_ENV}"
        raise SpecError(f"{option} {root} is a file, not a directory", help="give the runs directory (default ./runs)")
    return root


def _age(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _as_dict(server: LiveServer) -> dict:
    rec = server.record
    return {
        "run_dir": str(server.run_dir),
        "state": server.state,
        "pid": rec.pid,
        "pgid": rec.pgid,
        "pids": server.pids,
        "leader_alive": server.leader_alive,
        "host": rec.host,
        "port": rec.port,
        "model": rec.model,
        "age_s": round(server.age_s, 1),
        "started_at": rec.started_at,
        "servetune_pid": rec.servetune_pid,
    }


def _print_table(servers: list[LiveServer], root: Path) -> None:
    """The table, with every run name whole (`servetune stop` takes it): the run column never wraps
    and the others wrap first; a table that cannot fit the terminal is printed wider than it."""
    from rich.console import Console
    from rich.table import Table

    rows = []
    for s in servers:
        try:
            shown = str(s.run_dir.relative_to(root))
        except ValueError:
            shown = str(s.run_dir)
        state = "[bold red]orphan[/]" if s.state == "orphan" else "running"
        pid = str(s.record.pid) if s.leader_alive else f"{s.record.pid} (gone; {len(s.pids)} left)"
        rows.append(
            (shown, state, pid, str(s.record.port), s.record.model or "-", _age(s.age_s), str(s.record.servetune_pid))
        )
    run_width = max(len("run"), *(len(row[0]) for row in rows))
    table = Table(title=f"servers started by servetune under {root}", title_justify="left")
    table.add_column("run", no_wrap=True, min_width=run_width, overflow="fold")
    short = {"state": 7, "port": 5, "age": 6}  # never wrapped: "running", a port, "23h59m"
    for column in ("state", "pid", "port", "model", "age", "servetune pid"):
        width = short.get(column)
        table.add_column(column, no_wrap=width is not None, min_width=width or 6, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console()
    # the run column, the others at their narrowest, and the borders and padding
    needed = run_width + sum(short.values()) + 3 * 6 + 7 * 3 + 1
    if console.width < needed:
        console = Console(width=needed)
    console.print(table)


def _resolve_run(run: str, root: Path) -> Path:
    from servetune.errors import SpecError

    for candidate in (Path(run), root / run):
        if (candidate / "server.json").is_file():
            return candidate
    raise SpecError(
        f"{run!r} is not a run directory with a recorded server (no server.json there, nor under {root})",
        help="`servetune runs` lists the run directories whose server still runs",
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("runs")
    def runs(runs_dir: RunsDirOpt = None, as_json: JsonOpt = False) -> None:
        """List the servers servetune started that still run: pid, port, model, age, and whether the
        servetune that started it is gone (orphan)."""
        from servetune.launch import find_servers

        root = _runs_dir(runs_dir)
        servers = find_servers(root) if root.is_dir() else []
        if as_json:
            print(json.dumps([_as_dict(s) for s in servers], indent=2))
        elif servers:
            _print_table(servers, root)
        else:
            print(f"no server started by servetune runs under {root}")

    @app.command("stop")
    def stop(
        run: Annotated[
            Optional[str], typer.Argument(help="A run directory (a path, or a name under --runs-dir).")
        ] = None,
        all_orphans: Annotated[
            bool, typer.Option("--all-orphans", help="Stop every server whose servetune is gone.")
        ] = False,
        runs_dir: RunsDirOpt = None,
        grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds between SIGTERM and SIGKILL.")] = 10.0,
        as_json: JsonOpt = False,
    ) -> None:
        """Stop servers servetune started: only a process group whose leader is the recorded one (pid,
        start time, group) is signalled: SIGTERM, then SIGKILL after --grace. Never by name or port."""
        from servetune.errors import ServetuneError, SpecError
        from servetune.launch import find_servers, stop_recorded_server

        if (run is None) == (not all_orphans):
            raise SpecError(
                "`servetune stop` needs exactly one of RUN or --all-orphans",
                help="`servetune runs` lists the live servers and their run directories",
            )
        root = _runs_dir(runs_dir)
        if run is not None:
            targets = [_resolve_run(run, root)]
        else:
            targets = [s.run_dir for s in (find_servers(root) if root.is_dir() else []) if s.state == "orphan"]
        stopped = [s for s in (stop_recorded_server(t, grace_s=grace) for t in targets) if s is not None]
        if as_json:
            print(json.dumps([_as_dict(s) for s in stopped], indent=2))
        else:
            for s in stopped:
                print(f"stopped {s.run_dir} (pid {s.record.pid}, port {s.record.port})")
        if run is not None and not stopped:
            raise ServetuneError(
                f"no server of {run} is running (nothing was signalled)",
                help="`servetune runs` lists the live servers",
            )
        if all_orphans and not stopped and not as_json:
            print(f"no orphaned server under {root}")
