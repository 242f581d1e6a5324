"""What `boxes` prints and gives as JSON: a total row, a deadline said once where the reader's
zone is UTC, a failed race's guard column, and one time format in `--json`."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from test_daily import Daily, daily, gpuops  # noqa: F401  (daily is a fixture)

from gpuops.cli.market import _total_line, _when
from gpuops.listing import record_row as _record_row
from gpuops.ledger import BoxState, Record, utc_iso


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_under_tz_utc_a_deadline_is_said_once(utc):
    """No `16:09:43 UTC / 16:09:43 UTC`: one date and time, then UTC."""
    assert _when(1796025600.0) == "2026-11-30 08:00:00 UTC"


def row(name: str, state: str, dph: float | None, spend: float | None) -> dict[str, Any]:
    return {"name": name, "state": state, "dph_total": dph, "spend_usd": spend}


def test_the_total_row_sums_the_live_burn_and_every_rental_s_spend():
    """Burn counts only live rentals (a released one bills nothing now); spend counts all;
    the count is singular for one rental."""
    rows = [row("a", "live", 0.40, 1.5), row("b", "released", 0.30, 0.25), row("c", "failed", None, None)]

    assert _total_line(rows).split() == ["TOTAL", "(3", "rentals,", "1", "live)", "$0.4000", "$1.7500"]
    assert _total_line([row("a", "live", 0.40, 1.5)]).startswith("TOTAL (1 rental, 1 live)")


def test_a_box_record_s_times_are_epoch_seconds_like_the_rentals():
    """`boxes --json` speaks one format: the record's ISO strings become epoch seconds."""
    record = Record("job+1-0", "alice", BoxState.DESTROYING, "i-1", "vast", 3,
                    utc_iso(1796025600.5), "77", utc_iso(1796029200.0))  # fmt: skip

    shown = _record_row(record)

    assert (shown["updated_at"], shown["deadline_at"], shown["state"]) == (1796025600.5, 1796029200.0, "destroying")
    assert _record_row(Record("x", "alice", BoxState.INTENT, "i-2", "vast", 1, utc_iso(5.0)))["deadline_at"] is None


def test_boxes_json_has_one_time_format_and_text_a_total_row(daily: Daily, capfdbinary, utc):
    """A live rental from the fake (in-process): every `*_at` in `--json` is a number; the
    text has its total row and a deadline said once."""
    from gpuops.market.rent import RentRequest

    daily.market().rent(RentRequest(name="job", gpu_name="RTX 4090", hours=2.0, race_k=1))

    code, out, _ = gpuops(capfdbinary, "--json", "boxes", state=daily.state)
    (rental,) = json.loads(out)["rentals"]
    assert code == 0
    stamps = {k: v for k, v in rental.items() if k.endswith("_at") and v is not None}
    assert set(stamps) == {"started_at", "deadline_at", "contract_end_at"}
    assert all(isinstance(v, float) for v in stamps.values())
    code, out, _ = gpuops(capfdbinary, "boxes", state=daily.state)
    lines = out.decode().splitlines()
    assert lines[2].startswith("TOTAL (1 rental, 1 live)") and "$0.4000" in lines[2]
    assert " / " not in lines[1] and lines[1].count("UTC") == 1


def test_a_failed_race_s_guard_column_says_no_box_was_kept(daily: Daily, capfdbinary):
    """A rental whose race kept no box has nothing to guard: not `NONE (no ceiling...)`."""
    from gpuops.errors import GpuopsError
    from gpuops.market.rent import RentRequest

    daily.fake.set_fate(18432117, "taken")
    with pytest.raises(GpuopsError):
        daily.market().rent(RentRequest(name="job", gpu_name="RTX 4090", hours=2.0, race_k=1))

    code, out, _ = gpuops(capfdbinary, "--json", "boxes", state=daily.state)
    (rental,) = json.loads(out)["rentals"]
    assert rental["state"] == "failed" and rental["guard"] == "none (its race kept no box)"
