"""How a lane job ended and what it cost, and how that was computed: the figures `lane release`,
`lane watch` and the history show. The sum itself is decide.cost_usd's, through Lane.cost: one
function computes a lane cost, never two. (Its own module, imported only where a job ends, so
that `lane board` loads none of it.)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuops.lane import board as b
from gpuops.lane import decide as d

# GCE's Compute API returns no price: the figures are the lane's configured ones.
PRICE_NOTE = (
    "at the lane's configured prices (--usd-per-hour, --disk-usd-per-day): GCE's API "
    "returns no price"
)


@dataclass(frozen=True)
class JobCost:
    """A lane job's cost and how it was computed (decide.cost_usd, through Lane.cost)."""

    running_s: float  # from the board's `started` to the job's end (or now)
    held_s: float  # from the board's `claimed` to the release (or now)
    usd_per_hour: float  # the VM, while running
    disk_usd_per_day: float  # the disk, while the claim is held
    cost_usd: float

    def explained(self) -> str:
        return (
            f"${self.cost_usd:.4f} = running {self.running_s / 3600:.3f} h x "
            f"${self.usd_per_hour:.2f}/h + disk held {self.held_s / 86400:.3f} d x "
            f"${self.disk_usd_per_day:.2f}/d"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "cost_usd": self.cost_usd,
            "running_s": self.running_s,
            "held_s": self.held_s,
            "usd_per_hour": self.usd_per_hour,
            "disk_usd_per_day": self.disk_usd_per_day,
            "price": "configured",
        }


@dataclass(frozen=True)
class Released:
    """What a release did: the board it left, and the job it ended, with its cost."""

    board: b.Board
    job: str
    outcome: str  # succeeded, failed or unknown (as watch judges it, L9)
    attempts: int
    stockouts: int
    waiting_s: float  # from the claim to the first boot
    cost: JobCost


@dataclass(frozen=True)
class Watched:
    """How a watched job ended, and what it cost (None when the board no longer holds it)."""

    verdict: d.Verdict
    cost: JobCost | None
