"""Provider adapters (``vast``), and the loader for the recordings they are tested on (H1).

A recording is one HTTP exchange in ``recordings/<provider>/<name>.yaml`` (recordings/README.md):

    provenance: {kind: public|reconstructed|captured, source: ..., date: ..., notes: ...}
    request:  {method: PUT, path: /api/v0/asks/1234567/, query: {owner: me}}   # query optional
    response: {status: 410, headers: {Content-Type: application/json}, body: <exact text>}

``load_recording("vast", "create_no_such_ask_410")`` returns a frozen ``Recording``;
``Recording.to_response(base_url)`` turns it into a ``responses`` registration (``responses``
is a test dependency, imported only there). Tests replay recordings through it, and the fakes
render bodies from the same files, so a parser and a fake can never disagree on a shape.
Variants are made with ``dataclasses.replace`` (another status or path), never by editing text
in a test. Nothing here is imported by the CLI's start-up path.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.errors import UsageError

if TYPE_CHECKING:
    import responses

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
KINDS = frozenset({"public", "reconstructed", "captured"})


@dataclass(frozen=True)
class Recording:
    """One recorded exchange; ``body`` is the exact response text."""

    provider: str
    name: str
    kind: str
    source: str
    date: str
    notes: str
    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    status: int
    headers: tuple[tuple[str, str], ...]
    body: str

    @property
    def content_type(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "content-type"), None)

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + self.path

    def to_response(self, base_url: str) -> responses.BaseResponse:
        """A ``responses`` registration answering this request at ``base_url``.

        When the recording names a query, the request must carry those parameters (others
        may be present too), so a replay also checks what the client sent.
        """
        import responses
        from responses import matchers

        match = [matchers.query_param_matcher(dict(self.query), strict_match=False)]
        return responses.Response(
            method=self.method,
            url=self.url(base_url),
            body=self.body,
            status=self.status,
            headers={k: v for k, v in self.headers if k.lower() != "content-type"},
            content_type=self.content_type,
            match=match if self.query else (),
        )


def load_recording(provider: str, name: str, root: Path | None = None) -> Recording:
    """The recording ``recordings/<provider>/<name>.yaml``; a malformed one is a UsageError.
    ``root``: another recordings folder (one `gpuops record` just wrote, in a test)."""
    import yaml

    path = (RECORDINGS if root is None else root) / provider / f"{name}.yaml"
    try:
        # libyaml's safe loader where it is built in (as fakes/ssh reads its recordings): the
        # same documents, a tenth of the time; the tests and the fakes load recordings per call
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (safe)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read recording {path}: {exc}") from exc
    where = f"recording {path}"
    provenance = _section(doc, "provenance", where)
    request = _section(doc, "request", where)
    response = _section(doc, "response", where)
    kind = _text(provenance, "kind", where)
    if kind not in KINDS:
        raise UsageError(f"{where}: provenance.kind {kind!r} is not one of {sorted(KINDS)}")
    date = provenance.get("date")
    if not isinstance(date, _dt.date):
        raise UsageError(f"{where}: provenance.date must be a date (YYYY-MM-DD)")
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        raise UsageError(f"{where}: response.status must be an integer")
    return Recording(
        provider=provider,
        name=name,
        kind=kind,
        source=_text(provenance, "source", where),
        date=date.isoformat(),
        notes=str(provenance.get("notes") or ""),
        method=_text(request, "method", where).upper(),
        path=_text(request, "path", where),
        query=_pairs(request.get("query"), "request.query", where),
        status=status,
        headers=_pairs(response.get("headers"), "response.headers", where),
        body=_text(response, "body", where, allow_empty=True),
    )


def _section(doc: object, name: str, where: str) -> Mapping[str, object]:
    value = doc.get(name) if isinstance(doc, Mapping) else None
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: no {name!r} mapping at the top level")
    return value


def _text(section: Mapping[str, object], name: str, where: str, allow_empty: bool = False) -> str:
    value = section.get(name)
    if not isinstance(value, str) or not (value or allow_empty):
        raise UsageError(f"{where}: {name!r} must be a non-empty string")
    return value


def _pairs(value: object, name: str, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise UsageError(f"{where}: {name} must map strings to strings (quote numbers)")
    return tuple((k, v) for k, v in value.items())
