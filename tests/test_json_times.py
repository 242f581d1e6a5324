"""One timestamp form in every command's --json: epoch seconds (a number, null where there is
none). Every command that has --json is run on the command line, in-process, against FakeVast
(through the real adapter) and the fake ssh program, a local store holding a lane board with its
history, and an event log of a market story (tests/report_story.py); each output is walked
whole. A string that is a whole timestamp (ISO 8601, as `cost --json` once wrote) anywhere, or
a time-named field that is not a number or null, fails with its command and its path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_story import write_story
from test_daily import Daily, daily, gpuops  # noqa: F401 (the world as test_daily builds it)

from gpuops.lane import board as lb
from gpuops.lane import history
from gpuops.store.local import LocalStore

# a whole timestamp: a date and a time of day, with or without seconds, fraction and offset
STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
# fields that name an instant: each must be epoch seconds or null
TIME_KEYS = re.compile(r".*_at|as_of|period_start|period_end|since|until|claimed|started|at|first|last")
LANE = {"GPUOPS_LANE_PROJECT": "p", "GPUOPS_LANE_ZONE": "us-central1-a",
        "GPUOPS_LANE_INSTANCE": "gpu-lane", "GPUOPS_LANE_BUCKET": "lane-bucket"}  # fmt: skip


def stamps(doc: Any, path: str = "$") -> list[str]:
    """Every place in ``doc`` holding a timestamp in another form than epoch seconds."""
    found = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{path}.{key}"
            scalar = not isinstance(value, dict | list)
            epoch = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
            if TIME_KEYS.fullmatch(str(key)) and scalar and not epoch:
                found.append(f"{here} = {value!r}")
            else:
                found += stamps(value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += stamps(value, f"{path}[{i}]")
    elif isinstance(doc, str) and STAMP.fullmatch(doc):
        found.append(f"{path} = {doc!r}")
    return found


def test_the_walk_finds_an_iso_time_and_a_time_field_that_is_no_number():
    """The check itself: what `cost --json` used to print is found, epoch seconds are not."""
    old = {"as_of": "2026-03-15T00:00:00Z", "rows": [{"period_start": "2026-03-09T00:00:00Z"}]}
    assert stamps(old) == ["$.as_of = '2026-03-15T00:00:00Z'",
                           "$.rows[0].period_start = '2026-03-09T00:00:00Z'"]  # fmt: skip
    assert stamps({"note": "started 2026-03-15T00:00:00Z"}) == []  # prose may name a time
    assert stamps({"deadline_at": "soon"}) == ["$.deadline_at = 'soon'"]
    assert stamps({"as_of": 1.7e9, "started_at": None, "span": {"first": 1, "last": 2}}) == []


@pytest.fixture
def world(daily: Daily) -> Daily:  # noqa: F811
    """test_daily's world, and a lane board with two history entries in its store."""
    store = LocalStore(str(daily.state))
    now = daily.fake.now()
    claimed = lb.Board(lane="gpu-lane", instance="gpu-lane", since=now - 7200, state=lb.CLAIMED,
                       owner="carol", job="train", attempt=0, claimed=now - 7200, revision=1,
                       epoch=1)  # fmt: skip
    running = lb.Board(lane="gpu-lane", instance="gpu-lane", since=now - 3600, state=lb.RUNNING,
                       owner="carol", job="train", attempt=1, claimed=now - 7200,
                       started=now - 3600, boot="b1", revision=2, epoch=1)  # fmt: skip
    store.create("lane/gpu-lane/board", lb.render(running, []).encode())
    history.append(store, "gpu-lane", history.entry("claimed", "claimed", claimed, claimed,
                                                    now - 7200, "carol"))  # fmt: skip
    history.append(store, "gpu-lane", history.entry("started", "started", running, running,
                                                    now - 3600, "carol"))  # fmt: skip
    return daily


def test_every_commands_json_has_its_times_in_epoch_seconds(world, tmp_path, capfdbinary,
                                                            monkeypatch):  # fmt: skip
    """Each command with --json, against the fakes: no ISO string, every time a number."""
    daily = world
    log = write_story(tmp_path / "events.jsonl").log
    daily.start("echo working")  # ended: `run` below starts the next job
    commands = [
        ["check"],  # before the lane is configured: its checks would ask GCE
        ["rules"],
        ["offers"],
        ["rent", "job", "--gpu", "RTX 4090", "--hours", "2"],  # M8: the live rental, again
        ["boxes"],
        ["boxes", "--all"],
        ["watch", "job", "--once"],
        ["budget"],
        ["cost"],
        ["cost", "--by", "day"],
        ["stats", "--log", str(log)],
        ["policy", "eval", "--policy", "greedy", "--log", str(log)],
        ["incident", "add", "--date", "2026-03-15", "--what", "a box billed overnight"],
        ["incident", "list"],
        ["run", "job", "--", "echo again"],
        ["lane", "board"],
        ["lane", "board", "--history"],
        ["destroy", "job"],
        ["sweep"],
        ["compact"],
    ]
    seen, bad = 0, []
    for argv in commands:
        if argv[0] == "lane":  # the lane's commands need it configured; the board is stored
            for name, value in LANE.items():
                monkeypatch.setenv(name, value)
        code, out, err = gpuops(capfdbinary, "--json", *argv, state=daily.state)
        assert out.strip(), f"{argv}: exit {code}, no JSON on stdout; stderr: {err}"
        doc = json.loads(out)
        seen += 1
        bad += [f"gpuops --json {' '.join(argv)}: {where}" for where in stamps(doc)]
    assert bad == []
    assert seen == len(commands)
