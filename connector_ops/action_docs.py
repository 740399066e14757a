"""What an action takes and gives, read from its models: ``connector-ops actions [NAME] [--schema]``.

The input model is the contract every entry point validates against, so its JSON Schema (with the spec's
camelCase names) is the one true description of an action's input; nothing here is written by hand.
"""

from __future__ import annotations

from typing import Any

from connector_ops.registry import ACTION_MODULES, ActionSpec, get_action, load_all


def listing() -> list[dict[str, Any]]:
    """Every action: name, one-line summary, the resources it uses."""
    load_all()
    return [{"name": name, "summary": spec.summary, "resources": list(spec.resource_keys)}
            for name in sorted(ACTION_MODULES) for spec in [get_action(name)]]


def input_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the action's input (spec field names)."""
    return get_action(name).input_model.model_json_schema(by_alias=True)


def _type_of(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return defs.get(prop["$ref"].rsplit("/", 1)[-1], {}).get("title", "object")
    if "anyOf" in prop:
        kinds = [_type_of(p, defs) for p in prop["anyOf"] if p.get("type") != "null"]
        return " | ".join(dict.fromkeys(kinds)) or "null"
    if "enum" in prop:
        return " | ".join(repr(v) for v in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    kind = prop.get("type", "any")
    if kind == "array" and "items" in prop:
        return f"array of {_type_of(prop['items'], defs)}"
    return str(kind)


def _fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    return [{"name": field, "type": _type_of(prop, defs), "required": field in required,
             "description": prop.get("description", "")}
            for field, prop in schema.get("properties", {}).items()]


def describe(name: str) -> dict[str, Any]:
    """The action's name, summary, input fields (type, required, description), outputs and resources."""
    spec: ActionSpec = get_action(name)
    return {
        "name": spec.name,
        "summary": spec.summary,
        "input": _fields(input_schema(spec.name)),
        "output": None if spec.output_model is None else spec.output_fields,  # None: a bare "ok" or null
        "resources": list(spec.resource_keys),
    }


def describe_text(name: str) -> str:
    """:func:`describe` as plain text for a terminal."""
    info = describe(name)
    width = max((len(f["name"]) for f in info["input"]), default=0)
    lines = [f"{info['name']} — {info['summary']}", "", "input fields:"]
    for field in info["input"]:
        need = "required" if field["required"] else "optional"
        text = f"  {field['name']:{width}s}  {need:8s}  {field['type']}"
        lines.append(f"{text}  — {field['description']}" if field["description"] else text)
    output = info["output"]
    shown = "a bare value (\"ok\" or null)" if output is None else ", ".join(output) or "{}"
    lines += ["", f"output: {shown}",
              f"resources: {', '.join(info['resources']) or 'none'}",
              f"JSON Schema: connector-ops actions {info['name']} --schema"]
    return "\n".join(lines)
