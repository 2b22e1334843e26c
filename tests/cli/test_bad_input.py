"""Bad input, as a table: each malformed file or CLI value gives its exact message (file:line,
key path, what to do), exit code 1 and no traceback. The message is part of the interface."""

from __future__ import annotations

import pytest
import yaml

from servetune.cli import app
from servetune.cli._run import run_app

FILES = {
    "syntax.yaml": "rules:\n  - id: x\n    summary: s\n    why: w\n    set: {max_running_requests: [1\n",
    "unknown_field.yaml": (
        "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    when: {gpu.arch: sm90}\n"
        "    set:\n      max_runing_requests: 4\n"
    ),
    "wrong_type.yaml": (
        "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    set:\n      max_running_requests: lots\n"
    ),
    "unsafe.yaml": (
        'rules:\n  - id: my-rule\n    summary: s\n    why: w\n    set: !!python/object/apply:os.system ["echo hi"]\n'
    ),
    "unknown_key.yaml": "rules:\n  - id: my-rule\n    summary: s\n    whyy: w\n    set: {stream_interval: 2}\n",
    "bad_fact.yaml": (
        "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    when: {gpu.archh: sm90}\n"
        "    set: {stream_interval: 2}\n"
    ),
    "bad_op.yaml": (
        "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    when: {gpu.memory_mib: {greater: 3}}\n"
        "    set: {stream_interval: 2}\n"
    ),
    "bad_choice.yaml": "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    set: {radix_eviction_policy: lfru}\n",
    "bad_id.yaml": "rules:\n  - id: My_Rule\n    summary: s\n    why: w\n    set: {stream_interval: 2}\n",
    "preset_bad.yaml": "name: p\nsummary: s\nset:\n  radix_eviction_policy: lru\nmade_for: {gpu: h200, modle: x}\n",
    "hw_bad.yaml": "gpu:\n  name: X\n  arch: sm91\n  memory_mib: 1000\n",
    "hw_type.yaml": "gpu:\n  name: X\n  arch: sm90\n  memory_mib: lots\n",
    "preset_negative.yaml": "name: p\nsummary: s\nset:\n  max_running_requests: -5\n",
    "preset_lots.yaml": "name: p\nsummary: s\nset:\n  stream_interval: 2\n  max_running_requests: lots\n",
    "preset_fraction.yaml": "name: p\nsummary: s\nset:\n  mem_fraction_static: 1.5\n",
    "preset_tune_range.yaml": "name: p\nsummary: s\ntune:\n  max_running_requests: {int: [0, 64]}\n",
    "duplicate.yaml": (
        "rules:\n  - id: my-rule\n    summary: s\n    why: w\n    set:\n      stream_interval: 2\n"
        "      max_running_requests: 4\n      stream_interval: 4\n"
    ),
    "workload_tune.yaml": ("name: w\nsummary: s\nkind: text\ntune:\n  mem_fraction_static: {float: [0.7, 1.2]}\n"),
    "hw_many.yaml": "gpu:\n  name: X\n  arch: sm90\n  memory_mib: 1000\n  count: 100000\n",
}

# libyaml (used when PyYAML has it, as its wheels do) and pure-Python PyYAML word the problem differently.
_SYNTAX_PROBLEM = (
    "did not find expected ',' or ']'" if yaml.__with_libyaml__ else "expected ',' or ']', but got '<stream end>'"
)

CASES = [
    (
        "rule YAML syntax",
        ["--rules", "{d}/syntax.yaml"],
        "error[invalid-spec]: YAML syntax error: " + _SYNTAX_PROBLEM + "\n"
        "  --> {d}/syntax.yaml:6:1\n"
        "   = help: fix the YAML syntax at that position",
    ),
    (
        "rule unknown field",
        ["--rules", "{d}/unknown_field.yaml"],
        "error[unknown-name]: 'max_runing_requests' is not an SGLang field in any catalogued version\n"
        "  --> {d}/unknown_field.yaml:7:7\n"
        "   = at key: rules[0].set.max_runing_requests\n"
        "   = help: did you mean 'max_running_requests'?\n"
        "   = note: names come from servetune/data/catalog/<version>.json",
    ),
    (
        "rule wrong type",
        ["--rules", "{d}/wrong_type.yaml"],
        "error[invalid-spec]: bad value for max_running_requests: expected an integer, but got 'lots'\n"
        "  --> {d}/wrong_type.yaml:6:7\n"
        "   = at key: rules[0].set.max_running_requests",
    ),
    (
        "rule unsafe tag",
        ["--rules", "{d}/unsafe.yaml"],
        "error[invalid-spec]: unsafe or unknown YAML tag: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'\n"
        "  --> {d}/unsafe.yaml:5:10\n"
        "   = help: servetune reads data with yaml.safe_load: plain mappings, lists and scalars only, no Python tags",
    ),
    (
        "rule unknown key",
        ["--rules", "{d}/unknown_key.yaml"],
        "error[invalid-spec]: unknown key 'whyy' in rule\n"
        "  --> {d}/unknown_key.yaml:4:5\n"
        "   = at key: rules[0].whyy\n"
        "   = help: did you mean 'why'?",
    ),
    (
        "rule unknown fact",
        ["--rules", "{d}/bad_fact.yaml"],
        "error[invalid-spec]: unknown condition key 'gpu.archh'; did you mean 'gpu.arch'? (use a fact path such as "
        "gpu.arch, field.<sglang field>, env.SGLANG_<NAME>, or all/any/not)\n"
        "  --> {d}/bad_fact.yaml:5:5\n"
        "   = at key: rules[0].when",
    ),
    (
        "rule unknown operator",
        ["--rules", "{d}/bad_op.yaml"],
        "error[invalid-spec]: unknown operator 'greater' for 'gpu.memory_mib'; did you mean 'gte'? "
        "(operators: eq, ne, in, not_in, gt, gte, lt, lte, between, is_set)\n"
        "  --> {d}/bad_op.yaml:5:5\n"
        "   = at key: rules[0].when",
    ),
    (
        "rule value outside choices",
        ["--rules", "{d}/bad_choice.yaml"],
        "error[invalid-spec]: bad value for radix_eviction_policy: 'lfru' is not one of "
        "['lru', 'lfu', 'slru', 'priority', 'tlru']; did you mean 'lru'?\n"
        "  --> {d}/bad_choice.yaml:5:11\n"
        "   = at key: rules[0].set.radix_eviction_policy",
    ),
    (
        "rule id not kebab-case",
        ["--rules", "{d}/bad_id.yaml"],
        "error[invalid-spec]: String should match pattern '^[a-z0-9][a-z0-9-]*$', but got 'My_Rule'\n"
        "  --> {d}/bad_id.yaml:2:5\n"
        "   = at key: rules[0].id",
    ),
    (
        "missing rules file",
        ["--rules", "{d}/missing.yaml"],
        "error[invalid-spec]: file not found: {d}/missing.yaml\n   = help: check the path",
    ),
    (
        "preset unknown key",
        ["--preset", "{d}/preset_bad.yaml"],
        "error[invalid-spec]: unknown key 'modle' in preset\n"
        "  --> {d}/preset_bad.yaml:5:23\n"
        "   = at key: made_for.modle\n"
        "   = help: did you mean 'model'?",
    ),
    (
        "unknown preset",
        ["--preset", "nope"],
        "error[unknown-name]: unknown preset 'nope'\n"
        "   = help: shipped presets: multimodal-high-concurrency, text-chat-latency; or pass a preset file path",
    ),
    (
        "hardware file bad arch",
        ["--hardware", "{d}/hw_bad.yaml", "NO_GPU"],
        "error[invalid-spec]: Input should be 'sm70', 'sm75', 'sm80', 'sm86', 'sm87', 'sm89', 'sm90', 'sm100', "
        "'sm103', 'sm110', 'sm120' or 'sm121', but got 'sm91'\n"
        "  --> {d}/hw_bad.yaml:3:3\n"
        "   = at key: gpu.arch",
    ),
    (
        "hardware file wrong type",
        ["--hardware", "{d}/hw_type.yaml", "NO_GPU"],
        "error[invalid-spec]: Input should be a valid integer, unable to parse string as an integer, but got 'lots'\n"
        "  --> {d}/hw_type.yaml:4:3\n"
        "   = at key: gpu.memory_mib",
    ),
    (
        "unknown GPU",
        ["--gpu", "h900", "NO_GPU"],
        "error[unknown-name]: unknown GPU 'h900'\n"
        "   = help: did you mean 'h200'? known GPUs: "
        "a100-40gb, a100-80gb, b200, gb200, h100-pcie, h100-sxm, h20, h200, l4, l40s\n"
        "   = note: or pass --hardware FILE (written by `servetune hardware --save FILE` on the GPU machine)",
    ),
    (
        "bad GPU count",
        ["--gpu", "h200:x", "NO_GPU"],
        "error[unknown-name]: GPU count must be an integer from 1 to 64 (GPUs on one node), but got 'x' in 'h200:x'\n"
        "   = help: write e.g. --gpu h200:8; for several nodes add --nnodes N",
    ),
    (
        "GPU count beyond a node",
        ["--gpu", "h200:99999999999999999999", "NO_GPU"],
        "error[unknown-name]: GPU count must be an integer from 1 to 64 (GPUs on one node), but got "
        "'99999999999999999999' in 'h200:99999999999999999999'\n"
        "   = help: write e.g. --gpu h200:8; for several nodes add --nnodes N",
    ),
    (
        "tensor parallel beyond the GPUs",
        ["--tp", "16"],
        "error[invalid-spec]: tp_size=16 (pin cli --set) needs 16 GPUs, but the target has 1: 1 x NVIDIA H200\n"
        "   = help: lower --tp/--set dp_size, or name the node you launch on: --gpu NAME:16 (or --hardware FILE, "
        "or --nnodes N)",
    ),
    (
        "data parallel beyond the GPUs",
        ["--gpu", "h200:8", "NO_GPU", "--tp", "4", "--set", "dp_size=4"],
        "error[invalid-spec]: tp_size=4 (pin cli --set) x dp_size=4 (pin cli --set) needs 16 GPUs, but the target "
        "has 8: 8 x NVIDIA H200\n"
        "   = help: lower --tp/--set dp_size, or name the node you launch on: --gpu NAME:16 (or --hardware FILE, "
        "or --nnodes N)",
    ),
    (
        "unknown model",
        ["--model", "qwen4-8b"],
        "error[unknown-name]: unknown model 'qwen4-8b': "
        "not a directory with config.json, a bundled model, or in the local HF cache\n"
        "   = help: did you mean 'qwen3-8b'? bundled models: "
        "llama-3.1-8b-instruct, qwen2.5-vl-3b-instruct, qwen2.5-vl-7b-instruct, "
        "qwen3-8b, qwen3-vl-30b-a3b-instruct, qwen3-vl-8b-instruct\n"
        "   = note: servetune never downloads; pass a local model directory for other models",
    ),
    (
        "unknown version",
        ["--sglang-version", "0.5.99"],
        "error[unknown-name]: no SGLang field catalog for version '0.5.99'; available: 0.5.10, 0.5.17, 0.5.23\n"
        "   = help: did you mean '0.5.23'? to add a release, run `servetune catalog sync --sglang-cpu VERSION` "
        "(after `SERVETUNE_SGLANG_VERSIONS=VERSION scripts/setup_sglang_cpu.sh`)",
    ),
    (
        "--set without =",
        ["--set", "max_running_requests"],
        "error[invalid-spec]: --set needs NAME=VALUE, but got 'max_running_requests'\n"
        "   = help: write e.g. --set max_running_requests=256",
    ),
    (
        "--set unknown field",
        ["--set", "max_runing_requests=4"],
        "error[unknown-name]: 'max_runing_requests' is not an SGLang 0.5.23 field (pin from cli --set)\n"
        "   = help: did you mean 'max_running_requests'?\n"
        "   = note: fields come from servetune/data/catalog/0.5.23.json",
    ),
    (
        "--set wrong type",
        ["--set", "max_running_requests=many"],
        "error[invalid-spec]: bad value for max_running_requests=many (pin cli --set): "
        "expected an integer, but got 'many'\n"
        "   = help: --max-running-requests takes an integer >= 1",
    ),
    (
        "--set out of range",
        ["--set", "mem_fraction_static=1.5"],
        "error[invalid-spec]: bad value for mem_fraction_static=1.5 (pin cli --set): 1.5 is out of range: "
        "mem_fraction_static must be > 0 and < 1 (a share of each GPU's memory for weights and the KV pool; "
        "1 or more leaves nothing for activations)\n"
        "   = help: --mem-fraction-static takes a number > 0 and < 1",
    ),
    (
        "preset value below its range",
        ["--preset", "{d}/preset_negative.yaml"],
        "error[invalid-spec]: max_running_requests: -5 is a value no SGLang release accepts (0.5.23, 0.5.17, 0.5.10): "
        "-5 is out of range: max_running_requests must be >= 1 (a count of requests running at once; 0 would never "
        "schedule one)\n"
        "  --> {d}/preset_negative.yaml:4:3\n"
        "   = at key: set.max_running_requests\n"
        "   = help: --max-running-requests takes an integer >= 1",
    ),
    (
        "preset value of the wrong type",
        ["--preset", "{d}/preset_lots.yaml"],
        "error[invalid-spec]: max_running_requests: 'lots' is a value no SGLang release accepts (0.5.23, 0.5.17, "
        "0.5.10): expected an integer, but got 'lots'\n"
        "  --> {d}/preset_lots.yaml:5:3\n"
        "   = at key: set.max_running_requests\n"
        "   = help: --max-running-requests takes an integer >= 1",
    ),
    (
        "preset fraction above one",
        ["--preset", "{d}/preset_fraction.yaml"],
        "error[invalid-spec]: mem_fraction_static: 1.5 is a value no SGLang release accepts (0.5.23, 0.5.17, 0.5.10): "
        "1.5 is out of range: mem_fraction_static must be > 0 and < 1 (a share of each GPU's memory for weights and "
        "the KV pool; 1 or more leaves nothing for activations)\n"
        "  --> {d}/preset_fraction.yaml:4:3\n"
        "   = at key: set.mem_fraction_static\n"
        "   = help: --mem-fraction-static takes a number > 0 and < 1",
    ),
    (
        "preset search range out of the field's range",
        ["--preset", "{d}/preset_tune_range.yaml"],
        "error[invalid-spec]: max_running_requests: 0 out of range: it must be >= 1 (a count of requests running at "
        "once; 0 would never schedule one)\n"
        "  --> {d}/preset_tune_range.yaml:4:3\n"
        "   = at key: tune.max_running_requests\n"
        "   = help: narrow the range",
    ),
    (
        "workload search range out of the field's range",
        ["--workload", "{d}/workload_tune.yaml"],
        "error[invalid-spec]: mem_fraction_static: 1.2 out of range: it must be > 0 and < 1 (a share of each GPU's "
        "memory for weights and the KV pool; 1 or more leaves nothing for activations)\n"
        "  --> {d}/workload_tune.yaml:5:3\n"
        "   = at key: tune.mem_fraction_static\n"
        "   = help: narrow the range",
    ),
    (
        "duplicate YAML key",
        ["--rules", "{d}/duplicate.yaml"],
        "error[invalid-spec]: duplicate key 'stream_interval': line 6 and line 8 both set it\n"
        "  --> {d}/duplicate.yaml:8:7\n"
        "   = at key: rules[0].set.stream_interval\n"
        "   = help: keep one of them (YAML parsers keep the last one silently; servetune refuses), first at "
        "{d}/duplicate.yaml:6:7",
    ),
    (
        "hardware profile with more GPUs than a node",
        ["--hardware", "{d}/hw_many.yaml", "NO_GPU"],
        "error[invalid-spec]: Input should be less than or equal to 64, but got 100000\n"
        "  --> {d}/hw_many.yaml:5:3\n"
        "   = at key: gpu.count",
    ),
    (
        "--env with a field name",
        ["--env", "max_running_requests=4"],
        "error[invalid-spec]: --env takes an environment variable name, but got 'max_running_requests'\n"
        "   = help: use --set for SGLang fields",
    ),
]


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (d / name).write_text(text)
    return d


@pytest.mark.parametrize("name,args,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_message(name, args, expected, bad_dir, capsys):
    """The whole message is pinned; exit code 1; no traceback."""
    args = [a.replace("{d}", str(bad_dir)) for a in args]
    gpu = [] if "NO_GPU" in args or "--gpu" in args else ["--gpu", "h200"]
    args = [a for a in args if a != "NO_GPU"]
    model = [] if "--model" in args else ["--model", "qwen3-8b"]
    version = [] if "--sglang-version" in args else ["--sglang-version", "0.5.23"]
    code = run_app(app, ["resolve", *model, *gpu, *version, *args])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    assert err.rstrip("\n") == expected.replace("{d}", str(bad_dir))
