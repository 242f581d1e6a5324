"""The one exception tree of gpuops; the CLI turns each branch into an exit code (DESIGN §3).

Adapters translate foreign errors (botocore, requests, google.api_core, Vast bodies) into
this tree exactly once, at the boundary, with ``raise Mapped(...) from exc``. Nothing above an
adapter catches a foreign exception.

    GpuopsError                      exit 1  unexpected; a bug or an unknown failure
    ├── UsageError                   exit 2  bad arguments or bad input named in the message
    ├── Refused                      exit 3  a safety rule said no; ``rule`` names it
    │   ├── NotOwned                         M3: the record belongs to another operator
    │   ├── NameTaken                        M3/M8: the name is held by another operator
    │   └── IllegalTransition                M4: e.g. release before gone-confirmed
    ├── Unavailable                  exit 4  capacity or provider unavailable after retries
    │   ├── StoreUnavailable                 the state store could not be reached or locked
    │   │   └── StoreMissing         exit 2  the state bucket does not exist: configuration
    │   │                                    (still an Unavailable: a guardian keeps retrying
    │   │                                    and ends its box at the deadline, M17)
    │   ├── ProviderUnavailable              5xx or no connection, after the retries we allow
    │   ├── CapacityExhausted                no capacity (a GCE stockout)
    │   ├── QuotaExceeded                    a provider quota said no (GCE QUOTA_EXCEEDED)
    │   ├── OfferTaken                       the offer went between search and rent
    │   └── RateLimited                      429; ``retry_after_s`` when the provider said
    │       └── SearchQuotaExceeded          Vast's daily search quota: never retried
    ├── ProviderError                exit 1  the provider said something we cannot act on
    │   ├── AuthFailed               exit 2  our credentials were refused: configuration, with
    │   │                                    the fix (``fix``) printed under the message
    │   └── UnexpectedResponse               the body's shape drifted from the recordings
    ├── StillRunning                 exit 5  still running or unknown; not a failure (L9)
    ├── JobFailed                    exit 6  the job failed or died (a fact, M10)
    └── StateError                   exit 1  the state store refused or holds bad data
        ├── VersionConflict                  compare-and-swap lost: someone wrote first
        ├── AlreadyExists                    create-if-absent found the key
        └── CorruptState                     a state file is unreadable; never replaced

    Interrupted (a BaseException)    exit 128 + the signal: Ctrl-C, SIGTERM, a closed
                                     terminal; no ``except Exception`` may swallow it
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit code gpuops gives (DESIGN §3), in one place: a command returns one of these,
    an error carries one, and a signal's exit is ``ExitCode.signalled(signum)``."""

    OK = 0
    ERROR = 1  # unexpected: a bug or an unknown failure
    USAGE = 2  # bad arguments or input, or configuration (the message names the fix)
    REFUSED = 3  # a safety rule said no; the message names the rule
    UNAVAILABLE = 4  # capacity or a provider unavailable after retries; any claim kept
    UNKNOWN = 5  # still running, or unknown (a watch that timed out): not a failure (L9)
    FAILED = 6  # the job failed or died (M10)
    SUPERSEDED = 7  # a guardian that saw its successor renew the lease leaves (M7)
    BROKEN_PIPE = 141  # stdout closed under us (128 + SIGPIPE): a pager quit early

    @staticmethod
    def signalled(signum: int) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + signum


class GpuopsError(Exception):
    """Base of every error gpuops raises on purpose."""

    exit_code: int = ExitCode.ERROR


class UsageError(GpuopsError):
    """Bad arguments or input; the message names what was wrong."""

    exit_code = ExitCode.USAGE


class Refused(GpuopsError):
    """A safety rule refused the action. ``rule`` is the rule id (DESIGN §1)."""

    exit_code = ExitCode.REFUSED

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"refused ({rule}): {message}")
        self.rule = rule


class NotOwned(Refused):
    """The record is owned by another operator; nobody acts on another's records (M3)."""

    def __init__(self, name: str, owner: str, operator: str) -> None:
        super().__init__("M3", f"{name!r} is owned by {owner!r}, not by {operator!r}")
        self.name = name
        self.owner = owner
        self.operator = operator


class NameTaken(Refused):
    """Another operator holds a live record under this name (M3, M8)."""

    def __init__(self, name: str, owner: str) -> None:
        super().__init__("M3", f"the name {name!r} is held by {owner!r}")
        self.name = name
        self.owner = owner


class IllegalTransition(Refused):
    """An ownership record cannot move from its state to the requested one (M4)."""

    def __init__(self, name: str, current: str, requested: str, rule: str = "M4") -> None:
        super().__init__(rule, f"{name!r} is {current}; it cannot become {requested}")
        self.name = name
        self.current = current
        self.requested = requested


class Unavailable(GpuopsError):
    """Capacity or a provider was unavailable after retries; any claim is kept."""

    exit_code = ExitCode.UNAVAILABLE


class StoreUnavailable(Unavailable):
    """The state store could not be reached or locked in time."""


class StoreMissing(StoreUnavailable):
    """The state store's bucket does not exist: a configuration error (exit 2) naming the fix.
    Still a StoreUnavailable, so a guardian whose bucket vanished keeps its box's deadline."""

    exit_code = ExitCode.USAGE


class StoreForbidden(StoreUnavailable):
    """The state store refused these credentials an operation (S3's AccessDenied): a
    configuration error (exit 2); still a StoreUnavailable, as StoreMissing is."""

    exit_code = ExitCode.USAGE


class _FromProvider:
    """Mixin: which provider answered, the HTTP status, and a short (scrubbed) body."""

    def _attach(self, provider: str, status: int | None, body: str) -> None:
        # imported here: every command loads this module, few build a provider error, and
        # the scrub's patterns cost start-up a compile each
        from gpuops.secrets import scrub

        self.provider = provider
        self.status = status
        self.body = str(scrub(body[:500]))


class ProviderUnavailable(Unavailable, _FromProvider):
    """The provider answered 5xx or could not be reached."""

    def __init__(self, provider: str, message: str, status: int | None = None, body: str = ""):
        super().__init__(f"{provider} unavailable: {message}")
        self._attach(provider, status, body)


class CapacityExhausted(Unavailable, _FromProvider):
    """No capacity for this request (a GCE stockout); any claim is kept (L7)."""

    def __init__(self, provider: str, message: str, status: int | None = None, body: str = ""):
        super().__init__(f"{provider} has no capacity: {message}")
        self._attach(provider, status, body)


class QuotaExceeded(Unavailable, _FromProvider):
    """A provider quota refused the request (GCE ``QUOTA_EXCEEDED``/``quotaExceeded``)."""

    def __init__(self, provider: str, message: str, status: int | None = None, body: str = ""):
        super().__init__(f"{provider} quota exceeded: {message}")
        self._attach(provider, status, body)


class OfferTaken(Unavailable, _FromProvider):
    """The offer was rented by someone else between search and rent (``no_such_ask``)."""

    def __init__(self, provider: str, offer_id: int, status: int | None = None, body: str = ""):
        super().__init__(f"{provider} offer {offer_id} is no longer available")
        self._attach(provider, status, body)
        self.offer_id = offer_id


class RateLimited(Unavailable, _FromProvider):
    """HTTP 429. ``retry_after_s`` is the provider's hint when it gave one."""

    def __init__(
        self,
        provider: str,
        message: str,
        status: int | None = 429,
        body: str = "",
        retry_after_s: float | None = None,
    ):
        super().__init__(f"{provider} rate limited: {message}")
        self._attach(provider, status, body)
        self.retry_after_s = retry_after_s


class SearchQuotaExceeded(RateLimited):
    """Vast's search quota, which resets at UTC midnight: retrying is pointless."""


class ProviderError(GpuopsError, _FromProvider):
    """The provider said something we cannot act on."""

    def __init__(self, provider: str, message: str, status: int | None = None, body: str = ""):
        super().__init__(f"{provider}: {message}")
        self._attach(provider, status, body)


class AuthFailed(ProviderError):
    """The provider refused our credentials (401/403, ``auth_error``): configuration, exit 2
    (exit 1 is a bug's). ``fix`` says where the provider's credentials come from."""

    exit_code = ExitCode.USAGE

    @property
    def fix(self) -> str:
        if self.provider == "vast":
            return (
                "check the Vast.ai API key: VAST_API_KEY, else ~/.config/vastai/vast_api_key "
                "(`gpuops check` tests it)"
            )
        return (
            f"check the {self.provider} credentials: Application Default Credentials "
            "(`gcloud auth application-default login`, or GOOGLE_APPLICATION_CREDENTIALS)"
        )


class UnexpectedResponse(ProviderError):
    """A body whose shape drifted from every recording we hold; ``body`` keeps the start."""


class StillRunning(GpuopsError):
    """Still running, or state unknown: a watcher that timed out. Not a failure (L9)."""

    exit_code = ExitCode.UNKNOWN


class JobFailed(GpuopsError):
    """The job failed or died: a fact (M10)."""

    exit_code = ExitCode.FAILED


class StateError(GpuopsError):
    """The state store refused a write or holds data that cannot be read."""


class VersionConflict(StateError):
    """A compare-and-swap lost: the key changed (or vanished) since it was read."""

    def __init__(self, key: str, expected: str | None) -> None:
        super().__init__(f"{key!r} changed since version {expected!r} was read")
        self.key = key
        self.expected = expected


class AlreadyExists(StateError):
    """create-if-absent found the key already there."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key!r} already exists")
        self.key = key


class CorruptState(StateError):
    """A stored value is unreadable. It is reported, never silently replaced."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(
            f"corrupt state at {where}: {reason} (left untouched: gpuops never replaces or removes it; a human reads it)"
        )
        self.where = where
        self.reason = reason


class Interrupted(BaseException):
    """A signal asked us to stop (SIGINT, SIGTERM, SIGHUP); the exit code is 128 + its number.

    A BaseException, like KeyboardInterrupt, so that the cleanup it triggers runs in the code
    that knows what to clean, and no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return ExitCode.signalled(self.signum)
