"""The Drive v3 discovery document (shipped in google-api-python-client) as an oracle for requests.

Every request the fake Drive server receives is checked here (research §5): the method and path must be
one Drive v3 method, every query parameter must be one that method (or the API globally) declares and
not deprecated, with a value of the declared type and enum; ``alt=media`` only where the method supports
media download; ``uploadType`` only on media-upload paths; JSON bodies may use only properties of the
request schema, no output-only ones, and must carry the ones the schema marks required for the method.

Things the document does not say, written out by hand and cited: resumable-session ``PUT``s carry
``upload_id`` (manage-uploads guide); Permission ``emailAddress`` / ``domain`` are flagged read-only in
the schema yet are what ``permissions.create`` needs for user/group/domain grants (Permission.type's
description: "if type is user or group, you must provide an emailAddress").
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from googleapiclient.discovery_cache import get_static_doc

WRITABLE_DESPITE_READ_ONLY = {("Permission", "emailAddress"), ("Permission", "domain")}


@dataclass(frozen=True)
class Method:
    id: str
    http_method: str
    pattern: re.Pattern[str]
    literal_len: int
    media_upload: bool
    doc: dict[str, Any]


@functools.cache
def document() -> dict[str, Any]:
    return json.loads(get_static_doc("drive", "v3"))


def _methods(resources: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for resource in resources.values():
        out.extend(resource.get("methods", {}).values())
        out.extend(_methods(resource.get("resources", {})))
    return out


def _compile(path: str) -> tuple[re.Pattern[str], int]:
    parts = re.split(r"\{[^}]+\}", path)
    regex = "[^/]+".join(re.escape(p) for p in parts)
    return re.compile(f"^{regex}$"), len("".join(parts))


@functools.cache
def index() -> list[Method]:
    doc = document()
    base = "/" + doc["servicePath"]  # /drive/v3/
    methods = []
    for m in _methods(doc["resources"]):
        pattern, literal = _compile(base + m["flatPath"])
        methods.append(Method(m["id"], m["httpMethod"], pattern, literal, False, m))
        for protocol in (m.get("mediaUpload") or {}).get("protocols", {}).values():
            pattern, literal = _compile(protocol["path"])
            methods.append(Method(m["id"], m["httpMethod"], pattern, literal, True, m))
    return methods


def find(http_method: str, path: str) -> Method | None:
    matches = [m for m in index() if m.http_method == http_method and m.pattern.match(path)]
    return max(matches, key=lambda m: m.literal_len) if matches else None


def _check_value(name: str, spec: dict[str, Any], value: str) -> str | None:
    if spec.get("deprecated"):
        return f"parameter {name} is deprecated"
    kind = spec.get("type")
    if kind == "boolean" and value not in ("true", "false"):
        return f"parameter {name}={value!r} is not a boolean"
    if kind == "integer":
        if not re.fullmatch(r"-?\d+", value):
            return f"parameter {name}={value!r} is not an integer"
        if "minimum" in spec and int(value) < int(spec["minimum"]):
            return f"parameter {name}={value} is below {spec['minimum']}"
        if "maximum" in spec and int(value) > int(spec["maximum"]):
            return f"parameter {name}={value} is above {spec['maximum']}"
    if "enum" in spec and value not in spec["enum"]:
        return f"parameter {name}={value!r} is not one of {spec['enum']}"
    return None


def check_body(method_id: str, schema_name: str, body: Any, where: str = "body") -> list[str]:
    """Problems with a JSON request body against ``schemas[schema_name]`` (recursing into ``$ref``s)."""
    schemas = document()["schemas"]
    if not isinstance(body, dict):
        return [f"{where} is not a JSON object"]
    props = schemas[schema_name]["properties"]
    problems = []
    for key, value in body.items():
        prop = props.get(key)
        if prop is None:
            problems.append(f"{where}.{key} is not a property of {schema_name}")
            continue
        description = prop.get("description", "")
        read_only = prop.get("readOnly") or description.startswith("Output only.")
        if read_only and (schema_name, key) not in WRITABLE_DESPITE_READ_ONLY:
            problems.append(f"{where}.{key} is output only in {schema_name}")
        if "$ref" in prop and isinstance(value, dict):
            problems.extend(check_body(method_id, prop["$ref"], value, f"{where}.{key}"))
    for key, prop in props.items():
        if method_id in (prop.get("annotations") or {}).get("required", []) and key not in body:
            problems.append(f"{where}.{key} is required by {method_id}")
    return problems


def check(http_method: str, path: str, query: list[tuple[str, str]], body: Any = None) -> tuple[str | None, list[str]]:
    """(method id, problems) for one request; an empty list means the document allows it."""
    params = dict(query)
    if "upload_id" in params:  # a resumable session URI (manage-uploads guide), not a discovery method
        problems = [f"session request has parameter {k}" for k in params if k not in ("uploadType", "upload_id")]
        if http_method != "PUT" or path != "/upload/drive/v3/files" or params.get("uploadType") != "resumable":
            problems.append(f"bad resumable session request {http_method} {path} {params}")
        return "session", problems
    method = find(http_method, path)
    if method is None:
        return None, [f"unknown endpoint {http_method} {path}"]
    doc = document()
    problems = []
    allowed = {k: v for k, v in method.doc.get("parameters", {}).items() if v.get("location") == "query"}
    allowed_global = doc["parameters"]
    for name, value in query:
        spec = allowed.get(name) or allowed_global.get(name)
        if spec is None:
            problems.append(f"{method.id}: unknown parameter {name}")
            continue
        problem = _check_value(name, spec, value)
        if problem:
            problems.append(f"{method.id}: {problem}")
    for name, spec in allowed.items():
        if spec.get("required") and name not in params:
            problems.append(f"{method.id}: required parameter {name} missing")
    if params.get("alt") == "media" and not method.doc.get("supportsMediaDownload"):
        problems.append(f"{method.id}: alt=media on a method without media download")
    if method.media_upload:
        if params.get("uploadType") not in ("media", "multipart", "resumable"):
            problems.append(f"{method.id}: upload path needs uploadType media|multipart|resumable")
    elif "uploadType" in params:
        problems.append(f"{method.id}: uploadType on a metadata path")
    request = (method.doc.get("request") or {}).get("$ref")
    if body is not None and request:
        problems.extend(f"{method.id}: {p}" for p in check_body(method.id, request, body))
    elif body is not None and body != {}:
        problems.append(f"{method.id}: takes no request body")
    return method.id, problems
