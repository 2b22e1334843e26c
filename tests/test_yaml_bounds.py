"""User YAML (rules, presets, hardware, workloads) is loaded within bounds: an alias bomb, an
oversized file, too many nodes and too deep a nesting end in a clean SpecError naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servetune.errors import SpecError
from servetune.yamlio import MAX_BYTES, MAX_DEPTH, MAX_YAML_NODES, load_yaml, load_yaml_with_spans

ROOT = Path(__file__).resolve().parent.parent
MEMORY_CAP = 1 << 30

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None, *"abcdefgh"], "abcdefghi")
)
"""Nine levels of nine aliases: 9**9 (387 million) strings once expanded, 600 bytes on disk."""

_CAPPED = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
{body}
"""


def _run_capped(body: str) -> subprocess.CompletedProcess:
    code = _CAPPED.format(cap=MEMORY_CAP, body=textwrap.dedent(body))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_alias_bomb_is_refused_fast_under_a_1_gib_memory_cap(tmp_path):
    """Loading a billion-laughs file under RLIMIT_AS=1 GiB raises SpecError (not MemoryError) in under 1 s."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB, encoding="utf-8")
    proc = _run_capped(
        f"""
        from servetune.errors import SpecError
        from servetune.yamlio import load_yaml_with_spans
        start = time.perf_counter()
        try:
            load_yaml_with_spans({str(bomb)!r})
            outcome = "loaded"
        except SpecError as exc:
            outcome = exc.render()
        except MemoryError:
            outcome = "MemoryError"
        print(json.dumps({{"seconds": time.perf_counter() - start, "outcome": outcome}}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["seconds"] < 1.0
    assert result["outcome"] == (
        f"error[invalid-spec]: YAML expands to more than {MAX_YAML_NODES:,} nodes (through alias '*e')\n"
        f"  --> {bomb}:6:32\n"
        "   = help: split the file, or write fewer aliases: servetune bounds what a file may expand to so that a "
        "small file cannot grow into gigabytes"
    )


@pytest.mark.parametrize("option", ["--rules", "--preset", "--hardware", "--workload"])
def test_the_cli_refuses_an_alias_bomb_with_exit_1_naming_the_file(tmp_path, option):
    """`servetune resolve OPTION bomb.yaml` under a 1 GiB cap exits 1 with the file:line, not a crash."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB, encoding="utf-8")
    argv = ["resolve", "--model", "qwen3-8b", "--sglang-version", "0.5.23", option, str(bomb)]
    if option != "--hardware":
        argv += ["--gpu", "h200"]
    proc = _run_capped(
        f"""
        from servetune.cli import main
        sys.argv = ["servetune", *{argv!r}]
        main()
        """
    )
    assert proc.returncode == 1, proc.stderr
    assert "YAML expands to more than" in proc.stderr
    assert f"--> {bomb}:6:32" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_aliases_within_the_bounds_still_load(tmp_path):
    """An anchor reused a few times loads as before, with its value repeated."""
    path = tmp_path / "ok.yaml"
    path.write_text("base: &base {a: 1, b: [2, 3]}\nfirst: *base\nsecond: *base\n", encoding="utf-8")
    data, spans = load_yaml_with_spans(path)
    assert data["first"] == data["second"] == {"a": 1, "b": [2, 3]}
    assert spans[("second",)].line == 3


def test_a_file_over_the_size_cap_is_refused_before_parsing(tmp_path):
    """A file one byte over MAX_BYTES is a SpecError naming the file, its size and the limit."""
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_BYTES - 1) + b"\n\n")
    with pytest.raises(SpecError) as info:
        load_yaml(path)
    assert info.value.message == f"{path} is {MAX_BYTES + 1:,} bytes, over the {MAX_BYTES:,}-byte limit for a YAML file"
    assert str(info.value.location) == str(path)
    assert "split it into several files" in info.value.help


def test_text_over_the_size_cap_is_refused(tmp_path):
    """The cap applies to text handed in directly as well."""
    with pytest.raises(SpecError, match="over the 10-byte limit"):
        load_yaml_with_spans("inline.yaml", "a: 12345678", max_bytes=10)


def test_a_document_over_the_node_cap_is_refused_where_it_crosses(tmp_path):
    """MAX_YAML_NODES + 1 nodes (in a file well under the size cap) is a SpecError at the crossing node."""
    path = tmp_path / "many.yaml"
    path.write_text("[" + ",".join(["0"] * MAX_YAML_NODES) + "]\n", encoding="utf-8")
    assert path.stat().st_size < MAX_BYTES
    with pytest.raises(SpecError) as info:
        load_yaml(path)
    assert info.value.message == f"YAML expands to more than {MAX_YAML_NODES:,} nodes"
    assert info.value.location.path == str(path)
    assert info.value.location.line == 1 and info.value.location.column == 2 * MAX_YAML_NODES


def test_exactly_the_node_cap_loads():
    """The cap is inclusive: a document of exactly max_nodes nodes loads."""
    assert load_yaml_with_spans("x.yaml", "[1, 2, 3]", max_nodes=4)[0] == [1, 2, 3]
    with pytest.raises(SpecError, match="more than 3 nodes"):
        load_yaml_with_spans("x.yaml", "[1, 2, 3]", max_nodes=3)


def test_nesting_deeper_than_the_cap_is_refused_also_through_an_alias():
    """MAX_DEPTH + 1 levels is refused, whether written out or reached by an alias."""
    written = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels"):
        load_yaml_with_spans("deep.yaml", written)
    assert load_yaml_with_spans("deep.yaml", "[" * MAX_DEPTH + "]" * MAX_DEPTH)[0] is not None
    via_alias = "a: &a [[[1]]]\nb: [[*a]]\n"
    load_yaml_with_spans("alias.yaml", via_alias, max_depth=6)
    with pytest.raises(SpecError) as info:
        load_yaml_with_spans("alias.yaml", via_alias, max_depth=5)
    assert (info.value.location.line, info.value.location.column) == (2, 6)


def test_the_benchmark_prints_load_times_per_size():
    """benchmarks/rule_scaling.py runs and prints one row per size (figures only, no timing assertion)."""
    proc = subprocess.run(
        [sys.executable, "benchmarks/rule_scaling.py", "--sizes", "50", "100", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["50", "100"]
