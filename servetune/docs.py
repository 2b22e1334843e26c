"""JSON Schemas and generated reference pages for the data files (from the pydantic models)."""

from __future__ import annotations

from typing import Any

from servetune.errors import UnknownNameError, did_you_mean

_WHEN = {
    "description": "A condition: a mapping of fact paths (gpu.arch, model.type, workload.image_reuse, "
    "deployment.nnodes, sglang.version, field.<name>, env.<NAME>) to a value (eq) or one "
    "operator ({eq|ne|in|not_in|gt|gte|lt|lte|between|is_set: ...}); keys all/any/not combine.",
    "type": ["object", "array", "null"],
}


def json_schema(what: str) -> dict[str, Any]:
    """The JSON Schema of `rule`, `rules` (a rules file), `preset`, `workload`, `hardware` or `space`."""
    from servetune.schema.facts import HardwareProfile
    from servetune.schema.preset import Preset
    from servetune.schema.rule import Rule
    from servetune.schema.workload import Workload

    if what in ("rule", "rules"):
        schema = Rule.model_json_schema()
        schema["properties"]["when"] = _WHEN
        if what == "rules":
            return {
                "type": "object",
                "properties": {"rules": {"type": "array", "items": schema}, "requires_servetune": {"type": "string"}},
                "required": ["rules"],
                "additionalProperties": False,
            }
        return schema
    models = {"preset": Preset, "workload": Workload, "hardware": HardwareProfile}
    if what in models:
        return models[what].model_json_schema(by_alias=True)
    if what == "space":
        from pydantic import TypeAdapter

        from servetune.schema.space import SearchSpace

        return TypeAdapter(SearchSpace).json_schema(by_alias=True)
    options = ["rule", "rules", "preset", "workload", "hardware", "space"]
    guess = did_you_mean(what, options)
    raise UnknownNameError(
        f"unknown schema '{what}'",
        help=(f"did you mean '{guess}'? " if guess else "") + "one of: " + ", ".join(options),
    )
