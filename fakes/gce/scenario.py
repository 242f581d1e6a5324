"""The ``lane:`` section of a scenario file (fakes/README.md): what FakeGCE scripts.

Every field is checked; an unknown one is a ScenarioError naming it, never a silent default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from fakes.scenario import ScenarioError

START_OUTCOMES = (
    "ok",
    "stockout",
    "stockout-plain",
    "insufficient-capacity",
    "quota",
    "unavailable",
    "quota-403",  # start refused synchronously: HTTP 403 quotaExceeded, no operation
    "unavailable-503",  # start refused synchronously: HTTP 503, no operation
)


@dataclass(frozen=True)
class LaneScenario:
    project: str = "gpuops-lane"
    zone: str = "us-central1-b"
    instance: str = "gpu-lane"
    bucket: str = "gpuops-lane-jobs"
    provisioning_s: float = 5.0  # PROVISIONING -> STAGING
    staging_s: float = 10.0  # STAGING -> RUNNING
    stopping_s: float = 5.0  # STOPPING -> TERMINATED after the script powers off
    # A zone operation is PENDING for operation_pending_s, then RUNNING, then DONE: start's
    # after start_operation_s, setMetadata's and setScheduling's after write_operation_s
    # (fakes/README.md says where each default comes from).
    operation_pending_s: float = 0.5
    start_operation_s: float = 7.0
    write_operation_s: float = 1.0
    job_runtime_s: float = 600.0  # run_job's duration
    results: int = 6  # result files a successful job uploads
    disk_free_gb: int = 100
    starts: tuple[str, ...] = ()  # outcome of each start on a TERMINATED instance, then "ok"
    fingerprint_races: int = 0  # setMetadata calls that lose to another writer first (412)
    broken_imports: tuple[str, ...] = ()  # modules whose import fails at preflight
    installed: tuple[str, ...] = ("torch", "torchvision", "numpy", "PIL")  # on the VM image
    staged: tuple[str, ...] = ()  # objects in the bucket at the start
    running_job: str | None = None  # a third operator's job already running (its own tooling)
    # A storage outage: every write of an object whose name starts with this prefix is
    # answered 503 (recordings/gcs/service_unavailable_503) for gcs_write_outage_s of fake
    # time, counted from the first write under the prefix. Empty: no outage.
    gcs_write_outage_prefix: str = ""
    gcs_write_outage_s: float = 0.0
    # A bucket the caller may read but not write: every write and delete of an object whose
    # name starts with this prefix is answered 403 (recordings/gcs/forbidden_403). Empty: none.
    gcs_write_forbidden_prefix: str = ""
    # The instance's run ceiling as an earlier `lane install` left it (scheduling.maxRunDuration,
    # with instanceTerminationAction STOP), in seconds. 0: none set, as on a new instance.
    run_ceiling_s: float = 0.0


def parse_lane(doc: object, source: str = "<scenario>") -> LaneScenario:
    if doc is None:
        return LaneScenario()
    if not isinstance(doc, Mapping):
        raise ScenarioError(f"{source}: lane must be a mapping")
    known = {f.name: f for f in fields(LaneScenario)}
    values: dict[str, object] = {}
    for key, value in doc.items():
        if key not in known:
            raise ScenarioError(f"{source}: lane.{key} is not a lane field; known: {sorted(known)}")
        default = known[key].default
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ScenarioError(f"{source}: lane.{key} must be a list of strings")
            value = tuple(value)
        elif isinstance(default, float):
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ScenarioError(f"{source}: lane.{key} must be a number >= 0")
            value = float(value)
        elif isinstance(default, int):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ScenarioError(f"{source}: lane.{key} must be an integer >= 0")
        elif not isinstance(value, str) or (not value and default != ""):
            raise ScenarioError(f"{source}: lane.{key} must be a non-empty string")
        values[key] = value
    scenario = LaneScenario(**values)  # type: ignore[arg-type]
    for index, outcome in enumerate(scenario.starts):
        if outcome not in START_OUTCOMES:
            raise ScenarioError(
                f"{source}: lane.starts[{index}] {outcome!r} is not one of {START_OUTCOMES}"
            )
    return scenario
