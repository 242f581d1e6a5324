"""FakeGCE in-process: ``responses`` callbacks in front of the model, through the fakes' one
seam (fakes/seam.py), as fakes/vast/inprocess.py.

An unknown route raises ``UnknownRoute`` into the test, with every known route."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fakes import seam
from fakes.gce.server import site

if TYPE_CHECKING:
    import responses

    from fakes.gce.model import FakeGCE


@contextmanager
def activate(fake: FakeGCE, base_url: str) -> Iterator[responses.RequestsMock]:
    """Route ``base_url`` (compute and storage) to ``fake`` for the duration."""
    with seam.activate(site(fake, ticker=False), base_url) as mock:
        yield mock
