"""Workload files: shipped ones load, bad ones fail with file:line, key path and a fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servetune.bench.workloads import list_workloads, load_workload
from servetune.cli import app
from servetune.errors import SpecError, UnknownNameError

SHIPPED = {"single-image-stream", "cached-images", "text-chat", "long-context"}


def test_every_shipped_workload_loads_and_is_named_after_its_file():
    """Each shipped file validates, and its `name` equals the file's stem."""
    workloads = list_workloads()
    assert {w.name for w in workloads} >= SHIPPED
    for w in workloads:
        assert load_workload(w.name) == w
        assert w.tune, f"{w.name} has no default search space"


def test_single_image_stream_matches_the_h200_baseline_shape():
    """One unique 720p JPEG per request, 128/128 tokens, 384 requests at concurrency 64."""
    w = load_workload("single-image-stream")
    assert (w.kind, w.requests, w.max_concurrency, w.input_tokens, w.output_tokens) == ("multimodal", 384, 64, 128, 128)
    assert (w.images.resolution, w.images.format, w.images.reuse, w.images.size()) == (
        "720p",
        "jpeg",
        "unique",
        (1280, 720),
    )
    assert load_workload("cached-images").images.reuse == "pool"


def test_unknown_workload_lists_the_options_and_suggests_the_closest():
    """A misspelt name gets a did-you-mean and the list."""
    with pytest.raises(UnknownNameError) as info:
        load_workload("text-chta")
    assert info.value.render() == (
        "error[unknown-name]: unknown workload 'text-chta'\n"
        "   = help: did you mean 'text-chat'?\n"
        "   = note: available workloads: cached-images, long-context, single-image-stream, text-chat\n"
        "   = note: `servetune workloads list` describes them"
    )


BAD = [
    (
        "requests: abc\n",
        "Input should be a valid integer, unable to parse string as an integer, but got 'abc'",
        3,
        1,
        "requests",
    ),
    ("requets: 3\n", "unknown key 'requets' in workload", 3, 1, "requets"),
    ("kind: multimodal\n", "`images` must be set when `kind: multimodal`, but got none", 1, 1, "(top level)"),
    (
        "kind: multimodal\nimages:\n  resolution: 720\n",
        "Input should be a valid string, but got 720",
        5,
        3,
        "images.resolution",
    ),
    (
        "kind: multimodal\nimages:\n  resolution: 720q\n",
        "String should match pattern '^(4k|1080p|720p|360p|[1-9][0-9]*x[1-9][0-9]*)$', but got '720q'",
        5,
        3,
        "images.resolution",
    ),
    (
        "tune:\n  max_running_requests: {int: [64, 8]}\n",
        "`low <= high` must hold, but got (low=64, high=8)",
        4,
        3,
        "tune.max_running_requests",
    ),
    ("tune:\n  a: {in: [1, 2]}\n", "a distribution needs one key of `int`, `float` or `choice`", 4, 3, "tune.a"),
    ("tune:\n  a: {int: [1, 2], lg: true}\n", "unknown key 'lg' in workload", 4, 20, "tune.a.lg"),
    ("max_concurrency: 0\n", "Input should be greater than or equal to 1, but got 0", 3, 1, "max_concurrency"),
]


@pytest.mark.parametrize(("tail", "message", "line", "column", "key"), BAD)
def test_a_bad_workload_file_names_the_line_and_key(tmp_path: Path, tail, message, line, column, key):
    """Schema errors carry file:line:col and the dotted key path."""
    path = tmp_path / "w.yaml"
    path.write_text("name: mine\nsummary: s\n" + tail)
    with pytest.raises(SpecError) as info:
        load_workload(path)
    err = info.value
    assert (err.message, str(err.location), err.key_path) == (message, f"{path}:{line}:{column}", key)


def test_malformed_yaml_points_at_the_line(tmp_path: Path):
    """A YAML syntax error is reported with its position, no traceback."""
    path = tmp_path / "broken.yaml"
    path.write_text("name: mine\nsummary: [oops\nrequests: 3\n")
    with pytest.raises(SpecError) as info:
        load_workload(str(path))
    assert info.value.message.startswith("YAML syntax error: ")
    assert str(info.value.location).startswith(f"{path}:3:")


def test_python_tags_are_refused(tmp_path: Path):
    """Only safe YAML: a !!python tag is an error, never constructed."""
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['true']\nsummary: s\n")
    with pytest.raises(SpecError, match="unsafe or unknown YAML tag"):
        load_workload(path)


def test_a_workload_file_must_be_a_mapping(tmp_path: Path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n")
    with pytest.raises(SpecError) as info:
        load_workload(path)
    assert (
        info.value.render()
        == f"error[invalid-spec]: a workload file must be a mapping of keys to values, but got list\n  --> {path}:1:1"
    )


def test_a_missing_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SpecError, match="workload file not found: .*nope.yaml"):
        load_workload(tmp_path / "nope.yaml")


def test_cli_lists_shows_and_rejects_workloads():
    """`servetune workloads list|show` print the shipped data; an unknown name exits 1."""
    runner = CliRunner()
    listed = runner.invoke(app, ["workloads", "list"])
    assert listed.exit_code == 0 and "single-image-stream" in listed.output
    as_json = json.loads(runner.invoke(app, ["workloads", "list", "--json"]).output)
    assert {w["name"] for w in as_json} >= SHIPPED
    shown = json.loads(runner.invoke(app, ["workloads", "show", "text-chat", "--json"]).output)
    assert shown["name"] == "text-chat" and "max_running_requests" in shown["tune"]
    assert "name: long-context" in runner.invoke(app, ["workloads", "show", "long-context"]).output


def test_cli_unknown_workload_exits_1_without_a_traceback():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "servetune", "workloads", "show", "single-imag"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "did you mean 'single-image-stream'?" in done.stderr and "Traceback" not in done.stderr
