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
    Rule(
        "L1",
        "No stop, no delete: the lane runner has no such command and never calls one.",
        IMPLEMENTED,
        "tests/test_lane_safety.py::test_no_lane_code_path_stops_suspends_or_deletes_the_instance_l1",
        scope="an AST scan of gpuops/ outside the market; `gpuops lane` has no such command; "
        "FakeGCE has no stop or delete route; release waits for the job's own power-off",
    ),
    Rule(
        "L2",
        "Verify TERMINATED right before start; confirm this attempt's boot marker.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_start_that_lands_on_another_boot_is_a_loud_noop_and_the_claim_is_kept_l2",
        scope="against FakeGCE; that GCE answers a start on a RUNNING instance with a DONE, "
        "error-free operation is an assumption not yet seen on a real project",
    ),
    Rule(
        "L3",
        "The board's state is one machine-readable line, compare-and-swap written.",
        IMPLEMENTED,
        "tests/test_lane_board.py::test_no_prose_line_changes_the_parsed_state_l3",
    ),
    Rule(
        "L4",
        "A startup script's job name must equal the claimed job, or install is refused.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_misspelt_job_name_is_refused_before_anything_boots_l4",
        scope="checked at install and again just before each start",
    ),
    Rule(
        "L5",
        "Startup-script contract: boot marker, 30 s log sync, status file, final log.",
        IMPLEMENTED,
        "tests/test_lane_script.py::test_each_missing_piece_of_the_contract_is_named_l5",
        scope="the linter parses the script (tree-sitter bash) and checks the contract; the "
        "template's bash runs for real in FakeGCE's sandboxed boots (its curl, gsutil and "
        "poweroff are the fake's shims); it has not yet run on a real VM",
    ),
    Rule(
        "L6",
        "Preflight import and disk-capacity gates before any expensive work.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_broken_import_ends_the_job_at_preflight_with_its_reason_l6",
        scope="required by the linter, in order before run_job; the gates run for real in "
        "FakeGCE's boots (real python3 against the fake image's modules, a df shim for the "
        "disk); not yet seen on a real VM",
    ),
    Rule(
        "L7",
        "A stockout retry keeps the claim.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_thirteen_attempts_keep_the_claim_and_five_more_stockouts_exit_4_with_it_kept_l7",
    ),
    Rule(
        "L8",
        "A claim busy for hours without a successful start is flagged for a human.",
        IMPLEMENTED,
        "tests/test_lane_decide.py::test_a_claim_held_for_hours_without_a_start_is_stale_l8",
        scope="`gpuops lane board` prints STALE with instance state, retry state and last log "
        "line; nobody is paged",
    ),
    Rule(
        "L9",
        "A watcher timing out is not a job failure; status file and results decide.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_watcher_timeout_is_not_a_failure_and_the_job_finishes_l9",
        scope="success needs the status file of this attempt and its results manifest checked "
        "against the bucket (each result's size, and md5 where storage keeps one); the "
        "template's checked upload and manifest are required by the linter and shown against "
        "FakeGCE's scripted storage outage "
        "(tests/test_lane_results.py::test_a_storage_outage_during_the_results_upload_ends_the_job_failed_not_succeeded_l9); "
        "a script that writes a false manifest is not detected",
    ),
    Rule(
        "L10",
        "A reused script's unconditional fetches are checked against staged inputs.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_reused_script_is_refused_until_its_inputs_are_staged_then_runs_l10",
        scope="any command reading a literal `inputs/NAME` path (an argument, a substitution, "
        "an input redirect) on every path of the parsed script (constant tests, negated ones "
        "too, are no condition; function calls followed; a fetch whose `||` ends the script "
        "counts); a name built at "
        "run time counts as missing; a read inside a program the script runs (python) is not "
        "seen",
    ),
    Rule(
        "L11",
        "Retry state is durable and any gpuops invocation can resume it.",
        IMPLEMENTED,
        "tests/test_lane_incidents.py::test_a_retry_that_died_after_eight_stockouts_is_flagged_and_resumed_elsewhere_l11",
        scope="the retry state is in the board's state line; the next `lane start` by the "
        "claimant, from any process or host sharing the store, resumes it; nothing retries "
        "on its own between invocations",
    ),
    Rule(
        "L12",
        "No state line, no freedom: a missing or corrupt board is unknown, never free; the "
        "script powers the VM off on every path.",
        IMPLEMENTED,
        "tests/test_lane_l12.py::test_a_board_moved_away_leaves_the_lane_refused_until_repair_restores_the_claim_l12",
        scope="the board's absence is judged from the instance, its metadata, its claim "
        "label and the claim journal beside the board in the shared store (every host reads "
        "both; the journal's age compares the writer's clock with the reader's, hours apart "
        "from the threshold); repair keeps a corrupt board's "
        "raw bytes and names no owner the evidence does not; the EXIT-trap power-off is "
        "required by the linter, which refuses a path that leaves without the trap (trap - "
        "EXIT, exec, kill -9 $$), and shown on every path in FakeGCE's real boots; a script "
        "installed around gpuops is flagged (billing alarm in watch and board --live) and "
        "stopped by GCE's maxRunDuration, modelled from the API reference, not yet observed",
    ),
    Rule(
        "L13",
        "The claim is fenced on the VM itself: an epoch in an instance label under its "
        "fingerprint; install and start act only under the current epoch; L12's evidence "
        "lives in the shared state.",
        IMPLEMENTED,
        "tests/test_lane_epoch.py::test_a_claim_from_a_stale_board_cannot_install_over_the_current_claim_l13",
        scope="claim writes `gpuops-claim=<epoch>-held-<token>` by setLabels under the label "
        "fingerprint (FakeGCE's 412, reconstructed, not captured) and release frees it; install "
        "and start check the label before each metadata write and the start, but GCE has no "
        "write that is conditional on both labels and metadata, so a claim moving between "
        "that check and the write is not fenced; the L12 evidence in the shared state is the "
        "label and the claim journal (tests/test_lane_epoch.py); a board older than the "
        "journal (an old copy put back) is unknown until repaired; the two-host machine over "
        "s3:// checks every boot against the labels (tests/test_lane_machine_hosts.py)",
    ),
    Rule(
        "M1",
        "Rent a healthy box: race offers, probe real hardware, destroy the losers.",
        IMPLEMENTED,
        "tests/test_rent.py::test_rent_keeps_the_first_healthy_box_and_destroys_every_loser",
        scope="against FakeVast and the fake ssh; the probe's parsers are tested on recordings, "
        "none captured on a real Vast host yet",
    ),
    Rule(
        "M2",
        "Quarantine failing machines with a TTL; SSH auth failures are not host faults.",
        IMPLEMENTED,
        "tests/test_rent.py::test_when_every_probe_fails_on_auth_the_race_stops_and_blames_our_key",
    ),
    Rule(
        "M3",
        "Destroy only what you can prove you own; the intent is recorded before the create.",
        IMPLEMENTED,
        "tests/test_ledger.py::test_another_operator_cannot_move_a_record",
        scope="records name their owner and only the owner moves one; rent writes each intent "
        "before its create and labels the box with it; one instance has one record; sweep "
        "reports unowned boxes and never touches them; with a team member's own Vast key the "
        "operator id is the key's user (a declared one that disagrees is refused), with a "
        "shared key it is declared, and every rental and `boxes` say which; `check` names an "
        "s3:// state whose bucket policy does not refuse unconditional writes to its prefix "
        "(the S3 stand-in enforces such a policy)",
    ),
    Rule(
        "M4",
        "Release ownership only after the provider confirms the box gone; failed destroys "
        "stay on the retry list.",
        IMPLEMENTED,
        "tests/test_ledger.py::test_release_before_gone_confirmed_is_refused_with_rule_m4",
        scope="release only from gone-confirmed, earned by the provider's show() answering gone "
        "(or a refused create); failed destroys stay on the retry list and sweep retries them",
    ),
    Rule(
        "M5",
        "A detached guardian destroys the box at a wall-clock deadline, results first.",
        IMPLEMENTED,
        "tests/test_guard_process.py::"
        "test_a_rented_box_is_destroyed_at_its_deadline_after_the_shell_that_rented_it_is_gone",
        scope="rent starts a detached guardian (own session); drilled against the loopback fakes "
        "only (`gpuops guard NAME --drill`); results synced while the job runs "
        "(`rent --sync-every`) tested on the fake box (tests/test_sync.py: a host killed between "
        "syncs, every sync failing, the destroy on time); never yet on a real Vast box, so not "
        "verified",
    ),
    Rule(
        "M6",
        "One home for every timing constant (gpuops/timing.py); tests pin their relations.",
        IMPLEMENTED,
        "tests/test_timing.py::test_no_module_but_timing_holds_a_duration_literal",
    ),
    Rule(
        "M7",
        "A guardian exits 0 only for a box confirmed gone; supersession is verified.",
        IMPLEMENTED,
        "tests/test_guardian.py::test_no_sequence_of_leases_makes_a_live_box_exit_0",
        scope="one lease per box with a heartbeat; standbys take over only a lease seen "
        "standing still for its TTL on their own clock (never another host's); "
        "supersession (exit 7) only after the successor is seen renewing; the 20 September "
        "test runs ten real guardian processes (tests/test_guard_process.py); the decisions "
        "explored exhaustively over small scopes (guardians started, killed and stalled on "
        "skewed hosts, cron's sweep: tests/test_protocol.py)",
    ),
    Rule(
        "M8",
        "Restarting a watcher or re-running rent never rents again (idempotent name).",
        IMPLEMENTED,
        "tests/test_rent.py::test_renting_again_returns_the_live_box_and_never_creates",
        scope="rent; re-running rent from a crash-looping watcher in the 20 September test "
        "rents one box and starts no second responsible guardian; two rents of one name at "
        "once race once (a racer heartbeat on the rental; tests/test_owner_process.py)",
    ),
    Rule(
        "M9",
        "Before a race, check that our SSH key is registered with the account.",
        IMPLEMENTED,
        "tests/test_rent.py::test_an_unregistered_key_is_refused_before_any_create",
    ),
    Rule(
        "M10",
        "Dead is a fact (act on it); stalled is a judgment (alert only).",
        IMPLEMENTED,
        "tests/test_watchdog.py::test_a_quiet_real_job_is_stalled_by_the_box_clock_and_left_running",
        scope="`gpuops run` starts jobs under tmux; `gpuops watch` judges dead / stalled / "
        "unknown; tested on real tmux processes in fake boxes' sandboxes",
    ),
    Rule(
        "M11",
        "Every offer decision is logged with its propensity; explore 10% of the time.",
        IMPLEMENTED,
        "tests/test_rent.py::test_every_offer_decision_is_logged_with_propensities",
        scope="logging and exploration; `gpuops policy eval` scores other policies from the "
        "logged lead picks (tests/test_ope.py), later slots' conditional propensities unused",
    ),
    Rule(
        "M12",
        "Creates are paced, 429s back off, an unclear create is reconciled by label.",
        IMPLEMENTED,
        "tests/test_rent.py::test_a_create_whose_answer_is_lost_is_reconciled_by_its_label",
    ),
    Rule(
        "M13",
        "No billed box without a live owner that will end it by deadline + grace; exit codes "
        "come from typed outcomes, never from our own prose.",
        IMPLEMENTED,
        "tests/test_owner.py::test_a_rent_killed_after_its_creates_is_ended_by_its_guardian_by_the_deadline_m13",
        scope="the market: the guardian starts before the first create and ends every record "
        "of its rental; sweep ends any record past its deadline; interrupts clean up; a "
        "seeded soak (tests/soak.py, 600 lifecycles in the suite) and real-process kills "
        "(tests/test_owner_process.py) judged by FakeVast's record; never on a real account",
    ),
    Rule(
        "M14",
        "Two ceilings on two hosts: every box destroys itself at deadline + grace with its "
        "per-instance key, never the account key.",
        IMPLEMENTED,
        "tests/test_ceiling_process.py::test_with_every_guardian_dead_from_the_first_second_the_box_ends_itself_m14",
        scope="Vast boxes rented by `rent`: an onstart loop on the box's own clock (deadline + "
        "BOX_CEILING_GRACE_S), re-armed over ssh when `guard` moves a deadline later (refused "
        "when it cannot be); judged on FakeVast, which runs the onstart for real and holds the "
        "per-instance key to its own box as Vast documents it; the lane's ceiling is GCE's own "
        "maxRunDuration (L-rules); never on a real account",
    ),
    Rule(
        "M15",
        "A budget is a ceiling: rent refuses a rental whose worst case would cross the team's "
        "or the operator's remaining budget; spend from the provider's own transitions.",
        IMPLEMENTED,
        "tests/test_budgets.py::test_bobs_box_counts_against_the_team_limit_and_alice_is_refused_before_any_create_m15",
        scope="partial: rent refuses before its first create when the dearest raced offer for "
        "all its hours, plus spent today/this month, plus live rentals' price to their "
        "deadlines, crosses a team or operator limit (UTC days and months, shared store); "
        "spend from Vast's instance rows (start_date, dph_total) closed at the ledger's "
        "confirmed-gone time, else from the rental record; a race's losing candidates "
        "are counted only when a listing saw them; the lane's running job at its configured "
        "rate (GCE names no price) until the board no longer shows it started",
    ),
    Rule(
        "M16",
        "One incarnation, one identity: records, leases, guardian, events and results are "
        "keyed by a unique rental id; results never overwrite another incarnation's.",
        IMPLEMENTED,
        "tests/test_team_clocks.py::test_a_name_whose_previous_rental_still_has_a_box_is_refused_to_another_operator_m16",
        scope="each incarnation gets a rental id at its first race (a restart of one's own "
        "race keeps it); results land under NAME/<rental id>/ (tests/test_team_clocks.py); "
        "rent refuses a name whose previous rental, another operator's, still has a box "
        "record not confirmed gone; box records carry the id, leases and guardian pid files "
        "are the incarnation's (NAME+<rental id>), guard.start names it, and a guardian "
        "answers for its own incarnation to the end: once the name is raced again it ends only "
        "its own records and leaves 0 (tests/test_guard.py ..._m16); the race's events (create, "
        "probe, rent done/stopped), every ledger transition and guard.start/confirmed_gone "
        "name it, as does every guard.* event a guardian writes (tests/test_guard.py) and "
        "the guardian service's guard.all.left (tests/test_guard_all.py); the racer's "
        "heartbeat is the rental record's own (which carries it); the team soak (tests/"
        "soak.py) judges every results delivery its incarnation's, whole, never changed by a "
        "later one; by design, a name is raced again while an ended incarnation's guardian "
        "still runs (it ends only its own records and leaves)",
    ),
    Rule(
        "M17",
        "The guardian is the last to die: any fault in its own work ends in a confirmed "
        "destroy, then a loud non-zero exit; one corrupt record blocks only itself; no "
        "decision compares two hosts' clocks.",
        IMPLEMENTED,
        "tests/test_guard_faults.py::test_a_full_disk_under_the_state_still_ends_in_the_destroy_and_sweep_releases_later_m17",
        scope="in-process against FakeVast: a results bucket that does not exist, a full disk "
        "under the state (writes and the event log), a hand-edited record of another "
        "operator's or of its own (its box found by its instance claim), SIGTERM (the lease "
        "dropped); sweep and a guardian on another host enforce a deadline CLOCK_SKEW_S late "
        "and `boxes`/`rent`/`guard` judge a lease on this host's facts "
        "(tests/test_team_clocks.py); the S3 store resolves a lost answer by reading back "
        "(a loopback proxy before moto); the team soak (tests/soak.py) counts each path; "
        "SIGTERM mid-copy ends the guardian's copy child (its process group) and removes "
        "the partial tarball, and `boxes` shows results missing (why) or delivered (where) "
        "(tests/test_guard_process.py, a real guardian; tests/test_guard_all.py, the "
        "service)",
    ),
    Rule(
        "H1",
        "Capture real output before writing a parser; parsers are tested on recordings.",
        IMPLEMENTED,
        "tests/test_vast_adapter.py::test_every_vast_recording_loads_with_honest_provenance",
        scope="every parser is tested on recordings with provenance; Vast bodies are public or "
        "reconstructed, SSH output captured on loopback, nothing yet from a real rental; "
        "`gpuops record vast` and `record gce` capture and replay (tests/test_record.py, "
        "tests/test_record_gce.py, against the loopback fakes only)",
    ),
    Rule(
        "H2",
        "Mutation-test every load-bearing behaviour (mutation/).",
        IMPLEMENTED,
        "tests/test_mutation_gate.py::test_the_gate_fails_on_an_unjustified_survivor",
        scope="CI's gate: timing, store, ledger, event log; the market's selection, race, "
        "quarantine, rentals, teardown, probe parsing, Vast adapter, guardian and watchdog "
        "decisions; the lane's board, decisions and script linter; the log's stats, shrunk "
        "rates and off-policy estimates",
    ),
    Rule(
        "H3",
        "Secrets never reach logs, the event log or recordings.",
        IMPLEMENTED,
        "tests/test_events.py::test_a_generated_key_in_random_text_never_reaches_the_file",
        scope="the event log scrubs before writing; `gpuops record vast` scrubs every "
        "captured body, path, query and SSH output with the same scrub (tests/test_record.py); "
        "one definition in gpuops/secrets.py (tests/test_secrets.py)",
    ),
    Rule(
        "H4",
        "A fake is never kinder than its provider: what the provider refuses, delays or "
        "leaves running, the fake does too; what it does not model is a loud error.",
        IMPLEMENTED,
        "tests/test_vast_cli_contract.py::test_the_cli_creates_shows_labels_lists_and_destroys_a_box_h4",
        scope="FakeVast judged by the vastai 1.9.1 CLI over loopback (search with "
        "documented keys, create, show, label, list, destroy, user), documented 400s for "
        "unknown search keys and computed list filters, creates and key registers its "
        "published contract refuses, and ssh into a box only with a key the account held at "
        "its create (tests/test_fake_vast.py), unmodelled routes loud; S3 through "
        "moto (boto3 conditional writes); FakeGCE and the fake GCS judged by "
        "google-cloud-compute's REST client (get, metadata, scheduling, start through its "
        "ExtendedOperation, a stockout, a stale fingerprint's 412, serial output) and "
        "google-cloud-storage (generation preconditions, reads by generation, listing with "
        "a delimiter, resumable uploads, deletes) in-process (tests/test_fake_gce_contract.py)",
    ),
    Rule(
        "H5",
        "The shells that spend money are tested by state machines that kill processes at "
        "every step, judged by the provider's record, and their decisions are mutation-gated.",
        IMPLEMENTED,
        "tests/test_soak.py::test_faulty_lifecycles_leak_nothing_destroy_nothing_of_others_and_never_lie_m13",
        scope="the market's rent, guardian, destroy and sweep: a crash or interrupt at any "
        "provider call or store write, judged by FakeVast; their decisions (race, guardian, "
        "teardown's outcome -> exit code, rentals) gated; the lane runner is not yet covered",
    ),
    Rule(
        "H6",
        "Fakes answer to the providers' published contracts: bodies and requests are "
        "validated against the providers' machine-readable references.",
        IMPLEMENTED,
        "tests/test_vast_conformance.py::test_every_exchange_of_a_tour_of_fakevast_keeps_vasts_published_contract_h6",
        scope="Vast: every request and body of a tour of all nine FakeVast routes and their "
        "answers, and of the vastai CLI's story, judged against facts extracted from "
        "vast-cli's OpenAPI yamls with the official client's sourced patches "
        "(recordings/contracts/), including each route's documented rate limit, which the "
        "default scenario enforces per key (429, no Retry-After) beside small destroy, list "
        "and show lags, and gpuops paces its creates to create's interval; rent's disk and "
        "image refused at the edge; a second purchase of one offer, one machine listed twice "
        "and a contract's end modelled, the race creating once per offer and machine and "
        "skipping contracts ending before the deadline plus a margin, and `guard --hours` "
        "refusing a deadline past it. Google: every request gpuops' GCE and GCS adapters and "
        "google-cloud-storage send, and every 2xx body FakeGCE and its bucket render, on a "
        "tour of all their Compute and Storage routes, judged against the compute v1 and "
        "storage v1 discovery documents google-api-python-client 2.202.0 ships (error bodies, "
        "which no discovery schema describes, are not); FakeGCE's Metadata limits, "
        "maxRunDuration re-armed at every start, GCS paging and chunked bodies. S3: every "
        "conditional request the state store sends, on each of its paths, judged against "
        "AWS's conditional-write rules by the stand-in's front, which also answers 409 "
        "ConditionalRequestConflict and loses answers; moto's own answers are not judged, and "
        "FakeVast's rendered times follow the real clock, not a scaled gpuops process's",
    ),
    Rule(
        "O1",
        "A person hears every alarm: each sent once per cause to the team's endpoints, "
        "retried, and never in the way of a destroy.",
        IMPLEMENTED,
        "tests/test_alarms.py::test_an_endpoint_that_hangs_never_delays_the_guardian_s_destroy_o1",
        scope="GPUOPS_NOTIFY (apprise URLs), sent in the background, deduplicated and retried "
        "through the store (tested against a loopback JSON receiver, in-process and from real "
        "processes); raised by a guardian's non-zero exits (leave, signal, crash, an unresolved "
        "create's exit 5), a destroy pending for rounds, a failed results copy, `watch` "
        "judging a job stalled or dead, `sweep` finding unowned, unresolved or unreadable "
        "records, and the lane's stale claim (L8) and billing alarm (L12) "
        "(tests/test_lane_incidents.py, tests/test_lane_l12.py), and a budget's threshold "
        "crossed, once per threshold per period (M15: tests/test_alarms_unit.py, "
        "tests/test_budgets.py); never yet sent to a real ntfy, mail or Slack",
    ),
)
