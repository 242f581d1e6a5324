"""`gpuops lane board` as a human reads it: the state line first, STALE said loudly (L8)."""

from __future__ import annotations

from gpuops.cli.lane import _print_board
from gpuops.lane import script
from gpuops.lane.runner import BOARD_HISTORY_LINES
from tests.lane_world import lane_world

VIEW = {
    "state_line": "lane=gpu-lane state=claimed owner=alice job=v attempt=9 stockouts=8 "
    "instance=gpu-lane since=2026-11-30T19:00:00Z claimed=2026-11-30T09:00:00Z started=- "
    "boot=- revision=19 epoch=3",
    "stale": True,
    "held_s": 36000.0,
    "status": "TERMINATED",
    "attempt": 9,
    "stockouts": 8,
    "last_log_line": "stage preflight",
    "cost_usd": 0.35,
    "billing_alarm": None,
    "history": ["2026-11-30T09:00:00Z alice: claimed the lane for v"],
    "history_lines": 1,
}


def test_a_stale_claim_is_printed_with_instance_retry_state_and_last_log_line_l8(capsys):
    """L8: ten hours without a start names everything a human needs to check."""
    _print_board(VIEW)

    out = capsys.readouterr().out.splitlines()
    assert out[0] == VIEW["state_line"]
    assert out[1] == (
        "STALE: held 10.0 h without a successful start; a human should check: instance "
        "TERMINATED, attempt 9 (8 stockouts), last log line: stage preflight (L8)"
    )
    assert out[2] == "instance TERMINATED; cost so far $0.35; last log line: stage preflight"
    assert out[3] == "  2026-11-30T09:00:00Z alice: claimed the lane for v"


def test_a_fresh_claim_is_not_called_stale(capsys):
    """L8: no STALE line unless the decision says so."""
    _print_board({**VIEW, "stale": False, "last_log_line": None, "history": [], "history_lines": 0})

    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and not any("STALE" in line for line in out)
    assert out[1].endswith("last log line: -")


def test_without_live_the_board_says_the_instance_was_not_asked(capsys):
    """Speed: `lane board` reads the store only; it says so instead of guessing a state."""
    _print_board({**VIEW, "stale": False, "status": None, "history": [], "history_lines": 0})

    out = capsys.readouterr().out.splitlines()
    assert out[1] == "cost so far $0.35 (add --live for the instance and its log)"


def test_a_billing_alarm_is_printed_under_the_state_line_l12(capsys):
    """L12: a job that ended while its VM runs on is said on the second line."""
    _print_board({**VIEW, "stale": False, "billing_alarm": "BILLING ALARM: job v ..."})

    assert capsys.readouterr().out.splitlines()[1] == "BILLING ALARM: job v ..."


def test_the_board_shows_its_last_few_lines_and_says_how_many_earlier_ones_history_has(
    tmp_path, monkeypatch, capsys
):
    """A board written many times (a claim, three stockouts and a boot against FakeGCE) shows
    only its last few prose lines, says how many earlier ones there are and where to read
    them; `--history` (the store's entries) still holds every transition."""
    with lane_world(tmp_path, monkeypatch, starts=["stockout"] * 3) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        alice.install(
            "portraits", script.render("portraits", "gpuops-lane-jobs", 'python3 "$WORK/job.py"')
        )
        alice.start("portraits")
        lines = alice.read()[1]
        view = alice.view()
        page = alice.history(100)

    assert len(lines) > BOARD_HISTORY_LINES
    assert view["history"] == lines[-BOARD_HISTORY_LINES:]
    assert view["history_lines"] == len(lines)
    assert page.total >= len(lines)  # --history: every transition, installs too
    _print_board(view)
    out = capsys.readouterr().out.splitlines()
    earlier = len(lines) - BOARD_HISTORY_LINES
    assert out[-BOARD_HISTORY_LINES - 1] == (
        f"  ({earlier} earlier line(s): gpuops lane board --history)"
    )
    assert out[-BOARD_HISTORY_LINES:] == [f"  {line}" for line in lines[-BOARD_HISTORY_LINES:]]


def test_a_board_with_few_lines_shows_them_all_and_mentions_no_earlier_ones(capsys):
    """No "earlier" line when the board shows every line it has."""
    _print_board({**VIEW, "stale": False})

    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "  2026-11-30T09:00:00Z alice: claimed the lane for v"
    assert not any("earlier" in line for line in out)
