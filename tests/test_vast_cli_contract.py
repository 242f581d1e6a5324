"""FakeVast judged by a client we did not write: the vastai 1.9.1 CLI against the loopback fake (H4).

One fake is served for the module and one CLI story runs against it: search with filters,
create, show, label, show instances, destroy, show again, show user. The CLI is imported
once in a driver process that forks a child per command (its parser is global, so each
command needs a fresh one), which keeps the story to about one CLI start-up. The CLI exits
0 even when a call failed, so every answer is judged by what it printed: an answer the real
client cannot parse, or one it reports as an error, fails the test.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fakes.scenario import DEFAULT_SCENARIO, load_scenario
from fakes.seam import Reply, Request
from fakes.vast import FakeVast, ScaledClock, contract, serve_http

# Runs each command's argv (a JSON list of lists on stdin) in a forked child of one process
# that imported the vastai CLI once; prints one JSON line per command: rc, stdout, stderr.
DRIVER = r"""
import json, os, sys, tempfile
import vastai.cli.main as cli
commands = json.load(sys.stdin)
results = []
for argv in commands:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        sys.argv = ["vastai", *argv]
        code = 0
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback; traceback.print_exc(); code = 99
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    out.seek(0); err.seek(0)
    results.append({"rc": os.waitstatus_to_exitcode(status),
                    "out": out.read().decode("utf-8", "replace"),
                    "err": err.read().decode("utf-8", "replace")})
json.dump(results, sys.stdout)
"""
OFFER = 18432117  # the default scenario's healthy RTX 4090 in Texas, US
FIRST_ID = 1234568
# A real client must not be kept waiting by the fake; the story takes about 1.5 s here.
STORY_TIMEOUT_S = 300  # a bound, not an expectation: at load 12 the story took over 60 s


@dataclass(frozen=True)
class Said:
    """What one CLI command printed."""

    rc: int
    out: str
    err: str

    def json(self) -> object:
        assert "Failed with error" not in self.out + self.err, self.out + self.err
        assert "Traceback" not in self.err, self.err
        return json.loads(self.out)


STORY: list[tuple[str, list[str]]] = [
    (
        "search_filtered",
        [
            "search", "offers", "--raw",
            "gpu_name=RTX_4090 num_gpus=1 cpu_cores>=8 cpu_ghz>2 pcie_bw>10 dlperf>10 "
            "total_flops>5 inet_down>100 duration>1 datacenter=False geolocation in [US,CA]",
        ],
    ),
    ("search_country", ["search", "offers", "--raw", "geolocation=PL"]),
    ("search_bad_key", ["search", "offers", "--raw", "no_such_field>1"]),
    ("search_driver", ["search", "offers", "--raw", "driver_version>=550.0.0"]),
    ("search_no_driver", ["search", "offers", "--raw", "driver_version>=551.0.0"]),
    ("search_ubuntu", ["search", "offers", "--raw", "ubuntu_version=22.04"]),
    ("create", ["create", "instance", str(OFFER), "--image", "pytorch/pytorch", "--disk", "20",
                "--label", "contract", "--raw"]),
    ("show", ["show", "instance", str(FIRST_ID), "--raw"]),
    ("label", ["label", "instance", str(FIRST_ID), "relabelled"]),
    ("list", ["show", "instances", "--raw"]),
    ("table", ["show", "instances", "--no-color"]),
    ("destroy", ["destroy", "instance", str(FIRST_ID), "-y"]),
    ("show_gone", ["show", "instance", str(FIRST_ID), "--raw"]),
    ("user", ["show", "user", "--raw"]),
]  # fmt: skip


# What the contract judge found in the story's exchanges (fakes/vast/contract.py): breaches, and
# the request breaches of the exchanges the fake refused (the unknown search key).
BREACHES: list[str] = []
REFUSED: list[str] = []


@pytest.fixture(scope="module")
def story() -> Iterator[tuple[dict[str, Said], FakeVast, float, float]]:
    """The CLI story run once against one served fake: (what each step printed, the fake,
    wall time before, wall time after)."""
    # The story runs the CLI's steps back to back, as fast as the machine allows: Vast's
    # per-endpoint intervals (met by gpuops' own pacing, tests/test_rent.py) would turn a fast
    # machine's second search into a 429 that this story is not about.
    loaded = load_scenario(DEFAULT_SCENARIO)
    scenario = dataclasses.replace(
        loaded, vast=dataclasses.replace(loaded.vast, endpoint_intervals=())
    )
    fake = FakeVast(scenario, clock=ScaledClock(scenario.time_scale))
    judge = contract.load()
    BREACHES.clear()  # a module fixture may be built again on the same worker (xdist)
    REFUSED.clear()

    def judged(route: str, request: Request, reply: Reply) -> None:
        found = judge.judge(route, request, reply)
        refused = (
            reply.status >= 400
            and found
            and not any(b.startswith(f"{route} {reply.status}") for b in found)
        )
        (REFUSED if refused else BREACHES).extend(found)

    fake.taps.append(judged)
    with serve_http(fake) as server:
        before = time.time()
        argvs = [["--url", server.url, "--api-key", fake.api_key, *argv] for _, argv in STORY]
        done = subprocess.run(
            [sys.executable, "-c", DRIVER],
            input=json.dumps(argvs),
            capture_output=True,
            text=True,
            timeout=STORY_TIMEOUT_S,
            check=True,
        )
        after = time.time()
    said = {name: Said(**r) for (name, _), r in zip(STORY, json.loads(done.stdout), strict=True)}
    yield said, fake, before, after


def test_the_cli_searches_with_every_documented_key_and_matches_the_country_code_h4(story):
    """vastai's search with cpu_cores, cpu_ghz, pcie_bw, dlperf, total_flops, inet_down,
    duration, datacenter and geolocation in [US,CA] parses, and keeps only matching offers."""
    said = story[0]

    offers = said["search_filtered"].json()

    assert offers, "the default scenario has RTX 4090s in the US"
    assert all(o["geolocation"].endswith((", US", ", CA")) for o in offers)
    assert all(o["cpu_cores"] >= 8 and o["pcie_bw"] > 10 and o["num_gpus"] == 1 for o in offers)
    assert all(o["search"]["totalHour"] == o["dph_total"] for o in offers)


def test_the_cli_matches_geolocation_by_its_two_letter_country_code(story):
    """geolocation=PL finds the offer in "Poland, PL" and nothing else."""
    said = story[0]

    offers = said["search_country"].json()

    assert offers and {o["geolocation"] for o in offers} == {"Poland, PL"}


def test_an_unknown_search_key_is_the_documented_400_the_cli_reports(story):
    """A field Vast does not know is refused (invalid_request), as the CLI shows it."""
    said = story[0]["search_bad_key"]

    assert "400" in said.out + said.err and "no_such_field" in said.out + said.err


def test_the_cli_creates_shows_labels_lists_and_destroys_a_box_h4(story):
    """create, show, label, show instances and destroy all answer what vastai parses."""
    said, fake, before, after = story

    created = said["create"].json()
    shown = said["show"].json()
    listed = said["list"].json()
    destroyed = said["destroy"]

    key = created.pop("instance_api_key")  # the box's own key (M14), which vastai reads too
    assert created == {"success": True, "new_contract": FIRST_ID}
    assert len(key) == 64 and int(key, 16) >= 0
    assert shown["id"] == FIRST_ID and shown["label"] == "contract"
    assert "label for 1234568 set to relabelled" in said["label"].out
    assert [row["label"] for row in listed] == ["relabelled"]
    assert "destroying instance 1234568" in destroyed.out
    assert "Traceback" not in said["table"].err and "relabelled" in said["table"].out
    assert fake.instances[FIRST_ID].destroyed_at is not None


def test_a_box_created_a_moment_ago_is_a_moment_old_to_the_cli_whatever_the_time_scale(story):
    """start_date is on the wall clock, anchored when serving began: the CLI's own duration
    (time.time() - start_date) is within the story's run, at time x10."""
    said, _, before, after = story

    shown = said["show"].json()
    listed = said["list"].json()

    assert before <= shown["start_date"] <= after
    assert 0 <= shown["duration"] <= after - before
    assert 0 <= listed[0]["duration"] <= after - before


def test_rows_carry_the_documented_fields_the_cli_and_sdk_read(story):
    """Instance rows have gpu_util, cpu_ram, cpu_cores, inet_up/inet_down and the pricing."""
    shown = story[0]["show"].json()

    for name in ("gpu_util", "cpu_ram", "cpu_cores", "inet_up", "inet_down", "search", "disk_bw"):
        assert name in shown, name
    assert shown["cpu_ram"] == 257890 and shown["inet_down"] == 848.9  # the default scenario's


def test_a_destroyed_box_shows_as_none_and_the_user_route_answers(story):
    """After destroy the CLI's show reads {"instances": null}; show user parses."""
    said = story[0]

    gone = said["show_gone"]
    user = said["user"].json()

    assert "Failed with error" not in gone.out + gone.err and "Traceback" not in gone.err
    assert user["id"] == 318840 and "api_key" not in user


def test_every_request_the_cli_sent_and_every_answer_it_got_keep_vasts_published_contract_h6(
    story,
):
    """H6: the vastai CLI's own requests (search, create, show, label, list, destroy, user) and
    the fake's answers are within Vast's contract; the one it refused is the unknown key."""
    assert story[0]  # the story ran

    assert BREACHES == []
    # the same request each time the CLI sent it (it retries the default scenario's 429s)
    assert set(REFUSED) == {"search request.no_such_field: a field the contract lacks"}


def test_the_cli_finds_offers_by_driver_version_and_ubuntu_version_as_vast_does_h6(story):
    """H6: `driver_version>=550.0.0` (sent as the number 550000000) finds the 550.54.15 offers
    and `>=551.0.0` none; `ubuntu_version=22.04`, the documented alias, finds them too."""
    said = story[0]

    found = said["search_driver"].json()
    none = said["search_no_driver"].json()
    ubuntu = said["search_ubuntu"].json()

    assert found and all(o["driver_version"] == "550.54.15" for o in found)
    assert none == []
    assert ubuntu and all(o["os_version"] == "22.04" for o in ubuntu)
