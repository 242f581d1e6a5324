"""Who the operator is (M3): declared, or attested by the provider for the key in use.

An operator id is declared by default (``--operator``, ``GPUOPS_OPERATOR``, else user@host),
and stays so while a Vast key may be shared: Vast names a user for every key, the account
owner's for the one account key a small team shares, so the key's user cannot tell alice from
bob there. A team whose operators each hold a key of their own (Vast's team members) sets
``GPUOPS_IDENTITY=key``: then, before a command that acts on boxes (``ACTING``), gpuops asks
Vast once whose key this is (``VastAdapter.current_user``). When the answer names a user, that
username is the operator id, and a declared id that disagrees is refused before anything
else happens: bob's key cannot act on alice's records, whatever he declares. When it names no
user (as the fakes' account key is answered by default), the id stays declared.

``decide`` is the pure part; ``attest`` asks the provider. Neither keeps the key.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from gpuops.errors import Refused, UsageError
from gpuops.model import KeyHolder
from gpuops.settings import Settings, check_operator

# The commands that act on boxes (create, destroy, extend, run on, sweep): identity is asked
# for these only, once each. The guardian a command spawns (`guard NAME --foreground`) and the
# host's guardian service (`guard --all`) act for the owners their records name, and need no
# key that may read the account's users.
ACTING = frozenset({"rent", "destroy", "run", "sweep", "guard"})


@dataclass(frozen=True)
class Identity:
    """The operator a command acts as, and whether the provider attested it."""

    operator: str
    attested: bool
    user_id: int | None = None

    def describe(self) -> str:
        if self.attested:
            return f"{self.operator} (attested: the Vast key is user {self.user_id}'s)"
        return f"{self.operator} (declared)"


def acts(args: argparse.Namespace) -> bool:
    """Whether this command acts on boxes as its operator (and so asks whose key it holds)."""
    if args.command not in ACTING:
        return False
    if args.command == "guard":
        detached = not (args.foreground or args.all or args.print_systemd_unit)
        return detached and args.name is not None
    return True


def decide(declared: str, given: bool, holder: KeyHolder) -> Identity:
    """The operator to act as. ``declared``: the id this command would use; ``given``: whether
    a person declared it (``--operator`` or ``GPUOPS_OPERATOR``) rather than gpuops defaulting
    to user@host. A username that is not an operator id is a usage error naming it."""
    if holder.username is None:
        return Identity(declared, attested=False)
    try:
        attested = check_operator(holder.username)
    except UsageError:
        raise UsageError(
            f"the Vast key's user {holder.username!r} cannot be an operator id "
            "(letters, digits and _.@+-); use a key whose username can"
        ) from None
    if given and declared != attested:
        raise Refused(
            "M3",
            f"the Vast key in use is {attested!r}'s, and the declared operator is "
            f"{declared!r}; nobody acts as another operator: drop --operator and "
            "GPUOPS_OPERATOR, or use your own key",
        )
    return Identity(attested, attested=True, user_id=holder.user_id)


def attest(
    settings: Settings,
    declared: str,
    *,
    ask: Callable[[Settings], KeyHolder] | None = None,
) -> Identity:
    """``decide`` on the provider's answer for this command's Vast key (one call), with
    ``GPUOPS_IDENTITY=key``; else the declared id, and no call."""
    if not settings.identity_by_key:
        return Identity(declared, attested=False)
    holder = (ask or key_holder)(settings)
    return decide(declared, settings.operator is not None, holder)


def key_holder(settings: Settings) -> KeyHolder:
    """Vast's answer for the key this command would use (VAST_API_KEY, the config file's,
    else vastai's key files): one GET, through the adapter's translation of failures."""
    from gpuops.providers import vastai_lazy
    from gpuops.providers.vast import VastAdapter, find_api_key

    vastai_lazy.install()
    vast = VastAdapter(
        api_key=find_api_key(settings.environ, settings.vast_api_key), base_url=settings.vast_url
    )
    return vast.current_user()
