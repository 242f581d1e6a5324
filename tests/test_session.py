"""Opening the market from the command's Settings (gpuops/market/session.py): the ranker that
learns from the log sits above the market and is handed in by the commands that rank."""

from __future__ import annotations

from pathlib import Path

from gpuops.cli import market as cli_market
from gpuops.analysis.learned import ranker
from gpuops.market.session import open_market
from gpuops.settings import Settings
from gpuops.store.base import Store


def settings_in(tmp_path: Path) -> Settings:
    return Settings.from_environ(
        {"VAST_API_KEY": "k-alice", "HOME": str(tmp_path)},
        {"state": str(tmp_path / "state"), "operator": "alice"},
    )


def test_the_market_ranks_with_what_the_command_hands_in(tmp_path):
    """``rank`` is built once, from the event log's path and the market's own store, and its
    answer is the market's pass rates."""
    settings = settings_in(tmp_path)
    built: list[tuple[Path, Store]] = []

    def rates(offers):
        return {}

    def rank(path: Path, store: Store):
        built.append((path, store))
        return rates

    market = open_market(settings, "alice", need_key=False, rank=rank)

    assert built == [(settings.events_path, market.ledger.store)]
    assert market.pass_rates is rates


def test_without_a_rank_the_market_ranks_on_price_and_filters_alone(tmp_path):
    """A command that ranks nothing (destroy, guard, cost) opens a market without pass rates."""
    assert open_market(settings_in(tmp_path), "alice", need_key=False).pass_rates is None


def test_offers_and_rent_rank_with_the_learned_ranker_and_the_rest_with_none():
    """The commands wire the ranker: the two that rank offers get analysis/learned.py's."""
    assert cli_market._rank_for("offers") is ranker
    assert cli_market._rank_for("rent") is ranker
    assert cli_market._rank_for("sweep") is None
    assert cli_market._rank_for("destroy") is None
