"""Jobs under tmux and the watchdog's judgment (M10): the pure verdicts, the recorded observe
output (H1, recordings/jobs), and the scripts run for real with /bin/sh against a private tmux.

Dead is a fact (the session is gone, or an exit code was recorded); stalled is a judgment (no
log progress for STALL_THRESHOLD_S by the box's own clock); unknown when tmux is missing or the
box cannot be asked. The real tests give each box its own HOME and TMUX_TMPDIR and kill that
tmux server when they end.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuops import timing
from gpuops.errors import UsageError
from gpuops.market import watchdog as w
from gpuops.market.watchdog import JobState, Observation, Status

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings" / "jobs"
STALL = int(timing.STALL_THRESHOLD_S)
NOW = 1_796_014_604  # a box clock reading (epoch seconds) from the recordings
SH = "/bin/sh"
# the tools observe_script needs besides tmux, for a box without it
TOOLS = ("sh", "date", "head", "wc", "stat", "tail", "tr", "cut")


def text(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def running(**fields: object) -> Observation:
    """A running job's observation, ``fields`` replaced."""
    base: dict[str, object] = dict(
        tmux=True, session=True, box_now=NOW, log_bytes=21, log_mtime=NOW, last_line="epoch 1"
    )
    base.update(fields)
    return Observation(**base)  # type: ignore[arg-type]


# --- names, constants, Status ----------------------------------------------------------------
def test_the_scripts_exit_codes_are_distinct_and_documented():
    """M10: start exits 17 when the job already runs, 18 without tmux; results 19 without a dir."""
    assert (w.ALREADY_RUNNING, w.NO_TMUX, w.NO_RESULTS) == (17, 18, 19)
    assert (w.JOBS_DIR, w.DEFAULT_RESULTS) == ("gpuops", "results")


def test_a_job_lives_in_its_own_session_and_directory_under_home():
    """M10: the session is gpuops-NAME and the directory "$HOME/gpuops/NAME", a shell word."""
    assert w.session_name("train-1") == "gpuops-train-1"
    assert w.job_dir("train-1") == '"$HOME/gpuops/train-1"'


def test_the_job_states_have_their_documented_values():
    """M10: running, dead, stalled, unknown and "no job" are the states the watcher reports."""
    assert [s.value for s in JobState] == ["running", "dead", "stalled", "unknown", "no job"]


def test_only_a_dead_job_with_exit_code_0_succeeded():
    """M10: success is a dead job whose own exit status is 0; nothing else counts."""
    assert Status(JobState.DEAD, "", 0).succeeded
    assert not Status(JobState.DEAD, "", 3).succeeded
    assert not Status(JobState.DEAD, "").succeeded
    assert not Status(JobState.RUNNING, "", 0).succeeded
    assert Status(JobState.DEAD, "").exit_code is None


# --- check_results -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path", ["results", "out/run-1", "a.b_c-D9", ".", "results/", "x" * 255, "a/..b", "..."]
)
def test_a_relative_plain_results_path_is_accepted_as_given(path):
    """M5: results are a plain path relative to the job directory; it comes back unchanged."""
    assert w.check_results(path) == path


@pytest.mark.parametrize(
    "path",
    [
        *("", "/abs", "-rf", "..", "../up", "a/../b", "a/..", "x" * 256),
        *("a b", "a;b", "r\n", "~/x", "é"),
    ],
)
def test_an_absolute_odd_or_escaping_results_path_is_refused_with_the_rule_stated(path):
    """M5: absolute, option-like, '..' or odd characters are a UsageError that says the rule."""
    with pytest.raises(UsageError) as caught:
        w.check_results(path)

    assert str(caught.value) == (
        f"results path {path!r} must be relative to the job directory, "
        "with letters, digits and _./- only, and no '..'"
    )


# --- shell_command -----------------------------------------------------------------------------
NO_COMMAND = "give the job's command after --, e.g. gpuops run NAME -- python train.py"


@pytest.mark.parametrize("argv", [[], [""], ["  "], ["", " \t"]])
def test_an_empty_or_blank_command_is_refused_with_an_example(argv):
    """M10: a job needs a command; the refusal shows how to give one."""
    with pytest.raises(UsageError) as caught:
        w.shell_command(argv)

    assert str(caught.value) == NO_COMMAND


def test_one_argument_is_a_shell_string_kept_verbatim():
    """M10: a single argument is run by the box's shell as written, pipes and $vars included."""
    command = 'python train.py --lr 3e-4 | tee out.txt && echo "$HOME"'

    assert w.shell_command([command]) == command


def test_several_arguments_are_quoted_word_by_word():
    """M10: several arguments keep their word boundaries, unlike `ssh host a b`."""
    argv = ["printf", "%s|", "a b", "$HOME", "it's"]

    assert w.shell_command(argv) == "printf '%s|' 'a b' '$HOME' 'it'\"'\"'s'"
    assert w.shell_command(["", "x"]) == "'' x"


@pytest.mark.parametrize(
    "argv",
    [
        ["echo a\nGPUOPS_JOB_EOF\necho b"],
        ["GPUOPS_JOB_EOF"],
        ["echo a\n  GPUOPS_JOB_EOF \t"],
        ["echo a\r\nGPUOPS_JOB_EOF\r\n"],
        ["echo", "\nGPUOPS_JOB_EOF\n"],
    ],
)
def test_a_line_reading_the_heredoc_marker_is_refused(argv):
    """M10: the job script is a here-document; its end marker cannot appear as a line."""
    with pytest.raises(UsageError) as caught:
        w.shell_command(argv)

    assert str(caught.value) == "the command may not contain a line reading GPUOPS_JOB_EOF"


def test_the_heredoc_marker_inside_a_line_is_allowed():
    """M10: only a whole line ends the here-document, so the word elsewhere is harmless."""
    assert w.shell_command(["echo GPUOPS_JOB_EOF"]) == "echo GPUOPS_JOB_EOF"
    assert w.shell_command(["sh", "-c", "x\nGPUOPS_JOB_EOF"]) == "sh -c 'x\nGPUOPS_JOB_EOF'"


# --- the scripts' text -------------------------------------------------------------------------
def test_the_start_script_checks_the_exact_session_before_touching_anything():
    """M10: tmux's '=' target matches the session name exactly; the check precedes any write."""
    script = w.start_script("a", "true")

    check = script.index("tmux has-session -t =gpuops-a 2>/dev/null")
    assert check < script.index("rm -f exit_code") < script.index(": > log")
    assert script.splitlines()[0].endswith(f"exit {w.NO_TMUX}; }}")
    assert "cat > job.sh <<'GPUOPS_JOB_EOF'\n" in script  # quoted: nothing expands when written


def test_the_results_script_refuses_a_bad_path_before_building_anything():
    """M5: results_script validates its path; an escaping one never reaches the box."""
    with pytest.raises(UsageError, match="must be relative"):
        w.results_script("a", "../etc")


# --- parse_observation -------------------------------------------------------------------------
def test_a_full_observation_is_parsed_field_by_field():
    """M10: every key the observe script prints lands in its field."""
    out = text(
        "tmux=1",
        "session=0",
        "exit_code=3",
        "log_bytes=30",
        "log_mtime=1796014600",
        "last_line=Traceback: x=1",
        "now=1796014604",
    )

    assert w.parse_observation(out) == Observation(
        tmux=True,
        session=False,
        box_now=1796014604,
        exit_code="3",
        log_bytes=30,
        log_mtime=1796014600,
        last_line="Traceback: x=1",
    )


def test_the_optional_keys_default_to_none_and_an_empty_last_line():
    """M10: no exit code and no log yet are absent lines, not errors."""
    obs = w.parse_observation(text("tmux=0", "session=0", "now=5"))

    assert obs == Observation(tmux=False, session=False, box_now=5)
    assert (obs.exit_code, obs.log_bytes, obs.log_mtime, obs.last_line) == (None, None, None, "")


@pytest.mark.parametrize("missing", ["tmux", "session", "now"])
def test_a_missing_required_line_is_a_usage_error_naming_it(missing):
    """M10: never a guess: without tmux, session or now the observation is refused by name."""
    lines = [line for line in ("tmux=1", "session=1", "now=5") if not line.startswith(missing)]
    out = text(*lines)

    with pytest.raises(UsageError) as caught:
        w.parse_observation(out)

    assert str(caught.value) == f"the job's status has no {missing!r} line: {out!r}"


def test_the_missing_line_error_quotes_only_the_last_200_characters():
    """M10: a huge answer is quoted by its tail, enough to see what the box said."""
    out = "x" * 500 + "\ntmux=1\nsession=1\n"

    with pytest.raises(UsageError) as caught:
        w.parse_observation(out)

    assert str(caught.value) == f"the job's status has no 'now' line: {out[-200:]!r}"


def test_the_first_missing_required_line_is_the_one_named():
    """M10: empty output names tmux, the first required line."""
    with pytest.raises(UsageError, match=r"^the job's status has no 'tmux' line: ''$"):
        w.parse_observation("")


@pytest.mark.parametrize("key", ["tmux", "session"])
@pytest.mark.parametrize("value", ["2", "yes", "true", "", "01", "-1"])
def test_a_flag_other_than_0_or_1_is_refused(key, value):
    """M10: tmux and session are 0 or 1; anything else is malformed, named with its value."""
    lines = {"tmux": "tmux=1", "session": "session=1"}
    lines[key] = f"{key}={value}"

    with pytest.raises(UsageError) as caught:
        w.parse_observation(text(lines["tmux"], lines["session"], "now=5"))

    assert str(caught.value) == f"the job's status line {key}={value!r} is not 0 or 1"


@pytest.mark.parametrize("key", ["now", "log_bytes", "log_mtime"])
@pytest.mark.parametrize("value", ["abc", "", "1.5", "12 s", "\ufffd"])
def test_a_number_that_is_not_an_integer_is_refused(key, value):
    """M10: now, log_bytes and log_mtime are integers; anything else is malformed, by name."""
    lines = ["tmux=1", "session=1", f"{key}={value}"] + ([] if key == "now" else ["now=5"])

    with pytest.raises(UsageError) as caught:
        w.parse_observation(text(*lines))

    assert str(caught.value) == f"the job's status line {key}={value.strip()!r} is not a number"


def test_the_first_of_duplicate_keys_wins():
    """M10: a repeated key never overrides the first, so a later line cannot rewrite a fact."""
    out = text(
        "tmux=1",
        "tmux=0",
        "session=1",
        "session=0",
        "log_bytes=1",
        "log_bytes=2",
        "log_mtime=3",
        "log_mtime=4",
        "last_line=first",
        "last_line=second",
        "exit_code=0",
        "exit_code=1",
        "now=5",
        "now=6",
    )

    assert w.parse_observation(out) == Observation(True, True, 5, "0", 1, 3, "first")


def test_a_malformed_duplicate_after_a_good_line_is_ignored():
    """M10: first wins before validation: a later bad repeat does not make the line malformed."""
    obs = w.parse_observation(text("tmux=1", "session=1", "now=5", "now=soon", "tmux=maybe"))

    assert (obs.tmux, obs.box_now) == (True, 5)


def test_unknown_keys_lines_without_equals_and_indented_keys_are_ignored():
    """M10: only the script's own keys count; stray text (motd, warnings) is skipped."""
    out = text(
        "Welcome to Ubuntu 22.04",
        "tmux",
        " now=99",
        "TMUX=0",
        "uptime=3",
        "tmux=1",
        "session=1",
        "now=7",
    )

    assert w.parse_observation(out) == Observation(True, True, 7)


def test_values_are_stripped_but_the_last_line_is_kept_exactly():
    """M10: padding (BSD wc pads its count) is stripped; the log's last line is quoted as is."""
    out = text(
        "tmux= 1 ",
        "session=1",
        "log_bytes=      42",
        "log_mtime= 9",
        "last_line=  x = y  ",
        "now=10",
    )

    obs = w.parse_observation(out)

    assert (obs.tmux, obs.log_bytes, obs.log_mtime, obs.box_now) == (True, 42, 9, 10)
    assert obs.last_line == "  x = y  "


def test_the_exit_code_value_is_kept_as_text_stripped():
    """M10: the exit code file's content is judged later; parsing only strips it."""
    obs = w.parse_observation(text("tmux=1", "session=0", "exit_code= 137 ", "now=5"))

    assert obs.exit_code == "137"


def test_crlf_line_endings_parse_like_lf():
    """M10: a shell or terminal that ends lines with CRLF gives the same observation."""
    lf = text("tmux=1", "session=1", "log_bytes=3", "log_mtime=4", "last_line=loss 0.5", "now=5")

    assert w.parse_observation(lf.replace("\n", "\r\n")) == w.parse_observation(lf)
    assert w.parse_observation(lf.replace("\n", "\r\n")).last_line == "loss 0.5"


def test_replacement_characters_from_undecodable_log_bytes_pass_through():
    """M10: ssh output decoded with errors='replace' keeps U+FFFD in the last line, no error."""
    raw = b"tmux=1\nsession=1\nlog_bytes=5\nlog_mtime=4\nlast_line=caf\xe9 \xff\nnow=5\n"

    obs = w.parse_observation(raw.decode("utf-8", errors="replace"))

    assert obs.last_line == "caf\ufffd \ufffd"
    assert w.judge(obs).detail == "running; log 5 bytes: 'caf\ufffd \ufffd'"


@pytest.mark.parametrize("sep", ["\f", "\v", "\x1c", "\x85", "\u2028"])
def test_a_log_line_cannot_forge_an_exit_code_through_a_unicode_line_break(sep):
    """M10: only a newline ends one of the script's lines; the last line is one value."""
    out = text("tmux=1", "session=1", "log_bytes=9", "log_mtime=5", f"last_line=a{sep}exit_code=0")
    out += "now=5\n"

    obs = w.parse_observation(out)

    assert obs.exit_code is None and obs.last_line == f"a{sep}exit_code=0"


# --- judge -------------------------------------------------------------------------------------
def test_without_tmux_the_job_is_unknown_never_dead():
    """M10: a box without tmux cannot be asked about the session: unknown, not dead."""
    status = w.judge(Observation(tmux=False, session=False, box_now=NOW))

    assert status == Status(JobState.UNKNOWN, "tmux is not installed on the box")
    assert w.watch_exit_code(status) == 5


def test_a_recorded_exit_code_is_a_fact_even_without_tmux():
    """M10: the exit code file outranks every other signal: tmux vanishing changes nothing."""
    status = w.judge(running(tmux=False, session=False, exit_code="0"))

    assert status == Status(JobState.DEAD, "succeeded with exit code 0", 0)
    assert w.judge(running(tmux=False, session=False)) == Status(
        JobState.UNKNOWN, "tmux is not installed on the box"
    )


def test_an_exit_code_of_0_is_a_job_that_succeeded():
    """M10: a recorded exit code is a fact: dead, and 0 is success (watch exits 0)."""
    status = w.judge(running(session=False, exit_code="0"))

    assert status == Status(JobState.DEAD, "succeeded with exit code 0", 0)
    assert status.succeeded and w.watch_exit_code(status) == 0


@pytest.mark.parametrize("code", ["1", "3", "137", "255", "-1"])
def test_a_nonzero_exit_code_is_a_job_that_failed(code):
    """M10: a recorded non-zero exit code is dead and failed (watch exits 6)."""
    status = w.judge(running(session=False, exit_code=code))

    assert status == Status(JobState.DEAD, f"failed with exit code {int(code)}", int(code))
    assert not status.succeeded and w.watch_exit_code(status) == 6


def test_an_exit_code_wins_over_a_live_session():
    """M10: the code is written before the session closes, so a live session with a code is dead."""
    status = w.judge(running(session=True, exit_code="0", log_mtime=NOW - 10 * STALL))

    assert status == Status(JobState.DEAD, "succeeded with exit code 0", 0)


@pytest.mark.parametrize("content", ["", "abc", "1.0", "0 0"])
def test_an_unreadable_exit_code_is_still_dead_and_not_a_success(content):
    """M10: an exit code file is a fact even when its content is not a number; watch exits 6."""
    status = w.judge(running(session=False, exit_code=content))

    assert status == Status(JobState.DEAD, f"ended; its exit code file holds {content!r}")
    assert status.exit_code is None and w.watch_exit_code(status) == 6


@pytest.mark.fault(
    "a job killed without an exit code",
    handled="dead is a fact: watch exits 6 (M10)",
)
def test_a_gone_session_without_an_exit_code_is_dead_killed_or_rebooted():
    """M10: the session gone with no exit code is a fact: dead, and not a success."""
    status = w.judge(running(session=False, log_mtime=NOW - 10 * STALL))

    assert status == Status(
        JobState.DEAD,
        "the tmux session is gone and no exit code was recorded (killed, or the box rebooted)",
    )
    assert w.watch_exit_code(status) == 6


@pytest.mark.fault(
    "watch on a box where no job was started called it dead",
    handled='"no job was ever started", exit 5, nothing acted on (M10)',
)
def test_a_box_where_no_job_was_ever_started_says_so_and_exits_5():
    """M10: no session, no exit code and no log: nothing was started; not dead, not 6."""
    never = running(session=False, log_bytes=None, log_mtime=None, last_line="")

    status = w.judge(never, started=False)

    assert w.judge(never).state is JobState.DEAD  # a recorded start whose traces are gone
    assert w.judge(running(session=False), started=False).state is JobState.DEAD
    assert w.judge(running(log_mtime=None), started=False).state is JobState.RUNNING
    assert status == Status(
        JobState.NO_JOB, "no job was ever started on this box (gpuops run NAME -- CMD)"
    )
    assert w.watch_exit_code(status) == 5


def test_only_a_dead_job_or_no_job_settles_a_watch():
    """M10: watching longer cannot change dead or "no job"; every other state is watched on."""
    settled = {state for state in JobState if w.settled(Status(state, ""))}

    assert settled == {JobState.DEAD, JobState.NO_JOB}


def test_a_live_session_without_a_log_is_running():
    """M10: no log yet is not a stall: the job was just started."""
    status = w.judge(running(log_bytes=None, log_mtime=None, last_line=""))

    assert status == Status(JobState.RUNNING, "running; no log yet")
    assert w.watch_exit_code(status) == 5


def test_quiet_exactly_the_threshold_is_stalled_and_alert_only():
    """M10: no log progress for STALL_THRESHOLD_S by the box's own clock is stalled."""
    status = w.judge(running(log_mtime=NOW - STALL, last_line="epoch 3"))

    assert status == Status(
        JobState.STALLED,
        f"no log progress for {STALL} s (alert only; the box is left alone): 'epoch 3'",
    )
    assert status.exit_code is None and w.watch_exit_code(status) == 5


@pytest.mark.parametrize("quiet", [STALL, STALL + 1, 10 * STALL])
def test_a_quiet_log_is_stalled_and_never_dead(quiet):
    """M10: stalled is a judgment: however long the log is quiet, a live session is never dead,
    and watch keeps it open (exit 5), never a failure (6)."""
    status = w.judge(running(log_mtime=NOW - quiet))

    assert status.state is JobState.STALLED and status.exit_code is None
    assert status.detail.startswith(f"no log progress for {quiet} s (alert only;")
    assert w.watch_exit_code(status) == 5


def test_quiet_one_second_less_than_the_threshold_is_running():
    """M10: the boundary: one second short of STALL_THRESHOLD_S is still running."""
    status = w.judge(running(log_mtime=NOW - STALL + 1, log_bytes=21, last_line="epoch 3"))

    assert status == Status(JobState.RUNNING, "running; log 21 bytes: 'epoch 3'")


def test_staleness_is_measured_on_the_box_clock_not_ours():
    """M10: box_now - log_mtime decides; a box clock far from ours changes nothing."""
    far = 1_000_000_000  # a box whose clock is years behind ours
    assert w.judge(running(box_now=far, log_mtime=far - STALL)).state is JobState.STALLED
    assert w.judge(running(box_now=far, log_mtime=far - STALL + 1)).state is JobState.RUNNING


def test_a_log_newer_than_the_box_clock_is_running():
    """M10: a log touched into the future is progress, never a stall."""
    assert w.judge(running(log_mtime=NOW + STALL)).state is JobState.RUNNING


def test_the_last_line_is_quoted_with_repr_in_the_message():
    """M10: a user sees the last line quoted, control characters escaped."""
    status = w.judge(running(last_line="it's\tdone", log_bytes=0))

    assert status.detail == 'running; log 0 bytes: "it\'s\\tdone"'


def test_an_unreachable_box_is_unknown_never_dead():
    """M10/L9: a box that cannot be asked is unknown; watch exits 5, not 6."""
    status = w.unreachable("ssh: connect to host 1.2.3.4 port 22: Connection timed out")

    assert status == Status(
        JobState.UNKNOWN,
        "cannot reach the box: ssh: connect to host 1.2.3.4 port 22: Connection timed out",
    )
    assert w.watch_exit_code(status) == 5


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (Status(JobState.DEAD, "", 0), 0),
        (Status(JobState.DEAD, "", 1), 6),
        (Status(JobState.DEAD, "", None), 6),
        (Status(JobState.RUNNING, ""), 5),
        (Status(JobState.STALLED, ""), 5),
        (Status(JobState.UNKNOWN, ""), 5),
        (Status(JobState.RUNNING, "", 0), 5),
    ],
)
def test_watch_exits_0_for_success_6_for_other_deaths_and_5_while_open(status, code):
    """M10: 0 a job that succeeded, 6 a dead job otherwise, 5 anything still open."""
    assert w.watch_exit_code(status) == code


@given(
    tmux=st.booleans(),
    session=st.booleans(),
    exit_code=st.none() | st.sampled_from(["0", "1", "x"]),
    quiet=st.none() | st.integers(-STALL, 3 * STALL),
)
def test_dead_is_exactly_a_fact_and_stalled_exactly_the_judgment(tmux, session, exit_code, quiet):
    """M10: dead iff an exit code, or tmux answered with no session; stalled iff quiet enough."""
    obs = running(
        tmux=tmux,
        session=session,
        exit_code=exit_code,
        log_mtime=None if quiet is None else NOW - quiet,
    )
    state = w.judge(obs).state

    assert (state is JobState.UNKNOWN) == (not tmux and exit_code is None)
    assert (state is JobState.DEAD) == (exit_code is not None or (tmux and not session))
    stalled = tmux and session and exit_code is None and quiet is not None and quiet >= STALL
    assert (state is JobState.STALLED) == stalled


@given(
    obs=st.builds(
        Observation,
        tmux=st.booleans(),
        session=st.booleans(),
        box_now=st.integers(0, 2**40),
        exit_code=st.none() | st.from_regex(r"[0-9]{1,3}", fullmatch=True),
        log_bytes=st.none() | st.integers(0, 2**40),
        log_mtime=st.none() | st.integers(0, 2**40),
        last_line=st.text(
            st.characters(blacklist_categories=["Cs", "Zl", "Zp", "Cc"]), max_size=40
        ),
    )
)
def test_an_observation_printed_as_the_script_prints_it_parses_back(obs):
    """M10: key=value lines in the script's order round-trip to the same observation."""
    lines = [f"tmux={int(obs.tmux)}", f"session={int(obs.session)}"]
    if obs.exit_code is not None:
        lines.append(f"exit_code={obs.exit_code}")
    if obs.log_bytes is not None:
        lines.append(f"log_bytes={obs.log_bytes}")
    if obs.log_mtime is not None:
        lines.append(f"log_mtime={obs.log_mtime}")
    lines += [f"last_line={obs.last_line}", f"now={obs.box_now}"]

    assert w.parse_observation(text(*lines)) == obs


# --- the recordings (H1) -----------------------------------------------------------------------
def recording(name: str) -> dict[str, object]:
    loaded = yaml.safe_load((RECORDINGS / f"{name}.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


RECORDED = sorted(p.stem for p in RECORDINGS.glob("*.yaml"))


def test_there_is_a_recording_for_every_state():
    """H1: running, stalled, dead and unknown are each shown on real observe output."""
    assert len(RECORDED) >= 6
    # "no job" is judged from our own record (no start recorded), not from the box's output
    judged_by_the_box = {s.value for s in JobState} - {JobState.NO_JOB.value}
    assert {recording(name)["expect"] for name in RECORDED} == judged_by_the_box


@pytest.mark.parametrize("name", RECORDED)
def test_every_job_recording_carries_honest_provenance(name):
    """H1/H3: kind, source, date and notes on every file; captured ones say they are local."""
    raw = (RECORDINGS / f"{name}.yaml").read_text()
    rec = recording(name)
    provenance = rec["provenance"]

    assert isinstance(provenance, dict)
    assert provenance["kind"] in {"captured", "public", "reconstructed"}
    assert len(provenance["source"]) > 10 and "observe_script" in provenance["source"]
    assert str(provenance["date"]) == "2026-11-30"
    assert "not on a Vast box" in provenance["notes"] and "tmux 3.3a" in provenance["notes"]
    assert "PRIVATE KEY" not in raw and "api_key" not in raw.lower()


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_observation_is_judged_as_it_says(name):
    """H1/M10: the captured observe output parses, and judge gives the state the file names."""
    rec = recording(name)
    stdout = rec["stdout"]
    assert isinstance(stdout, str) and rec["exit_code"] == 0 and rec["stderr"] == ""

    status = w.judge(w.parse_observation(stdout))

    assert status.state.value == rec["expect"], status.detail
    assert w.watch_exit_code(status) == rec["watch_exit"]


def test_the_recorded_states_give_the_messages_users_see():
    """H1/M10: each captured state's message, as `gpuops watch` prints it."""

    def detail(name: str) -> str:
        stdout = recording(name)["stdout"]
        assert isinstance(stdout, str)
        return w.judge(w.parse_observation(stdout)).detail

    assert detail("observe-running") == "running; log 21 bytes: 'epoch 1/3 loss=0.912'"
    assert detail("observe-stalled") == (
        f"no log progress for {STALL} s (alert only; the box is left alone): 'epoch 2/3 loss=0.871'"
    )
    assert detail("observe-dead-succeeded") == "succeeded with exit code 0"
    assert detail("observe-dead-failed") == "failed with exit code 3"
    assert detail("observe-session-gone") == (
        "the tmux session is gone and no exit code was recorded (killed, or the box rebooted)"
    )
    assert detail("observe-no-tmux") == "tmux is not installed on the box"


def test_the_recorded_stall_sits_exactly_on_the_threshold():
    """H1/M10: the stalled capture's log is STALL_THRESHOLD_S old by the box's clock."""
    stdout = recording("observe-stalled")["stdout"]
    assert isinstance(stdout, str)
    obs = w.parse_observation(stdout)

    assert obs.session and obs.exit_code is None
    assert obs.log_mtime is not None and obs.box_now - obs.log_mtime == STALL


# --- the scripts, for real: /bin/sh and a private tmux -----------------------------------------
class Box:
    """A stand-in box: its own HOME and tmux socket directory; scripts run with /bin/sh."""

    def __init__(self, home: Path, sockets: Path) -> None:
        self.home = home
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "TMUX_TMPDIR": str(sockets),
            "LANG": "C.UTF-8",
        }

    def sh(self, script: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """Run ``script`` as ssh would hand it to the box's shell; output decoded as ssh.py does."""
        proc = subprocess.run(
            [SH, "-c", script],
            env=env or self.env,
            cwd=self.home,
            capture_output=True,
            timeout=timing.SSH_COMMAND_TIMEOUT_S,
        )
        return (
            proc.returncode,
            proc.stdout.decode("utf-8", errors="replace"),
            proc.stderr.decode("utf-8", errors="replace"),
        )

    def tmux(self, *args: str) -> int:
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True).returncode

    def start(self, name: str, command: str) -> None:
        code, out, err = self.sh(w.start_script(name, command))
        assert (code, out, err) == (0, f"started in {self.dir(name)}\n", ""), (code, out, err)

    def look(self, name: str) -> Observation:
        code, out, err = self.sh(w.observe_script(name))
        assert (code, err) == (0, ""), (code, out, err)
        keys = [line.partition("=")[0] for line in out.rstrip("\n").split("\n")]
        assert set(keys) <= set(w._KEYS) and len(keys) == len(set(keys)), out
        return w.parse_observation(out)

    def dir(self, name: str) -> Path:
        return self.home / "gpuops" / name

    def log(self, name: str) -> str:
        return (self.dir(name) / "log").read_text()

    def until(self, ready: Callable[[], bool], never: Callable[[], bool] = lambda: False) -> None:
        """Poll ``ready`` for at most GUARD_SPAWN_WAIT_S (the job runs in tmux, detached); fail
        at once when ``never`` says it can no longer happen (the job's session has closed)."""
        deadline, never_seen = time.monotonic() + timing.GUARD_SPAWN_WAIT_S, 0
        while not ready():
            never_seen = never_seen + 1 if never() and not ready() else 0
            assert never_seen < 2, "the job ended without getting there"  # two looks in a row
            assert time.monotonic() < deadline, "the job did not get there in time"
            time.sleep(timing.GUARD_SPAWN_POLL_S)

    def closed(self, name: str) -> bool:
        return self.tmux("has-session", "-t", f"=gpuops-{name}") != 0

    def ended(self, name: str) -> Observation:
        """Wait until the job recorded its exit code and its session closed. The wrapper writes
        the code before its shell exits, so a closed session without one will never have it."""
        code = self.dir(name) / "exit_code"
        self.until(lambda: code.exists() and self.closed(name), never=lambda: self.closed(name))
        return self.look(name)

    def logged(self, name: str, needle: str) -> None:
        log = self.dir(name) / "log"
        self.until(
            lambda: log.exists() and needle in self.log(name), never=lambda: self.closed(name)
        )

    def keep(self) -> None:
        """Hold the tmux server up with a session of its own, so that one job ending (the last
        session closing) never races the next start into a server that is exiting."""
        assert self.tmux("new-session", "-d", "-s", "keep", "cat") == 0

    def answer(self, name: str, line: str) -> None:
        """Type ``line`` into the job's terminal: a job waiting on `read` goes on."""
        assert self.tmux("send-keys", "-t", f"=gpuops-{name}:", line, "Enter") == 0


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    """A box in tmp_path with a short private TMUX_TMPDIR; its tmux server dies afterwards."""
    home = tmp_path / "home"
    home.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))  # a unix socket path is short
    made = Box(home, sockets)
    try:
        yield made
    finally:
        subprocess.run(["tmux", "kill-server"], env=made.env, capture_output=True)
        shutil.rmtree(sockets, ignore_errors=True)


def without_tmux(box: Box, tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has the tools the scripts use, but no tmux."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (*TOOLS, "mkdir", "cat", "rm", "mv", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    return {**box.env, "PATH": str(bin_dir)}


def test_a_job_that_succeeds_is_dead_with_exit_code_0_and_its_output_logged(box):
    """M10: a real job ends: its exit code 0 is recorded and its session closes."""
    box.start("ok", "echo 'saved results/model.pt'")

    obs = box.ended("ok")

    assert (obs.tmux, obs.session, obs.exit_code) == (True, False, "0")
    assert obs.last_line == "saved results/model.pt" and obs.log_bytes == 23
    assert w.judge(obs) == Status(JobState.DEAD, "succeeded with exit code 0", 0)
    assert (box.dir("ok") / "exit_code").read_text() == "0\n"
    assert not (box.dir("ok") / "exit_code.partial").exists()


def test_a_job_that_exits_3_is_dead_and_failed_with_its_stderr_logged(box):
    """M10: the job's own exit status is recorded; stderr goes to the log as well."""
    box.start("bad", "echo 'CUDA out of memory' >&2; exit 3")

    status = w.judge(box.ended("bad"))

    assert status == Status(JobState.DEAD, "failed with exit code 3", 3)
    assert w.watch_exit_code(status) == 6
    assert box.log("bad") == "CUDA out of memory\n"


def test_a_running_job_is_running_and_finishes_when_it_can(box):
    """M10: a job waiting on input is running with its log's last line; then it ends."""
    box.start("run", "echo 'epoch 1'; read x; echo \"got $x\"")
    box.logged("run", "epoch 1")

    obs = box.look("run")

    assert (obs.tmux, obs.session, obs.exit_code, obs.log_bytes) == (True, True, None, 8)
    assert obs.log_mtime is not None and abs(obs.box_now - obs.log_mtime) < STALL
    assert w.judge(obs) == Status(JobState.RUNNING, "running; log 8 bytes: 'epoch 1'")

    box.answer("run", "hello")

    assert w.judge(box.ended("run")).succeeded
    assert box.log("run") == "epoch 1\ngot hello\n"


@pytest.mark.fault(
    "a quiet job mistaken for a dead one",
    handled="stalled is a judgment: alert only, the box is left alone (M10)",
)
def test_a_quiet_real_job_is_stalled_by_the_box_clock_and_left_running(box):
    """M10: log mtime STALL_THRESHOLD_S behind the box's now is stalled; the job is not touched."""
    box.start("quiet", "echo 'epoch 2'; read x")
    box.logged("quiet", "epoch 2")
    now = box.look("quiet").box_now
    os.utime(box.dir("quiet") / "log", (now - STALL, now - STALL))

    status = w.judge(box.look("quiet"))

    assert status.state is JobState.STALLED and status.detail.endswith(": 'epoch 2'")
    assert box.tmux("has-session", "-t", "=gpuops-quiet") == 0


def test_a_job_whose_session_is_killed_is_dead_without_an_exit_code(box):
    """M10: the session gone and no exit code recorded (killed, rebooted) is dead, not success."""
    box.start("gone", "echo 'epoch 1'; read x")
    box.logged("gone", "epoch 1")

    assert box.tmux("kill-session", "-t", "=gpuops-gone") == 0
    obs = box.look("gone")

    assert (obs.session, obs.exit_code) == (False, None)
    status = w.judge(obs)
    assert status.state is JobState.DEAD and status.exit_code is None
    assert w.watch_exit_code(status) == 6


def test_starting_a_running_job_again_is_refused_and_leaves_it_alone(box):
    """M10: a second start while the session exists exits ALREADY_RUNNING and changes nothing."""
    box.start("twice", "echo 'epoch 1'; read x")
    box.logged("twice", "epoch 1")
    script = (box.dir("twice") / "job.sh").read_text()

    code, out, err = box.sh(w.start_script("twice", "echo other"))

    assert (code, out) == (w.ALREADY_RUNNING, "")
    assert err == "gpuops: the job is already running in tmux session gpuops-twice\n"
    assert (box.dir("twice") / "job.sh").read_text() == script
    assert box.log("twice") == "epoch 1\n"
    assert box.look("twice").session


def test_a_restarted_job_forgets_the_previous_runs_exit_code_and_log(box):
    """M10: starting again after a job ended clears its exit code and log before it runs."""
    box.keep()
    box.start("again", "echo first; exit 3")
    assert box.ended("again").exit_code == "3"

    box.start("again", "echo second; read x")
    box.logged("again", "second")

    obs = box.look("again")
    assert (obs.session, obs.exit_code) == (True, None)
    assert box.log("again") == "second\n"


def test_the_session_check_is_exact_so_a_longer_name_is_another_job(box):
    """M10: job 'a' is not running because 'ab' is; tmux's '=' target matches exactly."""
    box.start("ab", "echo 'epoch 1'; read x")
    box.logged("ab", "epoch 1")

    assert not box.look("a").session
    box.start("a", "echo 'mine'")
    assert w.judge(box.ended("a")).succeeded


def test_quotes_variables_and_newlines_reach_the_job_intact(box):
    """M10: the command runs as written: quotes kept, $vars expanded on the box, lines kept."""
    command = (
        "printf '%s\\n' \"it's\" '$HOME' \"$((6 * 7))\" `echo tick` # a comment\n"
        'echo "$HOME" "two  words"\n'
        "echo done"
    )
    box.start("quote", w.shell_command([command]))
    box.ended("quote")

    assert box.log("quote") == f"it's\n$HOME\n42\ntick\n{box.home} two  words\ndone\n"


def test_an_argv_command_keeps_each_word_on_the_box(box):
    """M10: several arguments arrive as the same words, none expanded by the box's shell."""
    box.start("argv", w.shell_command(["printf", "%s|", "a b", "$HOME", "it's", ""]))
    box.ended("argv")

    assert box.log("argv") == "a b|$HOME|it's||"


def test_the_job_script_runs_in_its_own_directory_wherever_it_is_started(box, tmp_path):
    """M10: job.sh changes to the job directory itself, so relative paths land there."""
    box.start("here", "pwd; echo x > made.txt")
    box.ended("here")
    (box.dir("here") / "made.txt").unlink()

    subprocess.run([SH, str(box.dir("here") / "job.sh")], env=box.env, cwd=tmp_path, check=True)

    assert (box.dir("here") / "made.txt").read_text() == "x\n"
    assert box.log("here") == f"{box.dir('here')}\n{box.dir('here')}\n"


def test_the_last_line_is_the_newest_progress_and_is_cut_at_200_characters(box):
    """M10: CRLF never reaches the parser, a progress bar shows its newest state, a long line
    is cut to 200, and a binary log still gives a line."""
    box.keep()
    box.start("cr", "printf 'loss 0.5\\r\\n'")
    box.start("bar", "printf '10%%\\r50%%\\r99%%\\n'")
    box.start("long", "printf '%0300d\\n' 7")
    for name in ("cr", "bar", "long"):
        box.ended(name)

    assert box.look("cr").last_line == "loss 0.5"
    assert box.look("bar").last_line == "99%"
    assert box.look("long").last_line == "0" * 200


def test_an_undecodable_log_line_comes_back_with_replacement_characters(box):
    """M10: Latin-1 bytes in the log are decoded with errors='replace' and judged normally."""
    box.start("latin", "printf 'caf\\351\\n'")

    obs = box.ended("latin")

    assert obs.last_line == "caf\ufffd"
    assert w.judge(obs).succeeded


def test_an_exit_code_file_is_read_at_most_64_bytes(box):
    """M10: a huge exit code file cannot flood the observation: its first 64 bytes are read."""
    box.start("huge", "true")
    box.ended("huge")
    (box.dir("huge") / "exit_code").write_text("9" * 100)

    obs = box.look("huge")

    assert obs.exit_code == "9" * 64
    assert w.judge(obs).exit_code == int("9" * 64)


def test_a_job_never_started_has_no_session_and_is_dead(box):
    """M10: no directory and no session (e.g. a rebooted box lost it) is a dead job."""
    obs = box.look("never")

    assert obs == Observation(tmux=True, session=False, box_now=obs.box_now)
    assert w.judge(obs).state is JobState.DEAD


def test_without_tmux_the_start_exits_no_tmux_and_observe_says_unknown(box, tmp_path):
    """M10: a box without tmux refuses the start (exit 18) and its job is unknown, not dead."""
    env = without_tmux(box, tmp_path)

    code, out, err = box.sh(w.start_script("nt", "echo hi"), env)

    assert (code, out, err) == (w.NO_TMUX, "", "gpuops: tmux is not installed\n")
    assert not box.dir("nt").exists()
    code, out, err = box.sh(w.observe_script("nt"), env)
    assert (code, err) == (0, "")
    assert w.judge(w.parse_observation(out)) == Status(
        JobState.UNKNOWN, "tmux is not installed on the box"
    )


def test_the_results_directory_streams_as_an_extractable_tarball(box, tmp_path):
    """M5: results_script writes the results as a gzipped tar on stdout, relative to the dir."""
    box.start("res", "mkdir -p results/sub && echo w > results/model.pt && echo b > results/sub/b")
    box.ended("res")

    proc = subprocess.run(
        [SH, "-c", w.results_script("res", w.DEFAULT_RESULTS)], env=box.env, capture_output=True
    )

    assert (proc.returncode, proc.stderr) == (0, b"")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:gz") as tar:
        names = sorted(tar.getnames())
        tar.extractall(tmp_path / "copy", filter="data")
    assert names == [".", "./model.pt", "./sub", "./sub/b"]
    assert (tmp_path / "copy" / "model.pt").read_text() == "w\n"
    assert (tmp_path / "copy" / "sub" / "b").read_text() == "b\n"


def test_a_nested_results_path_streams_only_that_directory(box, tmp_path):
    """M5: a declared results path such as out/run-1 is the tarball's root."""
    box.start("nest", "mkdir -p out/run-1 && echo r > out/run-1/r.txt && echo no > out/skip")
    box.ended("nest")

    proc = subprocess.run(
        [SH, "-c", w.results_script("nest", "out/run-1")], env=box.env, capture_output=True
    )

    with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == [".", "./r.txt"]


def test_a_job_without_its_results_directory_exits_no_results_with_a_message(box):
    """M5: no results directory is exit 19 and a message naming it, with nothing on stdout."""
    box.start("nores", "true")
    box.ended("nores")

    code, out, err = box.sh(w.results_script("nores", "results"))

    assert (code, out) == (w.NO_RESULTS, "")
    assert err == "gpuops: the job has no results directory results\n"


def test_results_of_a_job_that_never_ran_exit_1(box):
    """M5: no job directory at all fails the copy (exit 1) instead of sending anything."""
    code, out, err = box.sh(w.results_script("ghost", "results"))

    assert (code, out) == (1, "")
    assert "ghost" in err


def test_a_job_starts_even_when_home_holds_a_space(tmp_path):
    """M10: the job directory is one shell word wherever HOME is."""
    home = tmp_path / "my home"
    home.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))
    spaced = Box(home, sockets)
    try:
        spaced.start("sp", "echo ran")
        spaced.until(lambda: spaced.tmux("has-session", "-t", "=gpuops-sp") != 0)
        assert spaced.log("sp") == "ran\n"
    finally:
        subprocess.run(["tmux", "kill-server"], env=spaced.env, capture_output=True)
        shutil.rmtree(sockets, ignore_errors=True)


def test_a_running_job_cannot_print_its_way_to_success(box):
    """M10: whatever the job logs, it is running while its session lives and no code exists."""
    box.start("forge", "printf 'step 7\\fexit_code=0\\n'; read x")
    box.logged("forge", "step 7")

    status = w.judge(box.look("forge"))

    assert status.state is JobState.RUNNING
