"""FakeGCE on loopback HTTP (compute and storage on one port), for other processes.

The HTTP plumbing is the fakes' one seam (fakes/seam.py): loopback only, one body limit, UTF-8
text, an unknown route a 404 listing every known route (FakeGCE's own body, routes.py), a bug in
the fake a 500 that says so. Connections stay open (HTTP/1.1), as google-auth's session keeps
them. A ticker applies the clock so a boot plays on while nobody asks.
"""

from __future__ import annotations

from pathlib import Path

from fakes import seam
from fakes.gce.model import FakeGCE
from fakes.gce.routes import SLEEP, UnknownRoute, dispatch, unknown_reply


def site(fake: FakeGCE, *, ticker: bool = True) -> seam.Site:
    """FakeGCE as the seam serves it. ``ticker``: apply the clock in the background (a scaled
    clock); off for a test's FakeClock."""

    def answer(request: seam.Request) -> seam.Reply:
        sleeping = SLEEP.fullmatch(request.path)
        if sleeping and request.method == "POST":  # held outside the model's lock
            fake.sleep_until(
                int(sleeping["n"]),
                int(request.query.get("pid", "0")),
                float(request.query.get("seconds", "0")),
            )
            return seam.Reply(200, (), "")
        return dispatch(fake, request)

    def unknown(exc: Exception) -> seam.Reply | None:
        return unknown_reply(exc) if isinstance(exc, UnknownRoute) else None

    return seam.Site(
        name="FakeGCE",
        answer=answer,
        unknown=unknown,
        tick=fake.tick if ticker else None,
        close=fake.close,
        keep_alive=True,
    )


class FakeGCEServer(seam.LoopbackServer):
    def __init__(self, fake: FakeGCE, port: int = 0, *, ticker: bool = True) -> None:
        self.fake = fake
        super().__init__(site(fake, ticker=ticker), seam.LOOPBACK, port)


def serve_http(
    fake: FakeGCE, port: int = 0, *, ticker: bool = True, boot_root: Path | None = None
) -> FakeGCEServer:
    """Serve ``fake`` on loopback; its boots run for real against this server. ``ticker``:
    apply the clock in the background (a scaled clock); off for a test's FakeClock."""
    server = FakeGCEServer(fake, port, ticker=ticker)
    fake.attach(server.url, boot_root)
    return server
