"""Write vast-openapi.yaml: the facts FakeVast and gpuops are held to, from Vast's own OpenAPI.

Usage (from a clone or mirror of vast-ai/vast-cli, whose per-endpoint yamls are under
``openapi/yaml/`` up to the commit named below; later commits moved them to vast-ai/docs)::

    python recordings/contracts/extract_vast.py GIT_DIR COMMIT > recordings/contracts/vast-openapi.yaml

It reads each yaml with ``git show COMMIT:openapi/yaml/NAME.yaml`` and keeps only facts, in
our own format (docs/fakes.md, "The published contract"): per operation its method and path,
path and query parameters, request body fields with their types, enums, required fields and
``x-input-validation`` limits, and each documented response status with its fields' types.
Descriptions and prose are not copied. Where a response schema is given only by an example
(search's offer rows) the field types are read from the example's values and marked
``from: example``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import yaml

# operation -> (yaml file, method, path): the routes FakeVast serves and gpuops calls.
OPERATIONS = {
    "search": ("search_offers", "post", "/api/v0/bundles/"),
    "create": ("create_instance", "put", "/api/v0/asks/{id}/"),
    "show": ("show_instance", "get", "/api/v0/instances/{id}/"),
    "destroy": ("destroy_instance", "delete", "/api/v0/instances/{id}/"),
    "label": ("label_instance", "put", "/api/v0/instances/{id}/"),
    "list": ("show_instances", "get", "/api/v1/instances/"),
    "user": ("show_user", "get", "/api/v0/users/current/"),
    "ssh_keys": ("show_ssh_keys", "get", "/api/v0/ssh/"),
    "register_ssh_key": ("create_ssh_key", "post", "/api/v0/ssh/"),
}
SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def node(schema: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """One schema in our format: type, nullable, enum, limits, fields/required/open, items."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return node(doc["components"]["schemas"][name], doc)
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if kind is None and "properties" in schema:
        kind = "object"
    out["type"] = kind or "any"
    if schema.get("nullable"):
        out["nullable"] = True
    if "enum" in schema:
        out["enum"] = list(schema["enum"])
    for theirs, ours in (("maxLength", "max_length"), ("minimum", "min"), ("maximum", "max")):
        if theirs in schema:
            out[ours] = schema[theirs]
    if "default" in schema:  # the server's own default, where the request leaves it out
        out["default"] = schema["default"]
    if kind == "object" and "properties" in schema:
        out["fields"] = {k: node(v, doc) for k, v in schema["properties"].items()}
        if schema.get("required"):
            out["required"] = list(schema["required"])
        out["open"] = bool(schema.get("additionalProperties", False))
    if kind == "array" and "items" in schema:
        out["items"] = node(schema["items"], doc)
    return out


def from_example(value: Any) -> dict[str, Any]:
    """A type read off a documented example value (null: any type). One example value says
    nothing about null, so every such field is nullable."""
    if value is None:
        return {"type": "any", "nullable": True, "from": "example"}
    if isinstance(value, dict):
        fields = {k: from_example(v) for k, v in value.items()}
        return {
            "type": "object",
            "nullable": True,
            "fields": fields,
            "open": False,
            "from": "example",
        }
    if isinstance(value, list):
        items = from_example(value[0]) if value else {"type": "any"}
        return {"type": "array", "nullable": True, "items": items, "from": "example"}
    kind = SCALARS[type(value)]
    return {"type": "number" if kind == "integer" else kind, "nullable": True, "from": "example"}


def limits(validation: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """x-input-validation, as facts: max_length, max_total_length, min, max, required, and
    ``combined``: the body fields a "Combined length of ..." limit counts together."""
    keep = ("max_length", "max_total_length", "min", "max", "required")
    out = {}
    for name, rule in validation.items():
        out[name] = {k: v for k, v in rule.items() if k in keep}
        text = str(rule.get("description", ""))
        if "valid SSH public key" in text:
            out[name]["format"] = "ssh_public_key"
        if text.startswith("Combined length of"):
            words = re.findall(r"[a-z_]+", text.removeprefix("Combined length of"))
            out[name]["combined"] = [w for w in words if w in fields]
    return out


def operation(text: str, method: str, path: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    op = doc["paths"][path][method]
    out: dict[str, Any] = {"method": method.upper(), "path": path}
    params = {}
    for p in op.get("parameters", []):
        if p.get("in") in ("path", "query"):
            entry = node(p.get("schema", {}), doc)
            entry["in"] = p["in"]
            if p.get("required"):
                entry["required"] = True
            params[p["name"]] = entry
    if params:
        out["parameters"] = params
    body = op.get("requestBody")
    if body:
        out["request"] = node(body["content"]["application/json"]["schema"], doc)
    operators = re.findall(r"^\| `(\w+)` +\|", op.get("description", ""), re.MULTILINE)
    if operators:  # search: every object-typed body field is a filter {operator: value}
        out["filter_operators"] = operators
        for name, field in out["request"]["fields"].items():
            if field["type"] == "object":
                typed = {k: v for k, v in field.get("fields", {}).items() if v["type"] != "array"}
                spec: dict[str, Any] = {"type": "filter"}
                if typed:
                    spec["fields"] = typed
                if "default" in field:
                    spec["default"] = field["default"]
                out["request"]["fields"][name] = spec
    if "x-input-validation" in doc:
        fields = out.get("request", {}).get("fields", {})
        out["input_validation"] = limits(doc["x-input-validation"], fields)
    if "x-rate-limit" in doc:  # the numbers only: threshold, penalty, requests, per
        kept = ("threshold", "penalty", "requests", "per")
        out["rate_limit"] = {k: doc["x-rate-limit"][k] for k in kept if k in doc["x-rate-limit"]}
    responses = {}
    for status, answer in op.get("responses", {}).items():
        content = (answer.get("content") or {}).get("application/json")
        if content is None:
            responses[str(status)] = {"type": "any"}
            continue
        schema = node(content.get("schema", {}), doc)
        example = content.get("example")
        if status == "200" and path == "/api/v0/bundles/" and isinstance(example, dict):
            # The rows are given only by the example (an object there; the wire has a list).
            rows = from_example(example["offers"])
            rows.pop("nullable")
            schema["fields"]["offers"]["items"] = rows
        responses[str(status)] = schema
    out["responses"] = responses
    return out


def main(git_dir: str, commit: str) -> None:
    operations = {}
    for name, (file, method, path) in OPERATIONS.items():
        text = subprocess.run(
            ["git", "-C", git_dir, "show", f"{commit}:openapi/yaml/{file}.yaml"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        entry = operation(text, method, path)
        entry["source"] = f"openapi/yaml/{file}.yaml"
        operations[name] = entry
    doc = {
        "provenance": {
            "kind": "public",
            "source": f"vast-ai/vast-cli @ {commit}, openapi/yaml/ (per operation: source)",
            "date": "2026-12-01",
            "notes": (
                "Facts only, extracted by recordings/contracts/extract_vast.py: paths, "
                "parameters, request fields, types, enums, defaults, required fields, "
                "x-input-validation limits, x-rate-limit numbers and response fields per status. "
                "No description is "
                "copied; three facts are read from description text: search's operator table, "
                "the fields a 'Combined length of' limit counts, and that a registered key must "
                "be a valid SSH public key. Types marked 'from: example' are read off the "
                "documented example values. The same files at vast-ai/docs @ "
                "c624622622496828c1ae58edec481bba1f5d675d (api-reference/openapi/yaml/) differ "
                "only in search_offers.yaml's 404 schema (not used here) and a repeated "
                "description key."
            ),
        },
        "operations": operations,
    }
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=100))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
