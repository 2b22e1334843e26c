"""Stand-ins for what tests cannot have here: a GPU and a full SGLang install. Not part of the
user-facing command set; used by servetune's own tests and benchmarks, and for trying the tool
on a machine without a GPU.

- `standin` (`python -m servetune.testing.standin`): a small HTTP server that stands in for
  SGLang. It accepts SGLang's flags, serves its endpoints (`/health_generate`, `/server_info`,
  `/v1/chat/completions`, ...), can be told to start slowly, crash, run out of memory or hang,
  and its throughput depends on its flags (`servetune.testing.standin._rules`).
- `standin_command()` / `StandinRunner`: the real runner (`servetune.runner.SglangRunner`: real
  processes, ports, signals and HTTP) with the stand-in's command instead of SGLang's.
- `FakeRunner` (`servetune.testing.fake`): no process at all; metrics come from a function of the
  config. It stands in for launch + benchmark in the tuner's unit tests.
"""

from __future__ import annotations

import sys
from typing import Any

from servetune.runner import SglangRunner
from servetune.testing.fake import FakeCall, FakeRunner

__all__ = ["FakeCall", "FakeRunner", "StandinRunner", "standin_command"]


def standin_command(python: str | None = None) -> list[str]:
    """The command prefix that starts the stand-in server (the argv is appended, as for SGLang)."""
    return [python or sys.executable, "-m", "servetune.testing.standin"]


class StandinRunner(SglangRunner):
    """An `SglangRunner` whose servers are the stand-in (`standin_command()`), not SGLang.

    Args:
        options: `LaunchOptions`; its `sglang_cmd` is replaced by the stand-in's command.
        kwargs: Passed to `SglangRunner` (`client`, `model`).
    """

    def __init__(self, options: Any = None, **kwargs: Any) -> None:
        from servetune.launch import LaunchOptions

        options = (options or LaunchOptions()).model_copy(update={"sglang_cmd": standin_command()})
        super().__init__(options, **kwargs)
