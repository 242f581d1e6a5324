"""Every duration gpuops uses, in seconds; nothing else under gpuops/ may hold one (rule M6).

On 20 September three timing constants in three modules disagreed, every guardian decided it
had been superseded and exited 0, and ten boxes billed until a human noticed (docs/rules.md, M5).
So: one module, one name per duration, a one-line reason beside each, and tests in
tests/test_timing.py that pin every value and every relation safety depends on. The
supersession check and the heartbeat must read the same constants from here.
"""

from __future__ import annotations

# --- guardian lease (M5, M7) ---------------------------------------------------------------
# A guardian renews its lease this often; the heartbeat is what "alive" means.
GUARDIAN_HEARTBEAT_S = 15.0
# A lease whose heartbeat is older than this is stale and may be taken over; >= 3 heartbeats,
# so one slow store write or a short network blip never hands the box to a second guardian.
LEASE_TTL_S = 60.0
# A standby guardian re-reads the lease this often while waiting for it to go stale.
LEASE_POLL_S = 5.0
# A guardian that believes it was superseded re-checks its successor this long before leaving:
# two heartbeats, so it sees at least one fresh renewal by the successor (M7).
SUPERSESSION_VERIFY_S = 30.0

# --- billing ceiling (M5) ------------------------------------------------------------------
# Copying results off starts this long before the wall-clock deadline.
DEADLINE_MARGIN_S = 600.0
# The copy may run at most this long; shorter than the margin so the destroy still lands
# before the deadline even when the copy overruns (the ceiling wins).
RESULTS_COPY_BUDGET_S = 420.0
# While the job runs, its guardian syncs what changed in its results this often by default
# (`rent --sync-every`; 0 is off): a host that dies at hour 7 of 8 loses at most this much.
RESULTS_SYNC_EVERY_S = 1800.0
# A rental shorter than DEADLINE_MARGIN_S / DEADLINE_MARGIN_FRACTION gets a margin (and a copy
# budget) scaled down to this share of its length: a 72 s rental is not destroyed at birth.
DEADLINE_MARGIN_FRACTION = 0.25
# After a destroy call, ask for that instance until it is confirmed gone, for at most this long.
DESTROY_CONFIRM_TIMEOUT_S = 120.0
# Between two "is it gone?" questions about one instance.
DESTROY_CONFIRM_POLL_S = 5.0
# The call budget a many-box sweep shares (rent.Pace): provider calls start at most one per this
# long, 100 a second; a 429's retry wait holds every thread on top of it. An assumption, not a
# measured limit: Vast publishes per-endpoint thresholds (1.0 to 4.5) without their unit, and a
# 429 with a retry wait is what tells us we went over. A paged list takes one slot, not one a page.
VAST_CALL_INTERVAL_S = 0.01

# --- jobs and the watchdog (M10) -----------------------------------------------------------
# No log progress for this long makes a job "stalled": a judgment, alert only.
STALL_THRESHOLD_S = 1800.0
# A watcher polls the job's log and exit-code file this often.
WATCH_POLL_S = 10.0
# `gpuops watch` watches this long before it exits 5: still running, not failed (M10, L9).
WATCH_TIMEOUT_S = 3600.0
# `gpuops logs --follow` looks at the job's log on the box this often (one ssh connection for
# the whole follow: the look is a `wc -c` on the box, so a second costs nothing but latency).
LOGS_FOLLOW_POLL_S = 1.0

# --- starting guardians (M5) ---------------------------------------------------------------
# `gpuops guard` waits this long for the detached guardian it started to report in: a loaded
# always-on host (a Raspberry Pi) can take many seconds to import and start one.
GUARD_SPAWN_WAIT_S = 30.0
# ... reading its log for the line that says it is running this often.
GUARD_SPAWN_POLL_S = 0.1
# A guardian service (`guard --all`) stopped by a signal waits at most this long for the lease
# writes its guardians have in flight before it drops every lease it holds (none is taken after).
GUARD_STOP_WAIT_S = 10.0
# A fire drill (`gpuops guard NAME --drill`) rents its box for this long: about a cent.
DRILL_RENTAL_S = 120.0
# The drill asks whether the guardian has destroyed the box this often.
DRILL_POLL_S = 1.0

# --- the lane (L5, L8, L9) -----------------------------------------------------------------
# The startup script syncs its log to storage this often (the seed's 30 s rule, L5).
LOG_SYNC_S = 30.0
# After a start, this attempt's boot marker must appear within this window, or the start was
# a silent no-op on a running instance (L2).
BOOT_MARKER_WINDOW_S = 300.0
# A claim busy this long without a successful start is flagged STALE for a human (L8); the
# seed's silent retry death left a board "busy" for ten hours.
STALE_CLAIM_S = 7200.0
# How long `lane watch` watches before it exits 5 (still running, not failed: L9).
LANE_WATCH_TIMEOUT_S = 3600.0
# Between two stockout start attempts while holding the claim (L7).
STOCKOUT_RETRY_S = 120.0
# A job's status ended this long ago and its VM still runs: its script never powered off, and
# the board and `lane watch` raise a billing alarm (L12). The template's EXIT trap uploads the
# final log (three tries, 5+10+15 s of pauses) before its poweroff, and GCE's STOPPING takes
# about a minute: three minutes covers both.
POWEROFF_GRACE_S = 180.0
# `lane install`'s provider-native ceiling when the job declares no length: GCE itself stops
# the instance this long after it starts (scheduling.maxRunDuration, a second layer after the
# script's own power-off). Six hours: longer than the seed's longest batch.
DEFAULT_MAX_RUN_S = 21600.0
# GCE's documented bounds for scheduling.maxRunDuration: 30 s to 120 days. A ceiling outside
# them is refused (HTTP 400) by GCE, so `lane install` refuses it first (exit 2).
GCE_MIN_RUN_S = 30.0
# ... and the longest: 120 days.
GCE_MAX_RUN_S = 10368000.0

# --- market selection and probing (M1, M2, M12) --------------------------------------------
# A machine that failed a probe on a real host fault stays out of the pool this long (M2).
QUARANTINE_TTL_S = 86400.0
# The whole hardware probe of one box (GPU, VRAM, disk, CUDA) must finish within this.
PROBE_TIMEOUT_S = 180.0
# OpenSSH ConnectTimeout for every ssh to a rented box.
SSH_CONNECT_TIMEOUT_S = 10.0
# One remote command over ssh (one probe step) must finish within this.
SSH_COMMAND_TIMEOUT_S = 60.0
# While racing, booting candidates are asked for their status this often.
RACE_POLL_S = 5.0
# A box that has not reached "running" within this is treated as a failed candidate.
BOOT_TIMEOUT_S = 600.0
# An offer is raced only when its contract ends at least this long after the rental's deadline:
# Vast stops the box at the contract's end, and the box's own ceiling (BOX_CEILING_GRACE_S past
# the deadline) and a guardian's last destroy attempts must all fall inside the contract.
CONTRACT_END_MARGIN_S = 3600.0
# Minimum spacing between two create calls: back-to-back creates drew 429s (M12), and Vast
# documents create's own rate limit as a minimum interval per key of 4.5 s (vast-cli's
# create_instance.yaml x-rate-limit threshold; recordings/contracts/vast-openapi.yaml).
CREATE_PACING_S = 4.5
# Exponential backoff for 429s and unavailable providers starts here...
BACKOFF_BASE_S = 1.0
# ...and is capped here, the longest Retry-After the vastai client honours (tooling.md §2).
BACKOFF_MAX_S = 60.0
# One HTTP call must connect within this, and answer within this again (connect + read).
HTTP_TIMEOUT_S = 20.0

# --- alarms a person hears (O1) --------------------------------------------------------------
# One alarm's send to one endpoint must connect within this, and answer within this again
# (apprise's cto and rto): a person hears in seconds, and a dead endpoint costs little.
ALARM_SEND_TIMEOUT_S = 5.0
# A process about to exit (a guardian after its destroy) waits at most this long for alarms
# still being sent; what is not delivered by then stays pending for the next send or sweep.
ALARM_FLUSH_S = 15.0
# apprise's own per-service wait, off (0): cto/rto above bound each send, and apprise runs a
# limited send in its worker pool, which refuses work once the interpreter is exiting.
ALARM_APPRISE_SERVICE_LIMIT_S = 0.0
# A send claimed by a process that died mid-send is taken over this long after the claim (plus
# CLOCK_SKEW_S: the claim's time is another host's clock); far longer than any one send.
ALARM_CLAIM_STALE_S = 120.0

# `gpuops check` reports this host's clock when it is further than this from the provider's
# (its Date header, whole seconds, plus the call's own time): well inside CLOCK_SKEW_S, so a
# host it passes is never near the skew gpuops tolerates between hosts (M17).
CHECK_CLOCK_TOLERANCE_S = 60.0

# --- recording -------------------------------------------------------------------------------
# `gpuops record vast` prices its one-cent rental for this long: boot, probe, destroy and
# confirm; with --max-usd it sets the dearest offer the recording may rent.
RECORD_HOLD_S = 900.0
# `gpuops record gce` prices the lane instance's run for this long: boot, the recording
# script's one line and its poweroff; at the lane's $0.70/h that is $0.047, under --max-usd.
RECORD_GCE_RUN_S = 240.0

# --- the demo ---------------------------------------------------------------------------------
# `gpuops demo` rents its box for this long in real time (its world's clock, and gpuops' with
# it, runs the demo's time scale faster): the race, the job and the interrupted race fit
# before the copy starts a quarter before it.
DEMO_RENTAL_S = 26.0
# The longest any one step of the demo waits on a real process before it calls the step failed
# (a guardian past its deadline, an interrupted race, a fake's boot); the demo ends in a minute.
DEMO_STEP_WAIT_S = 45.0
# How often the demo looks at what it waits on (a process, the fake's boxes).
DEMO_POLL_S = 0.05
# How far (fake seconds) the demo moves FakeGCE's clock at a time while a VM powers itself off.
DEMO_SETTLE_STEP_S = 60.0

# --- progress ----------------------------------------------------------------------------------
# `watch` and `destroy` print a line at least this often while they wait (gpuops/progress.py).
PROGRESS_EVERY_S = 10.0

# --- input checked at the edge ----------------------------------------------------------------
# The longest rental `rent --hours` / `guard --hours` accept: a week. A ceiling is meant to be
# set on purpose; anything longer is far more likely a typo (1e9 hours) than a plan, and the
# guardian's deadline must stay a date a person can read and check.
MAX_RENTAL_S = 604800.0

# --- state store -----------------------------------------------------------------------------
# Released ledger records and ended rentals stay in the live store this long, then `gpuops
# compact` moves them to the archive: a week of history stays on `boxes` (what ran this week
# and what it cost), while older history no longer costs every listing a read per record.
# At least MAX_RENTAL_S, so the archive never takes a rental younger than the longest one.
ARCHIVE_AFTER_S = 604800.0
# Waiting for the local store's file lock longer than this is an error, never a silent skip.
STORE_LOCK_TIMEOUT_S = 10.0
# Between two attempts to take the store lock.
STORE_LOCK_POLL_S = 0.01
# S3 answers 409 ConditionalRequestConflict to a conditional write racing another for the
# same key: "try again", not "someone else won"; each next try waits this, twice as long.
S3_CONFLICT_BACKOFF_S = 0.05
# An S3 listing of a whole kind reads the values its cache lacks this many at a time: each read
# is a round trip (tens of milliseconds to S3), so 600 records read one by one took 2.2 s even
# over loopback. Also boto3's connection pool, so no reader waits for a connection.
S3_SCAN_READERS = 16

# --- the lane's provider calls (L2, L7) --------------------------------------------------------
# Between two reads of a GCE zone operation, and of the bucket while waiting for a boot marker
# or a status change; several reads per log sync, so a watcher never lags a sync by much.
LANE_POLL_S = 5.0
# A start or setMetadata operation that is not DONE within this is reported unavailable.
GCE_OPERATION_TIMEOUT_S = 300.0

# --- unclear creates and the owner of every box (M12, M13) ----------------------------------
# An unclear create's second look-up by label waits this long, and each next one twice as
# long (race.RECONCILE_ATTEMPTS in all): the provider's list can miss a box made seconds ago.
RECONCILE_BACKOFF_S = 5.0
# Whoever owns a rental's boxes (its guardian, or sweep) ends every one of them within this of
# the rental's deadline, wherever any process died: the bound M13 promises. It holds the
# skew allowance below, so a sweep on a host whose clock runs behind the renter's still ends
# the box within this plus the real skew (M17).
OWNER_GRACE_S = 900.0
# `boxes` and `budget` project spend this far ahead: "the next 24 h" at the live boxes' prices.
BUDGET_PROJECTION_S = 86400.0
# The most two hosts' wall clocks may disagree that gpuops allows for (M17): a deadline written
# on another host's clock is enforced here only this much after it, so no host ends another's
# box early; a box whose guardian died bills at most OWNER_GRACE_S + the real skew past it.
CLOCK_SKEW_S = 900.0
# Every box also destroys itself (M14), on its own clock, this long after the rental's deadline:
# after its owner's bound (OWNER_GRACE_S) even with the box's clock CLOCK_SKEW_S ahead of the
# renter's, so it never cuts short an owner still ending the box or copying its results.
BOX_CEILING_GRACE_S = 1800.0
# Once past that, the box asks Vast to destroy it again this often, until it is gone.
BOX_CEILING_POLL_S = 60.0
# An unclear create whose box no look-up by label has found this long after its intent was
# written is recorded as never created, loudly (M13): long past any list lag, and judged on
# another host's clock still at least OWNER_GRACE_S after it (it holds CLOCK_SKEW_S). A box
# that turns up with its label later is still ended by sweep.
UNCLEAR_CREATE_WINDOW_S = 1800.0
# A rent that is racing for a name says so this often, so that a second `rent NAME` waits for
# its box instead of racing too (M8)...
RACER_HEARTBEAT_S = 5.0
# ...and a racer whose heartbeat stood still this long, on the waiter's own clock, is dead:
# the waiter takes over. Longer than one ssh probe step, with room for a slow store write.
RACER_TTL_S = 90.0
