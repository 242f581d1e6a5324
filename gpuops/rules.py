"""The prevention rules of DESIGN §1 and the honest status of each.

A status is earned, never declared: ``implemented`` names the test that enforces the rule (a
test checks that the test exists and cites the rule id); ``verified`` also needs a dated
observation on a real job or drill. Everything else is ``written``: a requirement on paper,
not yet enforced by code, and ``gpuops rules`` says so plainly.
"""

from __future__ import annotations

from dataclasses import dataclass

WRITTEN = "written"
IMPLEMENTED = "implemented"
VERIFIED = "verified"


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    status: str = WRITTEN
    test: str | None = None  # tests/<file>.py::<function> that enforces it
    scope: str | None = None  # what the enforcement covers so far, when it is partial
    observed: str | None = None  # "YYYY-MM-DD: what was seen" for verified rules


RULES: tuple[Rule, ...] = (
    Rule("L1", "No stop, no delete: the lane runner has no such command and never calls one."),
    Rule("L2", "Verify TERMINATED right before start; confirm this attempt's boot marker."),
    Rule("L3", "The board's state is one machine-readable line, compare-and-swap written."),
    Rule("L4", "A startup script's job name must equal the claimed job, or install is refused."),
    Rule("L5", "Startup-script contract: boot marker, 30 s log sync, status file, final log."),
    Rule("L6", "Preflight import and disk-capacity gates before any expensive work."),
    Rule("L7", "A stockout retry keeps the claim."),
    Rule("L8", "A claim busy for hours without a successful start is flagged for a human."),
    Rule("L9", "A watcher timing out is not a job failure; status file and results decide."),
    Rule("L10", "A reused script's unconditional fetches are checked against staged inputs."),
    Rule("L11", "Retry state is durable and any gpuops invocation can resume it."),
    Rule("M1", "Rent a healthy box: race offers, probe real hardware, destroy the losers."),
    Rule("M2", "Quarantine failing machines with a TTL; SSH auth failures are not host faults."),
    Rule(
        "M3",
        "Destroy only what you can prove you own; the intent is recorded before the create.",
        IMPLEMENTED,
        "tests/test_ledger.py::test_another_operator_cannot_move_a_record",
        scope="the ledger: records name their owner, only the owner moves one, a name held "
        "by another is refused; the create path that writes the intent arrives with the market",
    ),
    Rule(
        "M4",
        "Release ownership only after the provider confirms the box gone; failed destroys "
        "stay on the retry list.",
        IMPLEMENTED,
        "tests/test_ledger.py::test_release_before_gone_confirmed_is_refused_with_rule_m4",
        scope="the ledger: release only from gone-confirmed, failed destroys stay on the retry "
        "list across processes; asking the provider arrives with the market",
    ),
    Rule("M5", "A detached guardian destroys the box at a wall-clock deadline, results first."),
    Rule(
        "M6",
        "One home for every timing constant (gpuops/timing.py); tests pin their relations.",
        IMPLEMENTED,
        "tests/test_timing.py::test_no_module_but_timing_holds_a_duration_literal",
    ),
    Rule("M7", "A guardian exits 0 only for a box confirmed gone; supersession is verified."),
    Rule("M8", "Restarting a watcher or re-running rent never rents again (idempotent name)."),
    Rule("M9", "Before a race, check that our SSH key is registered with the account."),
    Rule("M10", "Dead is a fact (act on it); stalled is a judgment (alert only)."),
    Rule("M11", "Every offer decision is logged with its propensity; explore 10% of the time."),
    Rule("M12", "Creates are paced, 429s back off, an unclear create is reconciled by label."),
    Rule("H1", "Capture real output before writing a parser; parsers are tested on recordings."),
    Rule(
        "H2",
        "Mutation-test every load-bearing behaviour (mutation/).",
        IMPLEMENTED,
        "tests/test_mutation_gate.py::test_the_gate_fails_on_an_unjustified_survivor",
        scope="timing, store, ledger and event log; later modules join as they land",
    ),
    Rule(
        "H3",
        "Secrets never reach logs, the event log or recordings.",
        IMPLEMENTED,
        "tests/test_events.py::test_a_generated_key_in_random_text_never_reaches_the_file",
        scope="the event log scrubs before writing; recordings arrive with the record command",
    ),
)


def by_id(rule_id: str) -> Rule:
    for rule in RULES:
        if rule.id == rule_id:
            return rule
    raise KeyError(rule_id)
