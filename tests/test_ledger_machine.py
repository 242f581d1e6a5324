"""A Hypothesis state machine over the ledger: three operators, a provider, crashes (M3, M4).

Operators record intents, create boxes, destroy them (sometimes failing), confirm and release,
in random order, and a crash can strike just before or just after any store write. After every
step: nothing released before gone-confirmed, no record lost, no box with two owners, and no
box alive at the provider without an active record that carries its label.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuops.errors import Refused
from gpuops.ledger import CREATE_REFUSED, GONE_BY_SHOW, BoxState, Ledger
from gpuops.store.memory import MemoryStore

OPERATORS = ("alice", "bob", "carol")
NAMES = ("box-a", "box-b")
CRASHES = st.sampled_from([None, None, "before-write", "after-write"])


class Crash(Exception):
    """The process died here."""


class CrashingStore(MemoryStore):
    """A store whose next write can die just before or just after it lands."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: str | None = None

    def _guard(self, write: Any, *args: Any) -> Any:
        if not str(args[0]).startswith("ledger/boxes/"):
            return write(*args)  # the instance index: a crash there is a crash before the record
        plan, self.plan = self.plan, None
        if plan == "before-write":
            raise Crash
        result = write(*args)
        if plan == "after-write":
            raise Crash
        return result

    def create(self, key: str, data: bytes) -> str:
        return self._guard(super().create, key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        return self._guard(super().put, key, data, version)


class Sink:
    """The event log, shared by every operator's ledger: what actually happened."""

    def __init__(self) -> None:
        self.transitions: list[dict[str, Any]] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        self.transitions.append(payload)


@dataclass
class Expected:
    owner: str
    state: BoxState
    intent_id: str | None = None
    history: list[BoxState] = field(default_factory=list)


class LedgerMachine(RuleBasedStateMachine):
    """M3, M4: random operations by three operators with crashes between steps."""

    def __init__(self) -> None:
        super().__init__()
        self.store = CrashingStore()
        self.sink = Sink()
        self.ledgers = {op: self._restart(op) for op in OPERATORS}
        self.expected: dict[str, Expected] = {}
        self.boxes: dict[str, str] = {}  # provider: alive instance id -> label (intent id)
        self.ids = itertools.count(1000)

    def _restart(self, operator: str) -> Ledger:
        return Ledger(self.store, self.sink, operator)

    def _attempt(self, op: str, crash: str | None, action: Any) -> str:
        """Run one ledger call; 'ok', 'refused', or where the crash struck."""
        self.store.plan = crash
        try:
            action(self.ledgers[op])
        except Refused:
            return "refused"
        except Crash:
            self.ledgers[op] = self._restart(op)  # the process died; a new one starts
            return crash or "crash"
        finally:
            self.store.plan = None
        return "ok"

    def _moved(self, name: str, outcome: str, to: BoxState) -> None:
        if outcome in ("ok", "after-write"):
            exp = self.expected[name]
            if exp.state is not to:
                exp.history.append(to)
            exp.state = to

    def _owned(self, op: str, name: str, *states: BoxState) -> bool:
        exp = self.expected.get(name)
        return exp is not None and exp.owner == op and exp.state in states

    # --- rules -------------------------------------------------------------------------
    @rule(op=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES), crash=CRASHES)
    def record_intent(self, op: str, name: str, crash: str | None) -> None:
        exp = self.expected.get(name)
        free = exp is None or exp.state is BoxState.RELEASED
        outcome = self._attempt(op, crash, lambda ledger: ledger.record_intent(name, "vast"))
        if free:
            assert outcome != "refused"
            if outcome in ("ok", "after-write"):
                stored = self.ledgers[op].get(name)
                self.expected[name] = Expected(op, BoxState.INTENT, stored.intent_id)
        elif exp.owner != op:
            assert outcome == "refused", "M3: another operator's active name was taken"
        else:
            assert outcome == "ok", "M8: asking again for one's own name must be harmless"

    @rule(op=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES), crash=CRASHES)
    def create_box_and_go_live(self, op: str, name: str, crash: str | None) -> None:
        if not self._owned(op, name, BoxState.INTENT):
            return
        exp = self.expected[name]
        instance = next((i for i, label in self.boxes.items() if label == exp.intent_id), None)
        if instance is None:
            instance = str(next(self.ids))
            self.boxes[instance] = exp.intent_id  # the create carries the intent id as label
        outcome = self._attempt(op, crash, lambda ledger: ledger.mark_live(name, instance))
        assert outcome != "refused"
        self._moved(name, outcome, BoxState.LIVE)

    @rule(op=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES), crash=CRASHES)
    def begin_destroy(self, op: str, name: str, crash: str | None) -> None:
        if name not in self.expected:
            return
        allowed = self._owned(op, name, BoxState.INTENT, BoxState.LIVE, BoxState.DESTROYING)
        outcome = self._attempt(op, crash, lambda ledger: ledger.begin_destroy(name))
        assert (outcome != "refused") == allowed, f"begin_destroy by {op}: {outcome}"
        self._moved(name, outcome, BoxState.DESTROYING)

    @rule(
        op=st.sampled_from(OPERATORS),
        name=st.sampled_from(NAMES),
        works=st.booleans(),
        crash=CRASHES,
    )
    def destroy_at_the_provider(self, op: str, name: str, works: bool, crash: str | None) -> None:
        if not self._owned(op, name, BoxState.DESTROYING):
            return
        label = self.expected[name].intent_id
        if not works:
            outcome = self._attempt(op, crash, lambda ledger: ledger.destroy_failed(name, "503"))
            assert outcome != "refused"
            return
        for instance in [i for i, lbl in self.boxes.items() if lbl == label]:
            del self.boxes[instance]
        # only after the provider, asked about that box, says it is gone (M4)
        outcome = self._attempt(op, crash, lambda ledger: ledger.confirm_gone(name, GONE_BY_SHOW))
        assert outcome != "refused"
        self._moved(name, outcome, BoxState.GONE_CONFIRMED)

    @rule(op=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES), crash=CRASHES)
    def create_refused(self, op: str, name: str, crash: str | None) -> None:
        """The provider refused the create outright: the intent is gone without a box."""
        if not self._owned(op, name, BoxState.INTENT):
            return
        if self.expected[name].intent_id in self.boxes.values():
            return  # a box carries its label: the create was not refused
        outcome = self._attempt(op, crash, lambda ledger: ledger.confirm_gone(name, CREATE_REFUSED))
        assert outcome != "refused"
        self._moved(name, outcome, BoxState.GONE_CONFIRMED)

    @rule(thief=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES))
    def claim_another_records_instance(self, thief: str, name: str) -> None:
        """M3: nobody can mark a record live on an instance another record holds."""
        victims = [n for n, e in self.expected.items() if e.state is BoxState.LIVE and n != name]
        if not victims or not self._owned(thief, name, BoxState.INTENT):
            return
        instance = self.ledgers[thief].get(victims[0]).instance_id
        outcome = self._attempt(thief, None, lambda ledger: ledger.mark_live(name, instance))
        assert outcome == "refused", "M3: one instance, one owner"

    @rule(op=st.sampled_from(OPERATORS), name=st.sampled_from(NAMES), crash=CRASHES)
    def release(self, op: str, name: str, crash: str | None) -> None:
        if name not in self.expected:
            return
        allowed = self._owned(op, name, BoxState.GONE_CONFIRMED, BoxState.RELEASED)
        outcome = self._attempt(op, crash, lambda ledger: ledger.release(name))
        assert (outcome != "refused") == allowed, f"release by {op}: {outcome}"
        self._moved(name, outcome, BoxState.RELEASED)

    @precondition(lambda self: bool(self.expected))
    @rule(op=st.sampled_from(OPERATORS))
    def restart(self, op: str) -> None:
        self.ledgers[op] = self._restart(op)

    # --- invariants --------------------------------------------------------------------
    @invariant()
    def no_record_is_lost_and_each_has_one_owner(self) -> None:
        stored = {r.name: r for r in self.ledgers["alice"].records()}
        assert set(stored) == set(self.expected)
        for name, exp in self.expected.items():
            assert (stored[name].owner, stored[name].state) == (exp.owner, exp.state)
            assert stored[name].intent_id == exp.intent_id

    @invariant()
    def nothing_is_released_before_gone_confirmed(self) -> None:
        for logged in self.sink.transitions:  # what the ledger wrote, not what the model hoped
            if logged["after"] == "released":
                assert logged["before"] == "gone-confirmed", logged
        for exp in self.expected.values():
            for before, after in itertools.pairwise(exp.history):
                if after is BoxState.RELEASED:
                    assert before is BoxState.GONE_CONFIRMED

    @invariant()
    def every_alive_box_has_exactly_one_active_record(self) -> None:
        records = self.ledgers["bob"].records()
        for label in self.boxes.values():
            holders = [r for r in records if r.intent_id == label]
            assert len(holders) == 1, f"box labelled {label} has holders {holders}"
            assert holders[0].state in (BoxState.INTENT, BoxState.LIVE, BoxState.DESTROYING)


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(
    max_examples=settings.default.max_examples, stateful_step_count=40, deadline=None
)
