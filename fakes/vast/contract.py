"""Vast's published contract, machine-checked (H6): every exchange judged against it.

The contract is two files under ``recordings/contracts/``: ``vast-openapi.yaml``, the facts
extracted from Vast's own OpenAPI yamls (``extract_vast.py`` beside it: paths, parameters,
request fields, types, enums, required fields, ``x-input-validation`` limits, response fields
per status), and ``vast-client.yaml``, the few facts the yamls lack or contradict, each taken
from the official client's source (vastai 1.9.1) or Vast's rate-limit page, with its source
(docs/fakes.md, "The published contract"). :func:`load` merges them.

:meth:`Contract.judge` reads one exchange (the request a client sent, the reply the fake gave)
and names every breach: a field the contract lacks, a required field missing, a wrong type, a
value outside its enum or limits, a status the operation does not document. It also counts
what it checked (operations, and each field by its path), so a test can say how much of the
contract the suite reaches. FakeVast uses the request half itself: a create or key the
contract refuses is refused (routes.py).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakes.seam import Reply, Request

CONTRACTS = Path(__file__).resolve().parents[2] / "recordings" / "contracts"
OPENAPI = CONTRACTS / "vast-openapi.yaml"
CLIENT = CONTRACTS / "vast-client.yaml"
# What a public key line looks like to sshd (authorized_keys(5)): a key type, then base64.
_KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)  # fmt: skip
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_INDEX = re.compile(r"\[\d+\]")

Node = Mapping[str, Any]


def is_public_key(text: str) -> bool:
    """Whether ``text`` is one OpenSSH public key line: a known type, base64 whose decoded
    blob names the same type, and an optional comment (authorized_keys(5))."""
    import base64
    import binascii
    import struct

    parts = text.strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in _KEY_TYPES or not _BASE64.fullmatch(parts[1]):
        return False
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (size,) = struct.unpack(">I", blob[:4])
    except (binascii.Error, struct.error):
        return False
    return blob[4 : 4 + size] == parts[0].encode()


@dataclass
class Coverage:
    """What the judge has looked at: operations, statuses and field paths."""

    operations: set[str] = field(default_factory=set)
    statuses: set[str] = field(default_factory=set)  # "op status"
    fields: set[str] = field(default_factory=set)  # "op request|status path"

    def counts(self) -> dict[str, int]:
        return {
            "operations": len(self.operations),
            "statuses": len(self.statuses),
            "fields": len(self.fields),
        }


@dataclass(frozen=True)
class Contract:
    """The merged contract: ``operations[name]`` in the format extract_vast.py writes."""

    operations: Mapping[str, Node]
    filter_operators: frozenset[str]
    coverage: Coverage = field(default_factory=Coverage, compare=False)

    # --- one exchange ----------------------------------------------------------------------------
    def judge(self, name: str, request: Request, reply: Reply) -> list[str]:
        """Every breach in one exchange of operation ``name``: the request a client sent, the
        answer the fake gave, and a 2xx given to a request the contract refuses (H4)."""
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError:
            return [f"{name} request: the body is not JSON"]
        asked = self.request_breaches(
            name, method=request.method, path=request.path, query=request.query, body=body
        )
        if reply.drop:  # no answer at all: nothing was said to judge
            return asked
        answered = self.response_breaches(name, reply.status, reply.body)
        if asked and 200 <= reply.status < 300:
            answered.append(f"{name}: answered {reply.status} to a request the contract refuses")
        return asked + answered

    # --- requests --------------------------------------------------------------------------------
    def request_breaches(
        self,
        name: str,
        *,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: object = None,
    ) -> list[str]:
        """Every way this request breaks operation ``name``'s contract (empty: none)."""
        op = self.operations[name]
        self.coverage.operations.add(name)
        out: list[str] = []
        if method != op["method"]:
            out.append(f"{name}: method {method}, the contract says {op['method']}")
        paths = [op["path"], *op.get("also_paths", [])]
        if not any(_path_matches(template, path) for template in paths):
            out.append(f"{name}: path {path} is not {' or '.join(paths)}")
        params = op.get("parameters", {})
        for key, value in (query or {}).items():
            spec = params.get(key)
            where = f"{name} query {key}"
            if spec is None or spec.get("in") != "query":
                out.append(f"{where}: a parameter the contract lacks")
                continue
            self.coverage.fields.add(where)
            out += _query_value(spec, value, where)
        for key, spec in params.items():
            if spec.get("in") == "query" and spec.get("required") and key not in (query or {}):
                out.append(f"{name} query {key}: required, missing")
        request = op.get("request")
        if request is None:
            if body not in (None, {}):
                out.append(f"{name}: a request body the contract does not take")
            return out
        where = f"{name} request"
        if body is None:
            if op.get("request_required", True):
                out.append(f"{where}: the body is missing")
            return out
        out += self._check(request, body, where)
        if isinstance(body, Mapping):
            out += self._validation(op.get("input_validation", {}), body, where)
        return out

    def _validation(self, rules: Node, body: Mapping[str, Any], where: str) -> list[str]:
        """x-input-validation: lengths (alone, or combined over several fields), ranges,
        required, the public key format."""
        out: list[str] = []
        for name, rule in rules.items():
            fields = rule.get("combined", [name])
            present = [body[f] for f in fields if body.get(f) is not None]
            here = f"{where}.{'+'.join(fields)}"
            self.coverage.fields.add(f"{here} (limit)")
            if rule.get("required") and not present:
                out.append(f"{here}: required, missing")
            if not present:
                continue
            if "max_length" in rule:
                if all(isinstance(v, Mapping) for v in present):  # env as the SDK sends it
                    out += _env_lengths(present[0], rule, here)
                else:
                    size = sum(_length(v) for v in present)
                    if size > rule["max_length"]:
                        out.append(f"{here}: {size} characters, the limit is {rule['max_length']}")
            for value in present:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                if "min" in rule and value < rule["min"]:
                    out.append(f"{here}: {value} is below the minimum {rule['min']}")
                if "max" in rule and value > rule["max"]:
                    out.append(f"{here}: {value} is above the maximum {rule['max']}")
            if rule.get("format") == "ssh_public_key":
                if not all(isinstance(v, str) and is_public_key(v) for v in present):
                    out.append(f"{here}: not an SSH public key")
        return out

    # --- responses -------------------------------------------------------------------------------
    def response_breaches(self, name: str, status: int, body: str | bytes) -> list[str]:
        """Every way this answer breaks operation ``name``'s documented responses."""
        op = self.operations[name]
        self.coverage.operations.add(name)
        responses: Mapping[str, Node] = op["responses"]
        where = f"{name} {status}"
        spec = responses.get(str(status))
        if spec is None:
            return [f"{where}: a status the contract does not document for {name}"]
        self.coverage.statuses.add(where)
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        if spec.get("type") == "any":
            return []
        try:
            doc = json.loads(text)
        except ValueError:
            if spec.get("plain_text"):
                return []
            return [f"{where}: the body is not JSON: {text[:80]!r}"]
        return self._check(spec, doc, where)

    # --- one value against one node ----------------------------------------------------------------
    def _check(self, spec: Node, value: object, where: str) -> list[str]:
        self.coverage.fields.add(_INDEX.sub("[]", where))
        if value is None:
            if spec.get("nullable") or spec.get("type") == "any":
                return []
            return [f"{where}: null, the contract says {_types(spec)}"]
        types = _types(spec)
        if "any" in types:
            return []
        if not any(_is(kind, value) for kind in types):
            return [f"{where}: {_kind(value)} {_short(value)}, the contract says {types}"]
        out: list[str] = []
        if "enum" in spec and value not in spec["enum"] and not _tokens_in(spec, value):
            out.append(f"{where}: {value!r} is not one of {spec['enum']}")
        if isinstance(value, str) and "max_length" in spec and len(value) > spec["max_length"]:
            out.append(f"{where}: {len(value)} characters, the limit is {spec['max_length']}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if "min" in spec and value < spec["min"]:
                out.append(f"{where}: {value} is below the minimum {spec['min']}")
            if "max" in spec and value > spec["max"]:
                out.append(f"{where}: {value} is above the maximum {spec['max']}")
        if isinstance(value, Mapping):
            out += self._object(spec, value, where)
        if isinstance(value, list) and "items" in spec:
            for i, item in enumerate(value):
                out += self._check(spec["items"], item, f"{where}[{i}]")
        return out

    def _object(self, spec: Node, value: Mapping[str, object], where: str) -> list[str]:
        out: list[str] = []
        if "filter" in _types(spec):
            fields: Mapping[str, Node] = spec.get("fields", {})
            for op, operand in value.items():
                if op not in self.filter_operators:
                    out.append(f"{where}.{op}: not an operator ({sorted(self.filter_operators)})")
                elif op in fields:
                    out += self._check(fields[op], operand, f"{where}.{op}")
            return out
        if "fields" not in spec:
            return out
        fields = spec["fields"]
        for key, item in value.items():
            if key in fields:
                out += self._check(fields[key], item, f"{where}.{key}")
            elif not spec.get("open") and not (item is None and spec.get("unknown_as_null")):
                out.append(f"{where}.{key}: a field the contract lacks")
        for key in spec.get("required", []):
            if key not in value:
                out.append(f"{where}.{key}: required, missing")
        return out


# --- helpers ---------------------------------------------------------------------------------------
def _types(spec: Node) -> list[str]:
    kind = spec.get("type", "any")
    return list(kind) if isinstance(kind, list) else [str(kind)]


def _is(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("object", "filter"):
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    raise ValueError(f"the contract names an unknown type {kind!r}")


def _tokens_in(spec: Node, value: object) -> bool:
    """A space-separated list of enum values, where the contract allows one (``tokens``)."""
    if not (spec.get("tokens") and isinstance(value, str) and value.split()):
        return False
    allowed = {*spec["enum"], *spec.get("token_spellings", [])}
    return all(token in allowed for token in value.split())


def _query_value(spec: Node, value: str, where: str) -> list[str]:
    kind = _types(spec)[0]
    if kind == "integer":
        try:
            number = int(value)
        except ValueError:
            return [f"{where}: {value!r} is not an integer"]
        if "max" in spec and number > spec["max"]:
            return [f"{where}: {number} is above the maximum {spec['max']}"]
    if "enum" in spec and value not in spec["enum"]:
        return [f"{where}: {value!r} is not one of {spec['enum']}"]
    if spec.get("json"):
        try:
            json.loads(value)
        except ValueError:
            return [f"{where}: {value!r} is not JSON"]
    return []


def _length(value: object) -> int:
    if isinstance(value, list):
        return len(" ".join(str(v) for v in value))
    return len(str(value))


def _env_lengths(env: Mapping[str, object], rule: Node, where: str) -> list[str]:
    out = [
        f"{where}.{key}: {len(str(v))} characters, the limit is {rule['max_length']}"
        for key, v in env.items()
        if len(str(v)) > rule["max_length"]
    ]
    total = sum(len(str(k)) + len(str(v)) for k, v in env.items())
    if "max_total_length" in rule and total > rule["max_total_length"]:
        out.append(f"{where}: {total} characters in all, the limit is {rule['max_total_length']}")
    return out


def _path_matches(template: str, path: str) -> bool:
    pattern = re.escape(template).replace(r"\{id\}", "[0-9]+")
    return re.fullmatch(pattern, path) is not None


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = json.loads(json.dumps(value))


def _at(root: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = root
    for part in dotted.split("."):
        node = node.setdefault(part, {})
    return node


def merged(openapi: Mapping[str, Any], client: Mapping[str, Any]) -> Contract:
    """The OpenAPI facts with the client file's patches applied, each where it says."""
    operations: dict[str, Any] = json.loads(json.dumps(openapi["operations"]))
    operators: set[str] = set()
    for op in operations.values():
        operators.update(op.get("filter_operators", []))
    for patch in client["patches"]:
        if not patch.get("source"):
            raise ValueError(f"a contract patch without a source: {patch!r}")
        names = patch["operations"] if "operations" in patch else [patch["operation"]]
        for name in names:
            _merge(_at(operations[name], patch["at"]) if patch["at"] else operations[name],
                   patch["merge"])  # fmt: skip
    operators.update(client.get("filter_operators", []))
    return Contract(operations, frozenset(operators))


@functools.cache
def _documents() -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    import yaml

    return (
        yaml.safe_load(OPENAPI.read_text(encoding="utf-8")),
        yaml.safe_load(CLIENT.read_text(encoding="utf-8")),
    )


def load() -> Contract:
    """A fresh contract (its own coverage counters) from the two checked-in files."""
    return merged(*_documents())


def field_count(contract: Contract) -> int:
    """How many fields (request, parameter and response, at every depth) the contract holds."""

    def count(node: Node) -> int:
        total = 0
        for child in node.get("fields", {}).values():
            total += 1 + count(child)
        if "items" in node:
            total += count(node["items"])
        return total

    total = 0
    for op in contract.operations.values():
        total += len(op.get("parameters", {}))
        if "request" in op:
            total += count(op["request"])
        for answer in op["responses"].values():
            total += count(answer)
    return total


def names(contract: Contract) -> Sequence[str]:
    return sorted(contract.operations)
