"""FakeVast in-process: ``responses`` callbacks in front of the model, for fast tests.

Every request under ``base_url`` goes to :func:`fakes.vast.routes.dispatch` through the fakes'
one seam (fakes/seam.py), whatever its method or path, so an unknown route is not responses'
anonymous ConnectionError (which the vastai client would retry, and the adapter would call
"unavailable") but an :class:`~fakes.vast.routes.UnknownRoute` raised into the test with every
known route. A lost create (``answer: close``) raises ``requests.ConnectionError`` after the box
exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fakes import seam
from fakes.vast.server import site

if TYPE_CHECKING:
    import responses

    from fakes.vast.model import FakeVast


@contextmanager
def activate(
    model: FakeVast, base_url: str, *, mock: responses.RequestsMock | None = None
) -> Iterator[responses.RequestsMock]:
    """Route ``base_url`` to ``model`` for the duration; onto ``mock`` when given (so a test
    can mix the fake with other registrations), else on a fresh RequestsMock."""
    with seam.activate(site(model), base_url, mock=mock) as active:
        yield active


def register(model: FakeVast, mock: responses.RequestsMock, base_url: str) -> None:
    """Add one callback per HTTP method answering everything under ``base_url``."""
    seam.register(site(model), mock, base_url)
