"""The fire drill (M5): rent a box briefly, let a detached guardian destroy it, record it.

Until 20 September the backstop had never once fired (docs/rules.md, M5). A drill proves it fires end
to end: a real rental (a one-cent box on Vast, or a fake box on the loopback fakes), a real
detached guardian process, and the provider asked afterwards whether the box is gone. The
result is kept in the state store under ``drills/``, with whether it ran against the fakes or
a real provider; only a drill on a real box may make M5 ``verified``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.errors import AlreadyExists
from gpuops.event_base import write
from gpuops.market.rent import RentRequest
from gpuops.market.rentals import RELEASED
from gpuops.settings import Settings
from gpuops.store.base import Store
from gpuops.store.records import JsonCodec, Records
from gpuops.timestamps import utc_iso

if TYPE_CHECKING:
    from gpuops.market.session import Rank

DRILLS = "drills/"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Drill:
    """One drill as the state store keeps it (``drills/<when>-<name>``): what it rented, on
    which provider, and whether the box was confirmed gone after its deadline (M5). Times are
    epoch seconds, as every command's --json has them."""

    date: str  # the UTC day it ran
    target: str  # "vast" (a real box) or "fakes" (the loopback stand-ins)
    name: str
    instance_id: str | None
    deadline_at: float | None
    confirmed_at: float | None
    delay_s: float | None
    passed: bool
    guardian_pid: int
    guardian_log: str
    cleanup: tuple[str, ...] = ()  # what a failed drill's own destroy did


CODEC = JsonCodec(Drill, "drill record")


def drills(store: Store) -> Records[Drill]:
    """Every drill record in the store, through the one strict codec."""
    return Records(store, DRILLS, CODEC)


def target_of(base_url: str) -> str:
    """'fakes' for a provider on loopback (`gpuops fakes serve`), else 'vast'."""
    return "fakes" if urlparse(base_url).hostname in _LOOPBACK else "vast"


def drill(
    settings: Settings,
    operator: str,
    name: str,
    gpu: str | None,
    hours: float | None,
    *,
    say: Callable[[str], None],
    rank: Rank | None = None,
) -> dict[str, Any]:
    """``rank``: what ranks the offers it rents from (the command's: the learned ranker)."""
    from gpuops.market.session import open_market
    from gpuops.market.spawn import spawn

    market = open_market(settings, operator, progress=say, rank=rank)
    target = target_of(getattr(market.vast, "base_url", ""))
    length_s = hours * 3600.0 if hours else timing.DRILL_RENTAL_S
    if gpu is None:
        offers = sorted(market.vast.search_offers(num_gpus=1), key=lambda o: o.dph_total)
        gpu = offers[0].gpu_name if offers else "RTX 3060"
    say(f"drill on {target}: renting {name} ({gpu}) for {length_s:.0f} s")
    guardians: list[Any] = []

    def on_race(racing: Any) -> None:  # the guardian exists before the first create (M13)
        guardians.append(spawn(name, settings, operator))

    request = RentRequest(name=name, gpu_name=gpu, hours=length_s / 3600.0, race_k=1)
    rental = market.rent(request, on_race=on_race)
    assert rental.deadline_at is not None and rental.instance_id is not None
    (spawned,) = guardians
    say(f"guardian pid {spawned.pid} started; the deadline is {utc_iso(rental.deadline_at)}")
    give_up = rental.deadline_at + timing.DESTROY_CONFIRM_TIMEOUT_S + timing.LEASE_TTL_S
    clock = market.clock  # the deadline's clock; its waits shortened on the loopback fakes
    confirmed_at = None
    while clock.wall() < give_up:
        current = market.rentals.get(name)
        released = current is not None and current.state == RELEASED
        if released and market.vast.show(rental.instance_id) is None:
            confirmed_at = clock.wall()
            break
        clock.sleep(timing.DRILL_POLL_S)
    passed = confirmed_at is not None
    cleanup: list[str] = []
    if not passed:  # a failed drill leaves nothing billing: end its box here (M13)
        from gpuops.market.ending import destroy_rental

        cleanup = [f"{o.name}: {o.detail}" for o in destroy_rental(market, name)]
        say(f"the drill FAILED; its box ended by hand: {'; '.join(cleanup) or 'nothing left'}")
    now = datetime.fromtimestamp(clock.wall(), UTC)
    record = Drill(
        date=now.date().isoformat(),
        target=target,
        name=name,
        instance_id=rental.instance_id,
        deadline_at=rental.deadline_at,
        confirmed_at=confirmed_at,
        delay_s=round(confirmed_at - rental.deadline_at, 3) if confirmed_at else None,
        passed=passed,
        guardian_pid=spawned.pid,
        guardian_log=str(spawned.log),
        cleanup=tuple(cleanup),
    )
    book, key = drills(market.ledger.store), f"{now.strftime('%Y%m%dT%H%M%SZ')}-{name}"
    # a new record: created, never written over (a second drill of NAME in the same second)
    if not book.create(key, record):
        raise AlreadyExists(book.key(key))
    result: dict[str, Any] = {**dataclasses.asdict(record), "cleanup": cleanup}
    write(market.events, ops.GuardDrill(**dataclasses.asdict(record)))  # the record, logged
    if passed and target == "vast":  # only a real box's drill may make M5 verified
        from gpuops.register import Register

        Register(market.ledger.store, operator).observe(
            rule="M5",
            on=result["date"],
            kind="drill",
            what=f"guard --drill: instance {rental.instance_id} destroyed and confirmed gone "
            f"{result['delay_s']:+.1f} s from its deadline",
        )
    if passed:
        result["summary"] = (
            f"drill PASSED on {target}: instance {rental.instance_id} confirmed gone "
            f"{result['delay_s']:+.1f} s from its deadline"
        )
    else:
        result["summary"] = (
            f"drill FAILED on {target}: instance {rental.instance_id} not confirmed gone by "
            f"{utc_iso(give_up)}; see {spawned.log} and `gpuops boxes`"
        )
    return result
