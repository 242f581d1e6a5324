"""Faults: the failures one request can meet, raised by the model and rendered by routes.py.

Each is either scripted by the scenario (a 429 burst, a failing destroy, a lost create) or
modelled (an offer taken, an instance gone). The model raises; ``routes._render`` turns each
into the recorded body of that failure.
"""

from __future__ import annotations


class Fault(Exception):
    """A scripted or modelled failure of one request."""


class RateLimit(Fault):
    """429, with one of the recorded bodies (scenario ``body``) and maybe a Retry-After."""

    def __init__(
        self, body: str, retry_after_s: float | None = None, *, threshold: float | None = None
    ) -> None:
        super().__init__(f"429 ({body})")
        self.body, self.retry_after_s, self.threshold = body, retry_after_s, threshold


class Unavailable(Fault):
    """A 5xx with the recorded empty body."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class Dropped(Fault):
    """The connection closes without an answer (after the request was acted on)."""


class NoSuchAsk(Fault):
    """The offer cannot be rented: taken, unknown, or already ours."""

    def __init__(self, offer_id: int, status: int) -> None:
        super().__init__(f"no_such_ask {offer_id} ({status})")
        self.offer_id, self.status = offer_id, status


class NoSuchInstance(Fault):
    """A destroy of a box that is already gone (or never was)."""

    def __init__(self, instance_id: int, error: str) -> None:
        super().__init__(f"{error} {instance_id}")
        self.instance_id, self.error = instance_id, error
