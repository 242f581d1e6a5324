"""FakeVast: one stateful model of Vast.ai, served in-process (``responses``) or on loopback.

    model.py      state: offers, instances on an injected clock, SSH keys, scripted faults
    faults.py     the failures a request can meet (raised by the model, rendered by routes)
    boxtable.py   the fake ssh box table the model keeps (fakes/ssh/README.md)
    wire.py       bodies rendered from recordings/vast (requests and replies: fakes/seam.py)
    query.py      Vast's filter language over wire rows
    routes.py     the URL table (a ``seam.Router``) and ``dispatch``
    server.py     ``site(model)`` for the seam; ``serve_http(model)``: loopback on 127.0.0.1
    inprocess.py  ``FakeVast.activate()``: the seam's responses callbacks
    clock.py      FakeClock (tests), ExportedClock (`fakes serve`), ScaledClock (the demo)

Nothing here imports ``responses`` or ``vastai`` until a fake is activated.
"""

from fakes.vast.clock import ExportedClock, FakeClock, ScaledClock
from fakes.vast.model import DEFAULT_BASE_URL, FakeVast
from fakes.vast.routes import UnknownRoute, known_routes
from fakes.vast.server import FakeVastServer, serve_http

__all__ = [
    "DEFAULT_BASE_URL",
    "ExportedClock",
    "FakeClock",
    "FakeVast",
    "FakeVastServer",
    "ScaledClock",
    "UnknownRoute",
    "known_routes",
    "serve_http",
]
