"""`gpuops offers` as a renter reads it (a header, the columns compared, what PASS means),
`--filter` in vastai's query syntax and `--max-dph` on `offers` and `rent`: in-process, against
FakeVast through the real adapter (the world of tests/test_daily.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_daily import Daily, gpuops, offers, world
from test_guard import OFFER

from fakes.vast import FakeClock


def market(*rows: tuple[float, str, float]) -> dict[str, Any]:
    """One healthy offer per (price, geolocation, cuda_max_good), ids OFFER, OFFER + 1..."""
    doc = offers(*(price for price, _, _ in rows))
    for offer, (_, where, cuda) in zip(doc["vast"]["offers"], rows, strict=True):
        offer.update(geolocation=where, cuda_max_good=cuda)
    return doc


THREE = market((0.30, "Texas, US", 12.4), (0.35, "Bavaria, DE", 12.4), (0.40, "Ontario, CA", 11.8))


@pytest.fixture
def daily(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daily]:
    with world(tmp_path, monkeypatch, getattr(request, "param", THREE), FakeClock()) as w:
        yield w


def run(daily: Daily, capfdbinary: Any, *argv: str) -> tuple[int, str, str]:
    code, out, err = gpuops(capfdbinary, *argv, state=daily.state)
    return code, out.decode(), err


def test_offers_prints_a_header_and_the_columns_a_renter_compares(daily, capfdbinary):
    """Price, GPU, VRAM, reliability, PASS with its probe count, disk, CUDA and location under
    a header row, and a legend saying what PASS is and how the offers are ranked."""
    code, out, err = run(daily, capfdbinary, "offers")

    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].split() == [
        "ID", "GPU", "VRAM", "GB", "$/HOUR", "RELIAB", "PASS", "(n)", "DISK", "MB/s", "CUDA", "LOCATION",
    ]  # fmt: skip
    assert lines[1].split() == [
        str(OFFER), "RTX", "4090", "24.0", "$0.3000", "0.9950", "0.50", "(0)", "2000", "12.4", "Texas,", "US",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:4]] == [str(OFFER + i) for i in range(3)]
    assert lines[4] == "3 offers pass the filter; 0 removed (0 quarantined)"
    assert lines[5].startswith("PASS (n): the chance a box on that machine passes gpuops' health")
    assert "n 0: the model's rate alone" in out and "Ranked by $/HOUR / PASS" in out


def test_offers_json_keeps_its_shape_and_adds_the_new_columns(daily, capfdbinary):
    """--json: the same keys as before (the provider's names), plus num_gpus, inet_down,
    cuda_max_good, verification and pass_trials on each offer, and the filter applied."""
    code, out, _ = run(daily, capfdbinary, "--json", "offers", "--all")

    payload = json.loads(out)
    assert code == 0
    assert set(payload) == {"offers", "quarantined", "contract_ended", "skipped_events", "removed", "filter",
                            "max_dph"}
    assert (payload["filter"], payload["max_dph"], payload["removed"]) == ([], None, [])
    first = payload["offers"][0]
    assert set(first) == {
        "id", "machine_id", "gpu_name", "gpu_ram", "dph_total", "reliability", "disk_bw",
        "geolocation", "pass_rate",  # the shape before
        "num_gpus", "inet_down", "cuda_max_good", "verification", "pass_trials",
    }  # fmt: skip
    assert (first["geolocation"], first["cuda_max_good"], first["pass_trials"]) == ("Texas, US", 12.4, 0)


def test_the_issue_s_vastai_filter_and_a_price_cap_leave_out_what_they_name(daily, capfdbinary):
    """`--filter 'geolocation in [US,CA] cuda_vers>=12' --max-dph 0.38`: the German box fails
    the location, the Canadian one its CUDA and the cap; --all names each reason."""
    code, out, _ = run(
        daily, capfdbinary, "--json", "offers", "--all", "--max-dph", "0.38",
        "--filter", "geolocation in [US,CA]", "--filter", "cuda_vers>=12",
    )  # fmt: skip

    payload = json.loads(out)
    assert code == 0
    assert [o["id"] for o in payload["offers"]] == [OFFER]
    assert {o["id"]: o["removed"] for o in payload["removed"]} == {
        OFFER + 1: ["filter geolocation in [US,CA] (geolocation Bavaria, DE)"],
        OFFER + 2: [
            "price $0.4000/h > --max-dph $0.3800",
            "filter cuda_vers>=12 (cuda_max_good 11.8)",
        ],
    }
    assert payload["filter"] == ["geolocation in [US,CA]", "cuda_vers>=12"]
    assert payload["max_dph"] == 0.38


def test_offers_that_all_fail_the_filter_print_the_count_and_no_empty_table(daily, capfdbinary):
    """No header over nothing; the count says one offer was removed, in the singular."""
    code, out, _ = run(daily, capfdbinary, "offers", "--max-dph", "0.31", "--filter", "dph>0.5")

    assert code == 0
    assert out == "0 offers pass the filter; 3 removed (0 quarantined); --all shows them\n"
    code, out, _ = run(daily, capfdbinary, "offers", "--max-dph", "0.31")
    assert out.splitlines()[2] == "1 offer passes the filter; 2 removed (0 quarantined); --all shows them"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["offers", "--filter", "rentable=true"], "--filter: 'rentable=true' names no offer field"),
        (["offers", "--filter", "reliability>0.99 oops"], "--filter: cannot read 'oops'"),
        (["offers", "--max-dph", "0"], "--max-dph must be more than 0 USD per hour, not 0"),
        (["offers", "--max-dph", "nan"], "--max-dph must be a finite number, not nan"),
        (["rent", "b", "--gpu", "RTX 4090", "--hours", "1", "--max-dph", "-1"], "--max-dph must be more"),
    ],
)
def test_a_bad_filter_or_cap_is_one_line_and_exit_2_before_any_search(daily, capfdbinary, argv, said):
    """Usage errors at the edge: nothing is searched, rented or written."""
    code, out, err = run(daily, capfdbinary, *argv)

    assert (code, out) == (2, "")
    assert err == f"gpuops: {said}" + err.removeprefix(f"gpuops: {said}")
    assert len(err.splitlines()) == 1
    assert daily.fake.instances == {} and not (daily.state / "market").exists()


def test_rent_with_a_price_cap_races_only_the_offers_under_it(daily):
    """`rent --max-dph 0.32 --race 3` races the one offer at or under $0.32/h (the market the
    command line builds, on the fake's clock: a box boots in the fake's time, not ours)."""
    from gpuops.market.rent import RentRequest

    rental = daily.market().rent(
        RentRequest(name="b", gpu_name="RTX 4090", hours=1.0, race_k=3, max_dph=0.32)
    )

    assert (rental.offer_id, rental.dph_total) == (OFFER, 0.30)
    assert len(daily.fake.instances) == 1


def test_rent_with_a_cap_under_every_offer_is_capacity_and_creates_nothing(daily, capfdbinary):
    """Exit 4 (nothing rentable at that price), pointing at the `offers` command that shows
    why; no create, no rental written."""
    code, out, err = run(
        daily, capfdbinary, "rent", "b", "--gpu", "RTX 4090", "--hours", "1", "--max-dph", "0.1",
    )  # fmt: skip

    assert (code, out) == (4, "")
    assert "no RTX 4090 offer passes the filter (3 removed, 0 quarantined, 0 for a contract" in err
    assert "see `gpuops offers --all --max-dph 0.1`" in err
    assert daily.fake.instances == {}
