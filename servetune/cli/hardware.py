"""`servetune hardware`: detect GPUs through NVML, or show a named profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    """Add `hardware`."""

    @app.command("hardware")
    def hardware_cmd(
        gpu: Annotated[
            Optional[str], typer.Option("--gpu", help="Show a named profile instead of detecting (e.g. h100-sxm:8).")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
        save: Annotated[
            Optional[Path],
            typer.Option("--save", help="Write the profile as YAML (use it later with --hardware FILE)."),
        ] = None,
        list_: Annotated[bool, typer.Option("--list", help="List the named GPU profiles.")] = False,
        record_nvml: Annotated[
            Optional[Path],
            typer.Option(
                "--record-nvml", help="Also write NVML's raw answers to this JSON file (a replayable test fixture)."
            ),
        ] = None,
        replay_nvml: Annotated[
            Optional[Path],
            typer.Option("--replay-nvml", help="Answer NVML calls from a recording instead of the driver."),
        ] = None,
    ) -> None:
        """Detect this machine's GPUs (NVML): name, compute capability, memory, count, NVLink,
        driver and CUDA versions."""
        from servetune import hardware as hw
        from servetune.cli._output import check_output_file

        for path, option in ((save, "--save"), (record_nvml, "--record-nvml")):
            if path is not None:
                check_output_file(path, option)

        if list_:
            for name in hw.profile_names():
                g = hw.named_profile(name).gpu
                print(
                    f"{name:<10} {g.name:<24} {g.arch:<6} {g.memory_mib / 1024:6.1f} GiB  "
                    f"default count {g.count}{'  NVLink' if g.nvlink else ''}"
                )
            return
        profile = hw.named_profile(gpu) if gpu else hw.detect(record_to=record_nvml, replay_from=replay_nvml)
        if save:
            hw.save_profile(profile, save)
        if as_json:
            print(json.dumps(profile.model_dump(mode="json"), indent=2))
        else:
            g = profile.gpu
            print(
                f"{g.count}x {g.name}  {g.arch}  {g.memory_mib} MiB ({g.memory_gib:.1f} GiB) per GPU  "
                f"NVLink {'yes' if g.nvlink else 'no'}  driver {g.driver_version or '-'}  "
                f"CUDA {g.cuda_driver_version or '-'}  [{profile.source}]"
            )
        if save:
            print(f"saved {save}", flush=True)
