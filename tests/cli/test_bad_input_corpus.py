"""A corpus of bad inputs across every command: each gives exit 1 (user error) or 2 (usage), a message
that names the offending input (the option or the file), and never a traceback or "this is a bug".

tests/cli/test_bad_input.py pins whole messages for the resolver's inputs; this table pins the
class of outcome, for every command and every kind of bad input (missing, unreadable, malformed,
wrongly typed, out of range, unknown, unwritable, unreachable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from servetune.cli import app
from servetune.cli._run import run_app

BASE = ("--model", "qwen3-8b", "--gpu", "h200", "--sglang-version", "0.5.23")
# an executable that passes the launcher's command check; no case may get as far as running it
NO_LAUNCH = ("--sglang-cmd", "/bin/false")
TUNE = ("tune", *BASE, *NO_LAUNCH, "--trials", "1", "--confirm", "0", "--quiet")
BENCH_URL = ("bench", "--workload", "text-chat", "--requests", "1")


@dataclass(frozen=True)
class Case:
    """One bad input: the argv ({d} is the corpus directory), what the message must name, and how it is run."""

    name: str
    argv: tuple[str, ...]
    names: str
    codes: tuple[int, ...] = (1,)
    stdout_to: str | None = None
    """Run in a subprocess with stdout sent to this file (e.g. /dev/full)."""
    absent: str | None = None
    """A path ({d}-relative) the command must not create."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set for the run (over the test's own)."""
    also: str | None = None
    """A second text the message must hold (the reason, besides the input named)."""


def _model(config: bytes | str | dict | list) -> bytes:
    if isinstance(config, (dict, list)):
        return json.dumps(config).encode()
    return config if isinstance(config, bytes) else config.encode()


_DENSE = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 12288,
    "vocab_size": 151936,
}

FILES: dict[str, bytes | str] = {
    "notyaml.yaml": "a: [1, 2\nb: {\n",
    "list.yaml": "- 1\n- 2\n",
    "scalar.yaml": "just a string\n",
    "empty.yaml": "",
    "binary.yaml": b"\xff\xfe\x00\x81 bad: bytes\n",
    "notjson.json": "this is not json {",
    "list.json": "[1, 2, 3]",
    "afile": "a regular file, used where a directory is expected\n",
    "notadb.db": "not an SQLite database, just text\n" * 10,
    "wl_badtype.yaml": "name: w\nkind: text\nsummary: s\nrequests: lots\n",
    "wl_unknown_key.yaml": "name: w\nkind: text\nsummary: s\nrequestz: 10\n",
    "hw_list_gpu.yaml": "gpu: [1, 2]\n",
    "m_hidden_big/config.json": _model({**_DENSE, "hidden_size": "big"}),
    "m_layers_neg/config.json": _model({**_DENSE, "num_hidden_layers": -3}),
    "m_nonutf8/config.json": b'{"architectures": ["Qwen3ForCausalLM"], "model_type": "\xff\xfe"}',
    "m_textcfg_str/config.json": _model({**_DENSE, "text_config": "a string"}),
    "m_badjson/config.json": '{"architectures": ["Qwen3ForCausalLM"], "hidden_size": ',
    "m_list/config.json": _model([1, 2]),
    "m_archs_str/config.json": _model({**_DENSE, "architectures": "Qwen3ForCausalLM"}),
    "m_cfgdir/config.json/x": "config.json is a directory here",
    "run_badjson/server_info_diff.json": "{not json",
    "run_badshape/server_info_diff.json": '{"fields": 3}',
}
DIRS = ("adir",)
LINKS = {"loop": "loop", "dangling": "nowhere-at-all"}
"""Symbolic links: a loop (to itself) and one that points nowhere."""
LATIN1 = b"# \xe9t\xe9\n"  # 'été' in Latin-1: byte 0xe9 at offset 2 of line 1, column 3
FILES.update(
    {
        "latin_preset.yaml": b"name: p\nsummary: s\nset:\n  stream_interval: 2  # caf\xe9\n",
        "latin_rules.yaml": LATIN1 + b"rules: []\n",
        "latin_workload.yaml": b"name: w\nsummary: s\nkind: text\n" + LATIN1,
        "latin_hw.yaml": b"gpu:\n  name: H\xe9\n",
        "latin_space.yaml": b"summary: s\ntune:\n" + LATIN1,
        "sp_one_bound.yaml": "summary: s\ntune:\n  max_running_requests: {int: [1]}\n",
        "sp_unknown_option.yaml": "summary: s\ntune:\n  max_running_requests: {int: [8, 64], lg: true}\n",
        "sp_no_kind.yaml": "summary: s\ntune:\n  max_running_requests: {floaty: [8, 64]}\n",
        "sp_bad_bound.yaml": "summary: s\ntune:\n  max_running_requests: {int: [a, 64]}\n",
        "sp_out_of_range.yaml": "summary: s\ntune:\n  mem_fraction_static: {float: [0.5, 1.5]}\n",
        "sp_typo.yaml": "summary: s\ntune:\n  max_runing_requests: {int: [8, 64]}\n",
        "sp_bad_choice.yaml": "summary: s\ntune:\n  schedule_policy: {choice: [fcfs, bogus]}\n",
        "sp_float_for_int.yaml": "summary: s\ntune:\n  max_running_requests: {float: [8, 64]}\n",
        "sp_scalar.yaml": "summary: s\ntune:\n  max_running_requests: 5\n",
        "sp_empty_choice.yaml": "summary: s\ntune:\n  schedule_policy: {choice: []}\n",
    }
)
_PYDANTIC_INTERNALS = ("function-after", "IntDistribution", "FloatDistribution", "ChoiceDistribution", "Field required")


def _case(name: str, argv: tuple[str, ...] | list[str], names: str, **kw) -> Case:
    return Case(name, tuple(argv), names, **kw)


CASES = [
    # resolve: pins, counts, model configs, data files, outputs
    _case("resolve --set tp_size=0", ("resolve", *BASE, "--set", "tp_size=0"), "tp_size"),
    _case("resolve --set nnodes=0", ("resolve", *BASE, "--set", "nnodes=0"), "nnodes"),
    _case("resolve --set tp_size=-2", ("resolve", *BASE, "--set", "tp_size=-2"), "tp_size"),
    _case("resolve --set tp_size=two", ("resolve", *BASE, "--set", "tp_size=two"), "tp_size"),
    # numbers SGLang's parser takes but cannot use (servetune.catalog.ranges)
    _case("resolve --set pp_size=0", ("resolve", *BASE, "--set", "pp_size=0"), "pp_size must be >= 1"),
    _case("resolve --set mem_fraction_static=1.5", ("resolve", *BASE, "--set", "mem_fraction_static=1.5"), "< 1"),
    _case("resolve --set mem_fraction_static=0", ("resolve", *BASE, "--set", "mem_fraction_static=0"), "> 0"),
    _case("resolve --set max_running_requests=0", ("resolve", *BASE, "--set", "max_running_requests=0"), ">= 1"),
    _case("resolve --set chunked_prefill_size=0", ("resolve", *BASE, "--set", "chunked_prefill_size=0"), "-1 or"),
    _case("resolve --set page_size=-4", ("resolve", *BASE, "--set", "page_size=-4"), "page_size"),
    _case(
        "launch --set cuda_graph_max_bs_decode=0",
        ("launch", *BASE, *NO_LAUNCH, "--set", "cuda_graph_max_bs_decode=0"),
        "cuda_graph_max_bs_decode",
    ),
    _case("resolve --tp 0", ("resolve", *BASE, "--tp", "0"), "--tp", codes=(2,)),
    _case("resolve --nnodes 0", ("resolve", *BASE, "--nnodes", "0"), "--nnodes", codes=(2,)),
    _case("resolve --format unknown", ("resolve", *BASE, "--format", "xml"), "--format", codes=(2,)),
    _case("resolve --gpu h200:0", ("resolve", "--model", "qwen3-8b", "--gpu", "h200:0"), "h200:0"),
    _case("resolve --env without =", ("resolve", *BASE, "--env", "SGLANG_X"), "--env"),
    _case(
        "resolve --out into a missing directory",
        ("resolve", *BASE, "-f", "json", "--out", "{d}/nodir/r.json"),
        "{d}/nodir/r.json",
        absent="nodir",
    ),  # fmt: skip
    _case("resolve --out a directory", ("resolve", *BASE, "-f", "json", "--out", "{d}/adir"), "{d}/adir"),
    _case("resolve --out /dev/full", ("resolve", *BASE, "-f", "json", "--out", "/dev/full"), "/dev/full"),
    _case(
        "resolve --out under a file", ("resolve", *BASE, "-f", "yaml", "--out", "{d}/afile/c.yaml"), "{d}/afile/c.yaml"
    ),  # fmt: skip
    _case("resolve stdout on a full disk", ("resolve", *BASE, "-f", "json"), "stdout", stdout_to="/dev/full"),
    _case("resolve table on a full disk", ("resolve", *BASE), "stdout", stdout_to="/dev/full"),
    _case(
        "config.json hidden_size a string", ("resolve", "--model", "{d}/m_hidden_big", "--gpu", "h200"), "hidden_size"
    ),  # fmt: skip
    _case(
        "config.json negative layer count",
        ("resolve", "--model", "{d}/m_layers_neg", "--gpu", "h200"),
        "num_hidden_layers",
    ),  # fmt: skip
    _case(
        "config.json not UTF-8", ("resolve", "--model", "{d}/m_nonutf8", "--gpu", "h200"), "{d}/m_nonutf8/config.json"
    ),  # fmt: skip
    _case(
        "config.json text_config a string", ("resolve", "--model", "{d}/m_textcfg_str", "--gpu", "h200"), "text_config"
    ),  # fmt: skip
    _case(
        "config.json malformed", ("resolve", "--model", "{d}/m_badjson", "--gpu", "h200"), "{d}/m_badjson/config.json"
    ),  # fmt: skip
    _case("config.json a list", ("resolve", "--model", "{d}/m_list", "--gpu", "h200"), "{d}/m_list/config.json"),
    _case(
        "config.json architectures a string",
        ("resolve", "--model", "{d}/m_archs_str", "--gpu", "h200"),
        "architectures",
    ),  # fmt: skip
    _case("config.json is a directory", ("resolve", "--model", "{d}/m_cfgdir", "--gpu", "h200"), "config.json"),
    _case(
        "--hardware missing", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/missing.yaml"), "{d}/missing.yaml"
    ),  # fmt: skip
    _case("--hardware a directory", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/adir"), "{d}/adir"),
    _case(
        "--hardware malformed YAML",
        ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/notyaml.yaml"),
        "{d}/notyaml.yaml",
    ),  # fmt: skip
    _case("--hardware a list", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/list.yaml"), "{d}/list.yaml"),
    _case("--hardware empty", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/empty.yaml"), "{d}/empty.yaml"),
    _case(
        "--hardware not UTF-8", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/binary.yaml"), "{d}/binary.yaml"
    ),  # fmt: skip
    _case(
        "--hardware gpu a list",
        ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/hw_list_gpu.yaml"),
        "{d}/hw_list_gpu.yaml",
    ),  # fmt: skip
    _case("--rules a directory", ("resolve", *BASE, "--rules", "{d}/adir"), "{d}/adir"),
    _case("--rules a list", ("resolve", *BASE, "--rules", "{d}/list.yaml"), "{d}/list.yaml"),
    _case("--rules a scalar", ("resolve", *BASE, "--rules", "{d}/scalar.yaml"), "{d}/scalar.yaml"),
    _case("--rules not UTF-8", ("resolve", *BASE, "--rules", "{d}/binary.yaml"), "{d}/binary.yaml"),
    _case("--preset malformed YAML", ("resolve", *BASE, "--preset", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case("--preset a list", ("resolve", *BASE, "--preset", "{d}/list.yaml"), "{d}/list.yaml"),
    _case("--preset a directory", ("resolve", *BASE, "--preset", "{d}/adir"), "adir"),
    _case("--preset empty", ("resolve", *BASE, "--preset", "{d}/empty.yaml"), "{d}/empty.yaml"),
    _case("--workload malformed YAML", ("resolve", *BASE, "--workload", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case("--workload unknown", ("resolve", *BASE, "--workload", "text-chatt"), "text-chatt"),
    _case("--workload wrong type", ("resolve", *BASE, "--workload", "{d}/wl_badtype.yaml"), "requests"),
    # explain
    _case("explain unknown field", ("explain", *BASE, "max_runing_requests"), "max_runing_requests"),
    _case("explain --run without a diff", ("explain", *BASE, "--run", "{d}/adir"), "{d}/adir"),
    _case(
        "explain --run malformed diff",
        ("explain", *BASE, "--run", "{d}/run_badjson"),
        "{d}/run_badjson/server_info_diff.json",
    ),  # fmt: skip
    _case(
        "explain --run diff of the wrong shape",
        ("explain", *BASE, "--run", "{d}/run_badshape"),
        "{d}/run_badshape/server_info_diff.json",
    ),  # fmt: skip
    _case("explain --set tp_size=0", ("explain", *BASE, "--set", "tp_size=0"), "tp_size"),
    _case("explain bad config.json", ("explain", "--model", "{d}/m_hidden_big", "--gpu", "h200"), "hidden_size"),
    # hardware and schema
    _case("hardware --replay-nvml not JSON", ("hardware", "--replay-nvml", "{d}/notjson.json"), "{d}/notjson.json"),
    _case("hardware --replay-nvml missing", ("hardware", "--replay-nvml", "{d}/missing.json"), "{d}/missing.json"),
    _case("hardware --replay-nvml a list", ("hardware", "--replay-nvml", "{d}/list.json"), "{d}/list.json"),
    _case("hardware --replay-nvml a directory", ("hardware", "--replay-nvml", "{d}/adir"), "{d}/adir"),
    _case("hardware --gpu unknown", ("hardware", "--gpu", "h900"), "h900"),
    _case(
        "hardware --save into a missing directory",
        ("hardware", "--gpu", "h200", "--save", "{d}/nodir/hw.yaml"),
        "{d}/nodir/hw.yaml",
    ),  # fmt: skip
    _case("hardware --save a directory", ("hardware", "--gpu", "h200", "--save", "{d}/adir"), "{d}/adir"),
    _case("hardware --save /dev/full", ("hardware", "--gpu", "h200", "--save", "/dev/full"), "/dev/full"),
    _case("hardware stdout on a full disk", ("hardware", "--gpu", "h200", "--json"), "stdout", stdout_to="/dev/full"),
    _case("schema unknown kind", ("schema", "rulez"), "rulez"),
    _case(
        "schema --out into a missing directory", ("schema", "rule", "--out", "{d}/nodir/s.json"), "{d}/nodir/s.json"
    ),  # fmt: skip
    _case("schema --out a directory", ("schema", "rule", "--out", "{d}/adir"), "{d}/adir"),
    # rules, presets, catalog, workloads
    _case("rules show unknown id", ("rules", "show", "no-such-rule"), "no-such-rule"),
    _case("rules list --rules missing", ("rules", "list", "--rules", "{d}/missing.yaml"), "{d}/missing.yaml"),
    _case("rules list --rules malformed", ("rules", "list", "--rules", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case("rules lint --rules a directory", ("rules", "lint", "--rules", "{d}/adir"), "{d}/adir"),
    _case("rules list stdout on a full disk", ("rules", "list"), "stdout", stdout_to="/dev/full"),
    _case("presets show unknown", ("presets", "show", "text-chat-latencyy"), "text-chat-latencyy"),
    _case("presets show malformed", ("presets", "show", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case("presets show a directory", ("presets", "show", "{d}/adir"), "adir"),
    _case("presets show not UTF-8", ("presets", "show", "{d}/binary.yaml"), "{d}/binary.yaml"),
    _case("presets show a list", ("presets", "show", "{d}/list.yaml"), "{d}/list.yaml"),
    _case("catalog show unknown version", ("catalog", "show", "0.5.99"), "0.5.99"),
    _case("catalog show unknown field", ("catalog", "show", "0.5.23", "max_runing_requests"), "max_runing_requests"),
    _case("catalog show unknown flag", ("catalog", "show", "0.5.23", "--", "--tp-sise"), "--tp-sise"),
    _case("catalog show unknown env var", ("catalog", "show", "0.5.23", "SGLANG_NO_SUCH_VAR"), "SGLANG_NO_SUCH_VAR"),
    _case(
        "catalog sync --python and --sglang-cpu",
        ("catalog", "sync", "--python", "python", "--sglang-cpu", "1"),
        "--python",
    ),  # fmt: skip
    _case("catalog sync --python missing", ("catalog", "sync", "--python", "{d}/no-python"), "{d}/no-python"),
    _case(
        "catalog sync --out a file", ("catalog", "sync", "--python", sys.executable, "--out", "{d}/afile"), "{d}/afile"
    ),  # fmt: skip
    _case("workloads show unknown", ("workloads", "show", "text-chatt"), "text-chatt"),
    _case("workloads show malformed", ("workloads", "show", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case("workloads show a directory", ("workloads", "show", "{d}/adir"), "adir"),
    _case("workloads show unknown key", ("workloads", "show", "{d}/wl_unknown_key.yaml"), "requestz"),
    _case("workloads show empty", ("workloads", "show", "{d}/empty.yaml"), "{d}/empty.yaml"),
    _case("workloads list stdout on a full disk", ("workloads", "list"), "stdout", stdout_to="/dev/full"),
    # launch
    _case("launch --port 70000", ("launch", *BASE, *NO_LAUNCH, "--port", "70000"), "--port"),
    _case("launch --port 0", ("launch", *BASE, *NO_LAUNCH, "--port", "0"), "--port"),
    _case("launch --port -1", ("launch", *BASE, *NO_LAUNCH, "--port", "-1"), "--port"),
    _case(
        "launch --sglang-cmd unbalanced quote", ("launch", *BASE, "--sglang-cmd", 'python "-m sglang'), "--sglang-cmd"
    ),  # fmt: skip
    _case("launch --sglang-cmd missing program", ("launch", *BASE, "--sglang-cmd", "{d}/no-sglang"), "no-sglang"),
    _case(
        "launch --run-dir under a file", ("launch", *BASE, *NO_LAUNCH, "--run-dir", "{d}/afile/sub"), "{d}/afile/sub"
    ),  # fmt: skip
    _case(
        "launch --startup-timeout 0",
        ("launch", *BASE, *NO_LAUNCH, "--startup-timeout", "0"),
        "--startup-timeout",
        codes=(2,),
    ),  # fmt: skip
    _case("launch --set tp_size=0", ("launch", *BASE, *NO_LAUNCH, "--set", "tp_size=0"), "tp_size"),
    _case(
        "launch bad config.json", ("launch", "--model", "{d}/m_textcfg_str", "--gpu", "h200", *NO_LAUNCH), "text_config"
    ),  # fmt: skip
    # bench
    _case("bench --url not a URL", (*BENCH_URL, "--url", "notaurl"), "--url"),
    _case("bench --url wrong scheme", (*BENCH_URL, "--url", "ftp://127.0.0.1:1"), "--url"),
    _case("bench --url closed port", (*BENCH_URL, "--url", "http://127.0.0.1:1"), "127.0.0.1:1"),
    _case("bench --url port out of range", (*BENCH_URL, "--url", "http://127.0.0.1:70000"), "--url"),
    _case("bench unknown workload", ("bench", "--workload", "nope", "--url", "http://127.0.0.1:1"), "nope"),
    _case(
        "bench workload malformed",
        ("bench", "--workload", "{d}/notyaml.yaml", "--url", "http://127.0.0.1:1"),
        "{d}/notyaml.yaml",
    ),  # fmt: skip
    _case("bench --slo malformed", (*BENCH_URL, "--url", "http://127.0.0.1:1", "--slo", "ttft<fast"), "ttft<fast"),
    _case("bench --client unknown", (*BENCH_URL, "--url", "http://127.0.0.1:1", "--client", "curl"), "curl"),
    _case(
        "bench --requests 0",
        (*BENCH_URL[:3], "--requests", "0", "--url", "http://127.0.0.1:1"),
        "--requests",
        codes=(2,),
    ),  # fmt: skip
    _case(
        "bench --sglang-cmd unbalanced quote",
        ("bench", *BASE, "--workload", "text-chat", "--sglang-cmd", "python 'x"),
        "--sglang-cmd",
    ),  # fmt: skip
    _case(
        "bench --run-dir under a file",
        ("bench", *BASE, "--workload", "text-chat", *NO_LAUNCH, "--run-dir", "{d}/afile/sub"),
        "{d}/afile/sub",
    ),  # fmt: skip
    # runs and stop
    _case("runs --runs-dir a file", ("runs", "--runs-dir", "{d}/afile"), "{d}/afile"),
    _case("stop unknown run", ("stop", "no-such-run", "--runs-dir", "{d}/adir"), "no-such-run"),
    # compare
    _case("compare with no configs", ("compare", *BASE, *NO_LAUNCH), "--a"),
    _case(
        "compare --rounds 0", ("compare", *BASE, *NO_LAUNCH, "--a-no-rules", "--rounds", "0"), "--rounds", codes=(2,)
    ),  # fmt: skip
    _case("compare --a unknown preset", ("compare", *BASE, *NO_LAUNCH, "--a", "nope", "--b-no-rules"), "nope"),
    _case(
        "compare --a-set unknown field",
        ("compare", *BASE, *NO_LAUNCH, "--a-set", "max_runing_requests=1", "--b-no-rules"),
        "max_runing_requests",
    ),  # fmt: skip
    _case(
        "compare --objective capacity without --slo",
        ("compare", *BASE, *NO_LAUNCH, "--a-no-rules", "--objective", "capacity"),
        "--slo",
    ),  # fmt: skip
    _case(
        "compare --run-dir under a file",
        ("compare", *BASE, *NO_LAUNCH, "--a-no-rules", "--b-no-rules", "--run-dir", "{d}/afile/sub"),
        "{d}/afile/sub",
    ),  # fmt: skip
    _case(
        "compare --client unknown",
        ("compare", *BASE, *NO_LAUNCH, "--a-no-rules", "--b-no-rules", "--client", "curl"),
        "curl",
    ),  # fmt: skip
    _case(
        "compare --sglang-cmd unbalanced quote",
        ("compare", *BASE, "--a-no-rules", "--b-no-rules", "--sglang-cmd", "python 'x"),
        "--sglang-cmd",
    ),  # fmt: skip
    # tune and tune report
    _case("tune --storage mysql", (*TUNE, "--storage", "mysql://u@127.0.0.1/db"), "postgresql://"),
    _case("tune --storage not a URL", (*TUNE, "--storage", "tune.db"), "--storage"),
    _case(
        "tune --storage unreachable PostgreSQL", (*TUNE, "--storage", "postgresql://u@127.0.0.1:1/db"), "127.0.0.1:1"
    ),  # fmt: skip
    _case(
        "tune --storage SQLite in a missing directory",
        (*TUNE, "--storage", "sqlite:///{d}/nodir/t.db"),
        "{d}/nodir/t.db",
        absent="nodir",
    ),  # fmt: skip
    _case("tune --storage SQLite not a database", (*TUNE, "--storage", "sqlite:///{d}/notadb.db"), "{d}/notadb.db"),
    _case("tune --storage SQLite a directory", (*TUNE, "--storage", "sqlite:///{d}/adir"), "{d}/adir"),
    _case("tune --run-dir under a file", (*TUNE, "--run-dir", "{d}/afile/sub"), "{d}/afile/sub"),
    _case("tune --out into a missing directory", (*TUNE, "--out", "{d}/nodir/best.yaml"), "{d}/nodir/best.yaml"),
    _case("tune --space missing", (*TUNE, "--space", "{d}/missing.yaml"), "{d}/missing.yaml"),
    _case("tune --space malformed", (*TUNE, "--space", "{d}/notyaml.yaml"), "{d}/notyaml.yaml"),
    _case(
        "tune --space-set malformed", (*TUNE, "--space-set", "max_running_requests=int(lots)"), "max_running_requests"
    ),  # fmt: skip
    _case("tune --space-set out of range", (*TUNE, "--space-set", "max_running_requests=int(0,64)"), "0 out of range"),
    _case(
        "tune --space-set sentinel inside a range", (*TUNE, "--space-set", "chunked_prefill_size=int(-1,8192)"), "-1 or"
    ),  # fmt: skip
    _case("tune --objective unknown", (*TUNE, "--objective", "speed"), "speed"),
    _case("tune --sampler unknown", (*TUNE, "--sampler", "grid"), "grid"),
    _case("tune --trials 0", (*TUNE, "--trials", "0"), "--trials", codes=(1, 2)),
    _case("tune --gpus not numbers", (*TUNE, "--gpus", "a,b"), "--gpus"),
    _case(
        "tune --sglang-cmd unbalanced quote",
        ("tune", *BASE, "--sglang-cmd", "python 'x", "--trials", "1"),
        "--sglang-cmd",
    ),  # fmt: skip
    _case("tune without --model", ("tune", "--gpu", "h200"), "--model", codes=(2,)),
    _case(
        "tune report missing SQLite file",
        ("tune", "report", "--storage", "sqlite:///{d}/missing.db"),
        "{d}/missing.db",
        absent="missing.db",
    ),  # fmt: skip
    _case("tune report --storage mysql", ("tune", "report", "--storage", "mysql://u@127.0.0.1/db"), "postgresql://"),
    _case(
        "tune report SQLite not a database", ("tune", "report", "--storage", "sqlite:///{d}/notadb.db"), "{d}/notadb.db"
    ),  # fmt: skip
    _case(
        "tune report unreachable PostgreSQL",
        ("tune", "report", "--storage", "postgresql://u@127.0.0.1:1/db"),
        "127.0.0.1:1",
    ),  # fmt: skip
    # symlink loops and dangling links: a path, said to be one, never an unknown name or a traceback
    _case("--hardware a symlink loop", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/loop"), "{d}/loop",
          also="symlink loop"),
    _case("--rules a symlink loop", ("resolve", *BASE, "--rules", "{d}/loop"), "{d}/loop", also="symlink loop"),
    _case("--preset a symlink loop", ("resolve", *BASE, "--preset", "{d}/loop"), "{d}/loop", also="symlink loop"),
    _case("--workload a symlink loop", ("resolve", *BASE, "--workload", "{d}/loop"), "{d}/loop", also="symlink loop"),
    _case("--model a symlink loop", ("resolve", "--model", "{d}/loop", "--gpu", "h200"), "{d}/loop",
          also="symlink loop"),
    _case("tune --space a symlink loop", (*TUNE, "--space", "{d}/loop"), "{d}/loop", also="symlink loop"),
    _case("bench --workload a symlink loop", (*BENCH_URL[:1], "--url", "http://127.0.0.1:1", "--workload", "{d}/loop"),
          "{d}/loop", also="symlink loop"),
    _case("--preset a dangling link", ("resolve", *BASE, "--preset", "{d}/dangling"), "{d}/dangling",
          also="broken symlink (to nowhere-at-all)"),
    _case("--model a dangling link", ("resolve", "--model", "{d}/dangling", "--gpu", "h200"), "{d}/dangling",
          also="broken symlink"),
    # files that are not UTF-8: the byte, its offset, line and column
    _case("--preset not UTF-8", ("resolve", *BASE, "--preset", "{d}/latin_preset.yaml"),
          "{d}/latin_preset.yaml:4:28", also="byte 0xe9 at offset 51 (line 4, column 28)"),
    _case("--rules not UTF-8", ("resolve", *BASE, "--rules", "{d}/latin_rules.yaml"), "{d}/latin_rules.yaml:1:3",
          also="byte 0xe9 at offset 2 (line 1, column 3)"),
    _case("--workload not UTF-8", ("resolve", *BASE, "--workload", "{d}/latin_workload.yaml"),
          "{d}/latin_workload.yaml:4:3", also="is not UTF-8 text"),
    _case("--hardware not UTF-8", ("resolve", "--model", "qwen3-8b", "--hardware", "{d}/latin_hw.yaml"),
          "{d}/latin_hw.yaml:2:10", also="byte 0xe9"),
    _case("tune --space not UTF-8", (*TUNE, "--space", "{d}/latin_space.yaml"), "{d}/latin_space.yaml:3:3",
          also="is not UTF-8 text"),
    # directories where a file is expected
    _case("--workload a directory", ("resolve", *BASE, "--workload", "{d}/adir"), "{d}/adir",
          also="a directory, not a file"),
    _case("tune --space a directory", (*TUNE, "--space", "{d}/adir"), "{d}/adir", also="a directory, not a file"),
    _case("--model a file", ("resolve", "--model", "{d}/afile", "--gpu", "h200"), "{d}/afile",
          also="not a model directory"),
    # run directories that cannot be made, given or from $SERVETUNE_RUNS_DIR
    _case("bench --run-dir uncreatable", ("bench", *BASE, "--workload", "text-chat", *NO_LAUNCH, "--run-dir",
          "/proc/nope/x"), "/proc/nope/x", also="cannot be created in /proc"),
    _case("launch --run-dir uncreatable", ("launch", *BASE, *NO_LAUNCH, "--run-dir", "/proc/nope/x"), "/proc/nope/x",
          also="cannot be created in /proc"),
    _case("tune --run-dir uncreatable", (*TUNE, "--run-dir", "/proc/nope/x"), "/proc/nope/x",
          also="cannot be created in /proc"),
    _case("compare --run-dir uncreatable", ("compare", *BASE, *NO_LAUNCH, "--a-no-rules", "--run-dir", "/proc/nope/x"),
          "/proc/nope/x", also="cannot be created in /proc"),
    _case("bench with SERVETUNE_RUNS_DIR uncreatable", ("bench", *BASE, "--workload", "text-chat", *NO_LAUNCH),
          "/proc/nope", also="$SERVETUNE_RUNS_DIR", env=(("SERVETUNE_RUNS_DIR", "/proc/nope"),)),
    _case("launch with SERVETUNE_RUNS_DIR uncreatable", ("launch", *BASE, *NO_LAUNCH), "/proc/nope",
          also="$SERVETUNE_RUNS_DIR", env=(("SERVETUNE_RUNS_DIR", "/proc/nope"),)),
    # search-space files: file:line:col and the key path, in the space's own words
    _case("tune --space one bound", (*TUNE, "--space", "{d}/sp_one_bound.yaml"), "{d}/sp_one_bound.yaml:3:3",
          also="`int` takes two bounds, [low, high]"),
    _case("tune --space unknown option", (*TUNE, "--space", "{d}/sp_unknown_option.yaml"),
          "{d}/sp_unknown_option.yaml:3:3", also="unknown key 'lg'"),
    _case("tune --space no kind", (*TUNE, "--space", "{d}/sp_no_kind.yaml"), "{d}/sp_no_kind.yaml:3:3",
          also="exactly one of the keys int, float, choice"),
    _case("tune --space bad bound", (*TUNE, "--space", "{d}/sp_bad_bound.yaml"), "{d}/sp_bad_bound.yaml:3:3",
          also="tune.max_running_requests"),
    _case("tune --space a scalar", (*TUNE, "--space", "{d}/sp_scalar.yaml"), "{d}/sp_scalar.yaml:3:3",
          also="expected a mapping"),
    _case("tune --space empty choice", (*TUNE, "--space", "{d}/sp_empty_choice.yaml"),
          "{d}/sp_empty_choice.yaml:3:3", also="`choice` needs at least one value"),
    # checks against SGLang's catalog point at the line too
    _case("tune --space out of range", (*TUNE, "--space", "{d}/sp_out_of_range.yaml"),
          "{d}/sp_out_of_range.yaml:3:3", also="tune.mem_fraction_static"),
    _case("tune --space unknown field", (*TUNE, "--space", "{d}/sp_typo.yaml"), "{d}/sp_typo.yaml:3:3",
          also="did you mean 'max_running_requests'?"),
    _case("tune --space bad choice", (*TUNE, "--space", "{d}/sp_bad_choice.yaml"), "{d}/sp_bad_choice.yaml:3:3",
          also="not among SGLang's choices"),
    _case("tune --space float range for an int", (*TUNE, "--space", "{d}/sp_float_for_int.yaml"),
          "{d}/sp_float_for_int.yaml:3:3", also="takes an integer"),
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    for rel, content in FILES.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for rel in DIRS:
        (d / rel).mkdir()
    for rel, target in LINKS.items():
        (d / rel).symlink_to(target)
    return d


def _run(case: Case, argv: list[str], capsys, env: dict[str, str]) -> tuple[int, str]:
    if case.stdout_to is None:
        code = run_app(app, argv)
        out = capsys.readouterr()
        return code, out.out + out.err
    with open(case.stdout_to, "w") as sink:
        proc = subprocess.run(
            [sys.executable, "-m", "servetune", *argv],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=env,
        )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_a_clear_error(case, corpus, capsys, monkeypatch, tmp_path):
    """Exit 1 or 2, the offending input named, no traceback, nothing created that should not be."""
    monkeypatch.setenv("SERVETUNE_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SERVETUNE_SGLANG_CMD", raising=False)
    if case.argv[0] not in typer.main.get_command(app).commands:
        pytest.skip(f"`servetune {case.argv[0]}` is not registered")
    for key, value in case.env:
        monkeypatch.setenv(key, value)
    argv = [a.replace("{d}", str(corpus)) for a in case.argv]
    code, output = _run(case, argv, capsys, dict(os.environ))
    assert "Traceback" not in output, output
    assert "this is a bug" not in output, output
    assert code in case.codes, f"exit {code}:\n{output}"
    assert case.names.replace("{d}", str(corpus)) in output, output
    if case.also is not None:
        assert case.also in output, output
    assert not any(internal in output for internal in _PYDANTIC_INTERNALS), output
    if case.name.startswith("tune --space"):  # a space file's errors are in its own words, no validator phrasing
        assert "Input should be" not in output and "{'" not in output, output
    if case.absent is not None:
        assert not (corpus / case.absent).exists()


def test_corpus_covers_every_command():
    """Every command servetune lists has at least one bad-input case (and the table has at least 60)."""
    group = typer.main.get_command(app)
    commands = set(group.commands)
    covered = {c.argv[0] for c in CASES}
    assert commands <= covered, sorted(commands - covered)
    assert len(CASES) >= 60


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "rules: []\n"], ids=["empty", "comment only", "empty list"])
def test_an_empty_rules_file_warns_naming_it(text, tmp_path, capsys):
    """A --rules file that adds no rule still resolves, with a warning that names the file."""
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    code = run_app(app, ["resolve", *BASE, "--rules", str(path), "-f", "args"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"warning: rules file {path}" in err and "adds no rules" in err


def test_a_rules_file_with_rules_gives_no_warning(tmp_path, capsys):
    """The empty-file warning is not raised for a file that defines a rule."""
    path = tmp_path / "mine.yaml"
    path.write_text("rules:\n  - id: my-rule\n    summary: s\n    why: w\n    set: {stream_interval: 2}\n")
    code = run_app(app, ["resolve", *BASE, "--rules", str(path), "-f", "args"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "warning" not in err


def test_a_config_without_architectures_warns(tmp_path, capsys):
    """config.json without `architectures` resolves (arch 'unknown') with a warning naming the file."""
    config = {k: v for k, v in _DENSE.items() if k != "architectures"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code = run_app(app, ["resolve", "--model", str(tmp_path), "--gpu", "h200", "-f", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["facts"]["model"]["arch"] == "unknown"
    assert f"warning: {tmp_path / 'config.json'} has no `architectures`" in out.err
    (tmp_path / "config.json").write_text(json.dumps(_DENSE))
    assert run_app(app, ["resolve", "--model", str(tmp_path), "--gpu", "h200", "-f", "json"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_stdout_error_is_not_raised_for_a_working_stdout(capsys):
    """The stdout guard only speaks when a write fails: a normal run prints its output and exits 0."""
    assert run_app(app, ["workloads", "list"]) == 0
    out = capsys.readouterr()
    assert "text-chat" in out.out and "cannot write" not in out.err


_NO_DAC = [
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search",
    "--bounding-set=-dac_override,-dac_read_search",
]
"""As root, file permissions bind only without these two capabilities: the command runs under setpriv
(util-linux) with them dropped, as root still (so it can run the interpreter under /root)."""


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="root reads and writes through chmod 000, and setpriv (to drop that power) is not installed",
)
@pytest.mark.parametrize(
    "argv,names",
    [
        (["resolve", *BASE, "--rules", "{f}"], "{f}"),
        (["presets", "show", "{f}"], "{f}"),
        (["workloads", "show", "{f}"], "{f}"),
        (["hardware", "--replay-nvml", "{f}"], "{f}"),
        (["resolve", *BASE, "-f", "json", "--out", "{ro}/out.json"], "{ro}"),
        (["launch", *BASE, *NO_LAUNCH, "--run-dir", "{ro}/run"], "{ro}"),
        (["tune", "report", "--storage", "sqlite:///{ro}/new.db"], "{ro}/new.db"),
    ],
)
def test_unreadable_and_read_only_paths_are_named(argv, names, tmp_path, capsys):
    """A file without read permission, or a read-only directory, is exit 1 or 2 naming it (as root: under setpriv)."""
    unreadable, read_only = tmp_path / "secret.yaml", tmp_path / "ro"
    unreadable.write_text("rules: []\n")
    unreadable.chmod(0)
    read_only.mkdir()
    read_only.chmod(0o555)
    args = [a.replace("{f}", str(unreadable)).replace("{ro}", str(read_only)) for a in argv]
    if os.geteuid() == 0:
        proc = subprocess.run(
            [*_NO_DAC, sys.executable, "-m", "servetune", *args], capture_output=True, text=True, timeout=120
        )
        code, output = proc.returncode, proc.stdout + proc.stderr
    else:
        code = run_app(app, args)
        output = "".join(capsys.readouterr())
    # 2: an option whose path Typer checks (`readable=True`) is a usage error, named all the same
    assert code in (1, 2) and "Traceback" not in output, output
    assert names.replace("{f}", str(unreadable)).replace("{ro}", str(read_only)) in output
