"""Exit-code discipline for the CLI: user errors print a message, bugs print a crash report."""

from __future__ import annotations

import sys
import traceback

import typer

try:  # recent typer vendors click (and does not install it); its usage errors are its own
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import ClickException

from servetune.errors import ServetuneError


def run_app(app: typer.Typer, argv: list[str]) -> int:
    """Run `app` on `argv` and return the process exit code."""
    try:
        result = typer.main.get_command(app).main(args=argv, prog_name="servetune", standalone_mode=False)
    except ServetuneError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except typer.Exit as exc:
        return exc.exit_code
    except ClickException as exc:
        exc.show()
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception:
        print("servetune hit an internal error (this is a bug); please report it with this trace:", file=sys.stderr)
        traceback.print_exc()
        return 3
    return result if isinstance(result, int) else 0
