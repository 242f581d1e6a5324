"""FakeGCE: the lane's instance, its zone operations and its bucket, on an injected clock."""

from fakes.gce.model import FakeGCE
from fakes.gce.scenario import LaneScenario, parse_lane

__all__ = ["FakeGCE", "LaneScenario", "parse_lane"]
