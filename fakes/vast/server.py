"""FakeVast on loopback HTTP: the same model and routes as in-process, for other processes.

The HTTP plumbing is the fakes' one seam (fakes/seam.py): loopback only, one body limit, UTF-8,
an unknown route a 404 listing every known route (FakeVast's own ``fake_vast_unknown_route``
body), a bug in the fake a 500 that says so. A lost create closes the connection without a byte
of answer. The server's ticker applies the clock every ``seam.TICK_S`` so the fake ssh box table
follows a scaled clock even while nobody calls the API (a box that dies mid-job stops answering
ssh).
"""

from __future__ import annotations

from fakes import seam
from fakes.vast import wire
from fakes.vast.model import FakeVast
from fakes.vast.routes import UnknownRoute, dispatch


def site(model: FakeVast) -> seam.Site:
    """FakeVast as the seam serves it, in process and on loopback."""

    def unknown(exc: Exception) -> seam.Reply | None:
        if isinstance(exc, UnknownRoute):
            return wire.unknown_route(exc.method, exc.path, exc.known)
        return None

    return seam.Site(
        name="FakeVast",
        answer=lambda request: dispatch(model, request),
        unknown=unknown,
        tick=model.tick,
    )


class FakeVastServer(seam.LoopbackServer):
    """A running loopback server; ``url`` is what VAST_URL should say."""

    def __init__(self, model: FakeVast, host: str = seam.LOOPBACK, port: int = 0) -> None:
        self.model = model
        super().__init__(site(model), host, port)


def serve_http(model: FakeVast, host: str = seam.LOOPBACK, port: int = 0) -> FakeVastServer:
    """Serve ``model`` on ``host:port`` (port 0: a free one); only loopback addresses."""
    return FakeVastServer(model, host, port)
