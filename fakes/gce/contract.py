"""Google's published contract for the lane's calls, machine-checked (H6).

The contract is Google's own discovery documents for the Compute Engine API (compute v1) and
the Cloud Storage JSON API (storage v1), exactly as google-api-python-client ships them
(``googleapiclient/discovery_cache/documents/``, the pinned dev dependency in pyproject.toml;
:data:`REVISIONS` names the revisions this judge was written against). Nothing is copied or
extracted: the documents are read where the package installed them, without importing it.

:meth:`Contract.judge` reads one exchange (the request a client sent, the reply the fake gave),
finds the discovery method whose HTTP method and path template it matches, and names every
breach: a path or query parameter the method lacks or a required one missing, a query value of
the wrong type or outside its enum, a request body or a 2xx response body with a field its
schema lacks, a wrong type, a value outside its enum, an int64 rendered as a JSON number, a
``date-time`` that is not RFC 3339, or a request field the schema's ``annotations.required``
lists for this method missing. Error bodies (4xx, 5xx) are not schemas in a discovery document
and are not judged here (tests/test_google_errors.py reads them). It also counts what it
checked (methods, and each field by its path), so a test can say how much the suite reaches.

Two facts the documents leave to other pages, each with its source:

- Proto3's JSON mapping (protobuf.dev/programming-guides/json): an int64/uint64 is written as a
  decimal string, and a parser accepts a number or a string; so a *request* may send either,
  and a *response* renders a string. ``null`` is accepted on input as the field's default.
- The Cloud Storage upload paths (cloud.google.com/storage/docs/uploading-objects and
  performing-resumable-uploads): ``/upload/storage/v1/b/{bucket}/o`` with ``uploadType``
  ``media``, ``multipart`` or ``resumable``, and the session URL's ``PUT`` with its
  ``upload_id``; a download is objects.get at ``/download/storage/v1/...`` with ``alt=media``
  (the document's ``useMediaDownloadService``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakes.seam import Reply, Request

PACKAGE = "google-api-python-client==2.202.0"
DOCUMENTS = ("compute.v1.json", "storage.v1.json")
# The revisions the pinned package ships: a new pin is a new contract, read on purpose.
REVISIONS = {"compute:v1": "20261106", "storage:v1": "20261009"}
# uploadType values the simple upload path takes (Cloud Storage "Uploading objects" pages).
UPLOAD_TYPES = ("media", "multipart", "resumable")
_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_INT = re.compile(r"-?\d+")

Node = Mapping[str, Any]


def documents_dir() -> Path:
    """Where google-api-python-client installed its discovery documents (not imported)."""
    spec = importlib.util.find_spec("googleapiclient")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the discovery documents need {PACKAGE} (a dev dependency)")
    return Path(next(iter(spec.submodule_search_locations))) / "discovery_cache" / "documents"


@dataclass(frozen=True)
class Method:
    """One discovery method, as a request reaches it."""

    id: str  # "compute.instances.get"
    api: str  # "compute:v1"
    http_method: str
    pattern: re.Pattern[str]
    node: Node
    media: str = ""  # "", "upload" (the simple upload path), "download", "session"


@dataclass
class Coverage:
    """What the judge has looked at: methods, statuses and field paths."""

    operations: set[str] = field(default_factory=set)
    statuses: set[str] = field(default_factory=set)  # "method status"
    fields: set[str] = field(default_factory=set)  # "method request|status path"

    def counts(self) -> dict[str, int]:
        return {
            "operations": len(self.operations),
            "statuses": len(self.statuses),
            "fields": len(self.fields),
        }


def _template(path: str) -> str:
    """A discovery path template as a regex: ``{x}`` one segment, ``{+x}`` any."""
    out, at = "", 0
    for found in re.finditer(r"\{(\+?)([^}]+)\}", path):
        out += re.escape(path[at : found.start()])
        name = re.sub(r"\W", "_", found.group(2))
        out += f"(?P<{name}>.+)" if found.group(1) else f"(?P<{name}>[^/]+)"
        at = found.end()
    return out + re.escape(path[at:])


def _methods(doc: Node, resources: Node) -> list[tuple[Node, Node]]:
    out: list[tuple[Node, Node]] = []
    for resource in resources.values():
        out += [(doc, m) for m in resource.get("methods", {}).values()]
        out += _methods(doc, resource.get("resources", {}))
    return out


@dataclass(frozen=True)
class Contract:
    """Both discovery documents: every method, and the schemas by api."""

    docs: Mapping[str, Node]  # "compute:v1" -> the document
    methods: Sequence[Method]
    coverage: Coverage = field(default_factory=Coverage, compare=False)

    def method(self, http_method: str, path: str) -> Method | None:
        for m in self.methods:
            if m.http_method == http_method.upper() and m.pattern.fullmatch(path):
                return m
        return None

    # --- one exchange ----------------------------------------------------------------------------
    def judge(self, request: Request, reply: Reply) -> list[str]:
        """Every breach in one exchange: the request and, for a 2xx, the body answered. A
        request no discovery method takes is one breach."""
        m = self.method(request.method, request.path)
        if m is None:
            return [f"{request.method} {request.path}: no discovery method takes it"]
        out = self.request_breaches(m, request)
        if m.media == "upload" and request.query.get("uploadType") == "resumable":
            return out + _session_start(m, reply)
        if reply.drop or reply.status >= 300:
            if reply.status >= 300:
                self.coverage.statuses.add(f"{m.id} {reply.status}")
            return out
        return out + self.response_breaches(m, reply)

    def request_breaches(self, m: Method, request: Request) -> list[str]:
        self.coverage.operations.add(m.id)
        doc = self.docs[m.api]
        params = dict(doc.get("parameters", {})) | dict(m.node.get("parameters", {}))
        out: list[str] = []
        groups = m.pattern.fullmatch(request.path)
        for name, spec in m.node.get("parameters", {}).items():
            if spec.get("location") == "path" and spec.get("required"):
                key = re.sub(r"\W", "_", name)
                if groups is None or not groups.groupdict().get(key):
                    out.append(f"{m.id} path {name}: required, missing")
        query = dict(request.query)
        if m.media == "session":  # the resumable session URL: its own two parameters
            if query.pop("upload_id", "") == "" or query.pop("uploadType", "") != "resumable":
                out.append(f"{m.id} session: upload_id and uploadType=resumable, required")
        for key, value in query.items():
            spec = params.get(key)
            where = f"{m.id} query {key}"
            if spec is None or spec.get("location") != "query":
                out.append(f"{where}: a parameter the contract lacks")
                continue
            self.coverage.fields.add(where)
            out += _query_value(spec, value, where)
            if key == "uploadType" and m.media == "upload" and value not in UPLOAD_TYPES:
                out.append(f"{where}: {value!r} is not one of {list(UPLOAD_TYPES)}")
        for key, spec in m.node.get("parameters", {}).items():
            if spec.get("location") == "query" and spec.get("required") and key not in query:
                out.append(f"{m.id} query {key}: required, missing")
        if m.media == "upload" and query.get("uploadType") not in UPLOAD_TYPES:
            out.append(f"{m.id} query uploadType: required on the upload path, missing")
        if m.media == "download" and query.get("alt") != "media":
            out.append(f"{m.id} query alt: media, required on the download path")
        return out + self._request_body(m, request)

    def _request_body(self, m: Method, request: Request) -> list[str]:
        ref = (m.node.get("request") or {}).get("$ref")
        if m.media == "session":
            return []  # the object's bytes
        if m.media == "upload":  # the metadata, when the upload carries one
            kind = request.query.get("uploadType")
            if kind == "media":
                return []
            if kind == "multipart":
                from fakes.gce.routes import _multipart

                parts = _multipart(request.headers.get("content-type", ""), request.body)
                if len(parts) != 2:
                    return [f"{m.id} request: multipart needs the metadata and the data"]
                raw = parts[0]
            else:
                raw = request.body
            if not raw:
                return []
            try:
                sent = json.loads(raw)
            except ValueError:
                return [f"{m.id} request: the metadata is not JSON"]
            return self._validate(m, ref, sent, f"{m.id} request", "request")
        if ref is None:
            if request.body:
                return [f"{m.id}: a request body the method does not take"]
            return []
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            return [f"{m.id} request: the body is not JSON"]
        out = self._validate(m, ref, body, f"{m.id} request", "request")
        out += self._required(m, ref, body, f"{m.id} request")
        return out

    def response_breaches(self, m: Method, reply: Reply) -> list[str]:
        self.coverage.operations.add(m.id)
        self.coverage.statuses.add(f"{m.id} {reply.status}")
        if m.media in ("download",) or (m.media == "session" and reply.status == 308):
            return []  # the object's bytes, or a session's progress (no body)
        ref = (m.node.get("response") or {}).get("$ref")
        if ref is None:
            return [] if not reply.data.strip() else [f"{m.id} {reply.status}: a body it lacks"]
        try:
            body = json.loads(reply.data)
        except ValueError:
            return [f"{m.id} {reply.status}: the body is not JSON"]
        return self._validate(m, ref, body, f"{m.id} {reply.status}", "response")

    # --- schemas ---------------------------------------------------------------------------------
    def _schema(self, m: Method, ref: str) -> Node:
        return dict(self.docs[m.api]["schemas"][ref])

    def _validate(
        self, m: Method, ref: str | None, value: object, where: str, side: str
    ) -> list[str]:
        if ref is None:
            return []
        return self._check(m, self._schema(m, ref), value, where, "", side)

    def _check(
        self, m: Method, schema: Node, value: object, where: str, path: str, side: str
    ) -> list[str]:
        if "$ref" in schema:
            schema = {**self._schema(m, schema["$ref"]), **{k: v for k, v in schema.items()
                                                            if k != "$ref"}}  # fmt: skip
        at = f"{where}.{path}" if path else where
        self.coverage.fields.add(f"{m.id} {side} {_plain(path)}")
        if value is None:
            return (
                [] if side == "request" else [f"{at}: null, the contract says {schema.get('type')}"]
            )
        kind = schema.get("type")
        if kind == "object":
            return self._object(m, schema, value, where, path, side)
        if kind == "array":
            if not isinstance(value, list):
                return [f"{at}: a {type(value).__name__}, the contract says an array"]
            out: list[str] = []
            for n, item in enumerate(value):
                out += self._check(m, schema.get("items", {}), item, where, f"{path}[{n}]", side)
            return out
        return _scalar(schema, value, at, side)

    def _object(
        self, m: Method, schema: Node, value: object, where: str, path: str, side: str
    ) -> list[str]:
        at = f"{where}.{path}" if path else where
        if not isinstance(value, dict):
            return [f"{at}: a {type(value).__name__}, the contract says an object"]
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        out: list[str] = []
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if key in props:
                out += self._check(m, props[key], item, where, sub, side)
            elif extra is not None:
                out += self._check(m, extra, item, where, f"{path}.*" if path else "*", side)
            else:
                out.append(f"{where}.{sub}: a field the contract lacks")
        return out

    def _required(self, m: Method, ref: str, body: object, where: str) -> list[str]:
        """Top-level request fields whose ``annotations.required`` names this method."""
        if not isinstance(body, dict):
            return []
        props = self._schema(m, ref).get("properties", {})
        return [
            f"{where}.{key}: required, missing"
            for key, spec in props.items()
            if m.id in spec.get("annotations", {}).get("required", []) and key not in body
        ]


def _session_start(m: Method, reply: Reply) -> list[str]:
    """A resumable upload's first answer: 200 with the session URL in ``Location`` and no body
    (cloud.google.com/storage/docs/performing-resumable-uploads), or a refusal."""
    if reply.drop or reply.status >= 300:
        return []
    headers = {k.lower(): v for k, v in reply.headers}
    out = [] if headers.get("location") else [f"{m.id} session {reply.status}: no Location"]
    if reply.data.strip():
        out.append(f"{m.id} session {reply.status}: a body the session start lacks")
    return out


def _plain(path: str) -> str:
    """A field path without array indices: one path for every element."""
    return re.sub(r"\[\d+\]", "[]", path)


def _scalar(schema: Node, value: object, at: str, side: str) -> list[str]:
    kind, fmt = schema.get("type"), schema.get("format", "")
    out: list[str] = []
    if kind == "any":
        return out
    if kind == "string":
        if fmt in ("int64", "uint64") and side == "request" and _is_int(value):
            return out  # proto3 JSON: a parser accepts a number for an int64
        if not isinstance(value, str):
            return [f"{at}: a {type(value).__name__} {value!r}, the contract says a string"]
        if fmt in ("int64", "uint64") and not _INT.fullmatch(value):
            out.append(f"{at}: {value!r} is not an {fmt}")
        if fmt == "date-time" and not _DATE_TIME.fullmatch(value):
            out.append(f"{at}: {value!r} is not an RFC 3339 date-time")
    elif kind == "integer":
        string_ok = side == "request" and isinstance(value, str) and _INT.fullmatch(value)
        if not (_is_int(value) or string_ok):
            return [f"{at}: a {type(value).__name__} {value!r}, the contract says an integer"]
        if fmt.startswith("uint") and int(str(value)) < 0:
            out.append(f"{at}: {value} is negative, the contract says {fmt}")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{at}: a {type(value).__name__} {value!r}, the contract says a number"]
    elif kind == "boolean":
        if not isinstance(value, bool):
            return [f"{at}: a {type(value).__name__} {value!r}, the contract says a boolean"]
    else:
        return [f"{at}: a type {kind!r} this judge does not know"]
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        out.append(f"{at}: {value!r} is not one of its {len(enum)} enum values")
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _query_value(spec: Node, value: str, where: str) -> list[str]:
    kind = spec.get("type")
    if kind == "integer" and not _INT.fullmatch(value):
        return [f"{where}: {value!r} is not an integer"]
    if kind == "string" and spec.get("format") in ("int64", "uint64") and not _INT.fullmatch(value):
        return [f"{where}: {value!r} is not an {spec['format']}"]
    if kind == "boolean" and value not in ("true", "false"):
        return [f"{where}: {value!r} is not a boolean"]
    if spec.get("enum") is not None and value not in spec["enum"]:
        return [f"{where}: {value!r} is not one of {spec['enum']}"]
    return []


def _build(docs: Mapping[str, Node]) -> list[Method]:
    out: list[Method] = []
    for api, doc in docs.items():
        service = "/" + str(doc["servicePath"])
        for _, node in _methods(doc, doc.get("resources", {})):
            verb, path = str(node["httpMethod"]), str(node.get("flatPath") or node["path"])
            out.append(Method(node["id"], api, verb, re.compile(_template(service + path)), node))
            if node.get("useMediaDownloadService"):
                download = _template("/download" + service + path)
                out.append(Method(node["id"], api, verb, re.compile(download), node, "download"))
            simple = node.get("mediaUpload", {}).get("protocols", {}).get("simple")
            if simple:
                upload = re.compile(_template(str(simple["path"])))
                out.append(Method(node["id"], api, verb, upload, node, "upload"))
                out.append(Method(node["id"], api, "PUT", upload, node, "session"))
    # an upload or download path before the plain ones that might also match it
    return sorted(out, key=lambda m: m.media == "")


@functools.cache
def _documents() -> Mapping[str, Node]:
    where = documents_dir()
    docs: dict[str, Node] = {}
    for name in DOCUMENTS:
        doc = json.loads((where / name).read_text(encoding="utf-8"))
        docs[str(doc["id"])] = doc
    return docs


def load() -> Contract:
    """Both documents as one contract, with fresh coverage."""
    docs = _documents()
    return Contract(docs, _build(docs))


def field_count(contract: Contract, ids: Sequence[str]) -> int:
    """How many request and response fields (at every depth, each schema once per method)
    the contract holds for the methods ``ids``: what is checked."""
    total = 0
    for m in {m.id: m for m in contract.methods if m.id in ids}.values():
        for key in ("request", "response"):
            ref = (m.node.get(key) or {}).get("$ref")
            if ref:
                total += _count(contract.docs[m.api]["schemas"], ref, set())
    return total


def _count(schemas: Node, ref: str, seen: set[str]) -> int:
    if ref in seen:
        return 0
    seen.add(ref)
    total = 0
    stack: list[Node] = [schemas[ref]]
    while stack:
        node = stack.pop()
        for spec in node.get("properties", {}).values():
            total += 1
            stack.append(spec)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
        if "$ref" in node:
            total += _count(schemas, node["$ref"], seen)
    return total
