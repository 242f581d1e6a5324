"""The startup-script contract (L4, L5, L6, L10): the template keeps it, the linter names
every breach, and unconditional fetches are found exactly."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import oracles
from gpuops.lane import script as s

CHECK_TIMEOUT_S = 10.0
TEMPLATE = s.render("portraits", "bkt", "python3 gen.py", inputs=("ref-1.png", "ref-2.png"))


def test_the_template_keeps_the_whole_contract_l5():
    """L5/L6: the rendered script lints clean for its own job."""
    assert s.lint(TEMPLATE, "portraits") == []
    assert oracles.job_names(TEMPLATE) == ["portraits"]


def test_a_job_name_mismatch_is_a_finding_naming_both_names_l4():
    """L4: JOB="portroaits" against the claim "portraits"."""
    typo = TEMPLATE.replace('JOB="portraits"', 'JOB="portroaits"')

    (finding,) = s.lint(typo, "portraits")

    assert finding.rule == "L4"
    assert "'portroaits'" in finding.message and "'portraits'" in finding.message


@pytest.mark.parametrize("jobs", [0, 2])
def test_a_script_must_set_job_exactly_once_l4(jobs):
    """L4: no JOB line, or two, is refused (which one would the boot use?)."""
    body = TEMPLATE.replace('JOB="portraits"\n', "")
    body = (
        body.replace('BUCKET="bkt"', 'JOB="portraits"\nJOB="portraits"\nBUCKET="bkt"')
        if jobs
        else body
    )

    findings = s.lint(body, "portraits")

    assert [f.rule for f in findings] == ["L4"]
    assert f"not {jobs} times" in findings[0].message


@pytest.mark.parametrize(
    "remove, rule, words",
    [
        ("boot_marker\n", "L5", "boot marker"),
        ("sync_log_every 30 &\n", "L5", "log synced every 30 s"),
        ("trap on_exit EXIT\n", "L5", "final log upload"),
        ("preflight_imports torch\n", "L6", "import gate"),
        ("disk_gate 20\n", "L6", "disk-capacity gate"),
        ("poweroff\n", "L12", "power-off"),
    ],
)
@pytest.mark.fault(
    "a job that dies early leaves no evidence",
    handled="the linter refuses a script without boot marker, 30 s log sync, status file and final upload (L5)",
)
def test_each_missing_piece_of_the_contract_is_named_l5(remove, rule, words):
    """L5/L6: removing one required line yields a finding that names it."""
    body = (
        TEMPLATE.replace(remove, "", 1)
        if remove != "boot_marker\n"
        else TEMPLATE.replace("\nboot_marker\n", "\n")
    )

    findings = s.lint(body, "portraits")

    assert any(f.rule == rule and words in f.message for f in findings), findings


def test_a_log_sync_slower_than_thirty_seconds_is_a_breach_l5():
    """L5: the seed's 30 s sync, not 300."""
    body = TEMPLATE.replace("sync_log_every 30 &", "sync_log_every 300 &")

    assert any("every 30 s" in f.message for f in s.lint(body, "portraits"))


def test_final_log_without_the_rest_fallback_is_a_breach_l5():
    """L5: gsutil alone is not enough; the REST fallback must follow it."""
    body = TEMPLATE.replace(" || upload_rest ", " ; ")

    assert any("REST fallback" in f.message for f in s.lint(body, "portraits"))


def test_other_stage_lines_are_required_l5():
    """L5: a script that never writes its stage is a breach."""
    body = "\n".join(line for line in TEMPLATE.splitlines() if not line.startswith("stage "))

    assert any("status file" in f.message for f in s.lint(body, "portraits"))


def test_work_before_the_gates_is_a_breach_l6():
    """L6: the job step must come after the boot marker and both gates."""
    body = TEMPLATE.replace("run_job ||", "RUNJOB_PLACEHOLDER ||").replace(
        "boot_marker\nstage preflight", "run_job\nboot_marker\nstage preflight"
    )

    assert any("before run_job" in f.message for f in s.lint(body, "portraits"))


def test_a_script_without_a_job_step_is_a_breach_l6():
    """L6: no run_job at all is named, not silently accepted."""
    body = TEMPLATE.replace("run_job ||", "true ||")

    assert any("run_job" in f.message for f in s.lint(body, "portraits"))


def test_unconditional_fetches_are_the_top_level_ones_without_a_fallback_l10():
    """L10: fetches in conditionals, loops, functions or with `|| true` are not unconditional;
    a loop over a literal list runs its body on every path, so c.png is."""
    body = "\n".join(
        [
            "fetch_input a.png",
            "if [ -n x ]; then",
            "  fetch_input b.png",
            "fi",
            "for f in 1; do fetch_input c.png; done",
            "while false; do",
            "fetch_input d.png",
            "done",
            "fetch_input e.png || true",
            "helper() {",
            "  fetch_input f.png",
            "}",
            "one() { fetch_input g.png; }",
            "case x in",
            "  y) fetch_input h.png ;;",
            "esac",
            "fetch_input i.png  # a comment",
        ]
    )

    assert s.unconditional_fetches(body) == ["a.png", "c.png", "i.png"]


def test_missing_inputs_are_the_unconditional_fetches_nobody_staged_l10():
    """L10: staged names are compared with the script's unconditional fetches."""
    assert s.missing_inputs(TEMPLATE, ["ref-2.png", "other"]) == ["ref-1.png"]
    assert s.missing_inputs(TEMPLATE, ["ref-1.png", "ref-2.png"]) == []


def test_the_template_fetches_exactly_the_inputs_it_was_given():
    """L10: render -> fetch lines -> unconditional_fetches is the identity on inputs."""
    assert s.unconditional_fetches(TEMPLATE) == ["ref-1.png", "ref-2.png"]
    assert s.unconditional_fetches(s.render("j", "b", "true")) == []


def test_the_template_is_valid_bash_l5():
    """L5: `bash -n` parses the rendered script (nothing is executed)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash on this machine")

    done = subprocess.run(
        [bash, "-n"], input=TEMPLATE, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
    )

    assert done.returncode == 0, done.stderr


def test_a_missing_gate_is_one_finding_not_also_a_missing_job_step_l6():
    """L6: a script without its boot marker is told exactly that, nothing more."""
    body = TEMPLATE.replace("\nboot_marker\n", "\n")

    assert s.lint(body, "portraits") == [
        s.Finding("L5", "missing a boot marker written first (boot_marker)")
    ]


def test_order_findings_name_rule_l6_and_say_what_is_wrong_l6():
    """L6: the exact findings for a missing job step and for work before the gates."""
    no_job = TEMPLATE.replace("run_job ||", "true ||")
    early = TEMPLATE.replace("run_job ||", "true ||").replace(
        "boot_marker\nstage preflight", "run_job\nboot_marker\nstage preflight"
    )

    assert s.lint(no_job, "portraits") == [s.Finding("L6", "missing the job step (run_job)")]
    assert s.lint(early, "portraits") == [
        s.Finding(
            "L6",
            "the EXIT trap, the boot marker and both gates must come before run_job, in order",
        )
    ]


@pytest.mark.parametrize(
    "body, fetched",
    [
        ("outer() {\ninner() {\n}\nfetch_input x\n}\nfetch_input y", ["y"]),
        ("helper() {\n  echo hi\n  fetch_input f.png\n}\nfetch_input y", ["y"]),
        ("if a; then\nif b; then\nfi\nfetch_input x\nfi\nfetch_input y", ["y"]),
        ("for a in $b; do # x; done # y\nfetch_input z\ndone\nfetch_input y", ["y"]),
        ("if x; then  # ; fi\nfetch_input a\nfi\nfetch_input y", ["y"]),
        ("one() { fetch_input g.png; }   \nfetch_input y", ["y"]),
    ],
)
def test_nesting_and_comments_never_make_a_guarded_fetch_unconditional_l10(body, fetched):
    """L10: nested functions and conditionals, comments holding keywords, trailing spaces."""
    assert s.unconditional_fetches(body) == fetched


def test_render_fills_every_field_and_defaults_the_disk_gate_to_twenty_gb():
    """The template names the bucket, the command, the gates; no inputs is said so."""
    body = s.render("j", "the-bucket", "python3 train.py --fast")

    assert 'BUCKET="the-bucket"' in body
    assert "run_job() { ( python3 train.py --fast ) >>" in body
    assert "\ndisk_gate 20\n" in body and "\npreflight_imports torch\n" in body
    assert "\n# (no staged inputs)\n" in body


@pytest.mark.parametrize(
    "line, fetched",
    [
        ('gsutil -q cp "$PREFIX/inputs/x.png" "$WORK/inputs/"', "x.png"),
        ("gcloud storage cp gs://$BUCKET/jobs/$JOB/inputs/x.png .", "x.png"),
        ('curl -sf "https://storage.googleapis.com/b/jobs/j/inputs/x.png" -o x', "x.png"),
        ('X=$(gsutil cat "$PREFIX/inputs/x.png")', "x.png"),
        ('python3 gen.py --ref "$WORK/inputs/x.png"', "x.png"),
        ("if true; then fetch_input x.png; fi", "x.png"),
        ("if [ 1 ]; then fetch_input x.png; fi", "x.png"),
        ("if false; then :; else fetch_input x.png; fi", "x.png"),
        ("while :; do fetch_input x.png; break; done", "x.png"),
        ("true && fetch_input x.png", "x.png"),
        ('grab() { gsutil cp "$PREFIX/inputs/$1" .; }\ngrab x.png', "x.png"),
    ],
)
def test_every_walk_around_of_the_fetch_check_is_still_a_fetch_l10(line, fetched):
    """L10: any read of inputs/ by any command is a fetch, and a constant test is no condition."""
    body = TEMPLATE.replace("stage running\n", f"{line}\nstage running\n")

    assert fetched in s.unconditional_fetches(body)
    assert s.missing_inputs(body, ["ref-1.png", "ref-2.png"]) == [fetched]


@pytest.mark.parametrize(
    "line",
    [
        'if [ -n "$REF" ]; then fetch_input x.png; fi',
        "fetch_input x.png || echo optional",
        "for f in $LIST; do fetch_input x.png; done",
        "while false; do fetch_input x.png; done",
        "false && fetch_input x.png",
    ],
)
def test_a_fetch_that_may_not_run_is_not_unconditional_l10(line):
    """L10: a real condition, a fallback, a loop over an expansion, a dead branch."""
    body = TEMPLATE.replace("stage running\n", f"{line}\nstage running\n")

    assert "x.png" not in s.unconditional_fetches(body)


@pytest.mark.parametrize(
    "line",
    ["export JOB=trainn", "export JOB", "JOB=portraits", "declare JOB=portraits", "read JOB"],
)
def test_job_assigned_or_exported_a_second_time_is_refused_l4(line):
    """L4: `JOB="train"` then `export JOB=trainn` (or any second assignment) is a breach."""
    body = TEMPLATE.replace('BUCKET="bkt"\n', f'BUCKET="bkt"\n{line}\n')

    findings = s.lint(body, "portraits")

    assert [f.rule for f in findings] == ["L4"] and "not 2 times" in findings[0].message


def test_a_job_name_built_from_an_expansion_is_refused_l4():
    """L4: JOB="$NAME" cannot be compared with the claim, so it is refused."""
    body = TEMPLATE.replace('JOB="portraits"', 'JOB="$NAME"')

    assert s.lint(body, "portraits") == [
        s.Finding("L4", "the script's JOB must be a literal name, not an expansion")
    ]


@pytest.mark.parametrize(
    "change",
    [
        ("  poweroff\n", "  if [ -n \"$X\" ]; then poweroff; fi\n"),
        ("  poweroff\n", ""),
        ("trap on_exit EXIT\n", "trap on_exit TERM\n"),
        ("  final_log\n  poweroff\n", "  final_log\n"),
    ],
)
def test_a_power_off_must_be_reachable_on_every_path_from_the_exit_trap_l12(change):
    """L12: a poweroff line somewhere is not enough; the EXIT trap must reach it always."""
    body = TEMPLATE.replace(*change)

    found = s.lint(body, "portraits")

    assert any(
        (f.rule, f.message)
        in (
            ("L12", "missing a power-off reachable on every path from the EXIT trap"),
            ("L5", "missing a final log upload on exit (trap on_exit EXIT)"),
        )
        for f in found
    ), found


def test_a_power_off_at_the_end_of_the_script_is_not_reached_by_a_failure_l12():
    """L12: the issue's template: poweroff at the bottom, the EXIT trap only uploading."""
    body = TEMPLATE.replace("  poweroff\n}", "}") + "poweroff\n"

    assert s.Finding(
        "L12", "missing a power-off reachable on every path from the EXIT trap"
    ) in s.lint(body, "portraits")


@pytest.mark.parametrize("halt", ["shutdown -h now", "shutdown -P now", "systemctl poweroff"])
def test_other_spellings_of_a_power_off_count_l12(halt):
    """L12: shutdown -h now and systemctl poweroff power the VM off too."""
    assert s.lint(TEMPLATE.replace("  poweroff\n", f"  {halt}\n"), "portraits") == []


def test_a_script_that_does_not_parse_is_refused_not_guessed_l5():
    """L5: a syntax error means the linter cannot know what runs: refused."""
    (finding,) = s.lint(TEMPLATE + "if then fi (\n", "portraits")

    assert finding.rule == "L5" and "cannot be parsed" in finding.message


@pytest.mark.parametrize(
    "old, new, finding",
    [
        ("sync_log_every 30 &\n", "", ("L5", "missing the log synced every 30 s (sync_log_every 30 &)")),
        ("stage ", "echo ", ("L5", "missing a status file with the current stage (stage ...)")),
        ("trap on_exit EXIT\n", "", ("L5", "missing a final log upload on exit (trap on_exit EXIT)")),
        (" || upload_rest ", " ; ", ("L5", "missing a gsutil-to-REST fallback with retries in the EXIT trap")),
        ("preflight_imports torch\n", "preflight_imports\n", ("L6", "missing an import gate before work (preflight_imports NAME...)")),
        ("disk_gate 20\n", "disk_gate many\n", ("L6", "missing a disk-capacity gate before work (disk_gate GB)")),
    ],
)
def test_each_breach_is_one_exact_finding(old, new, finding):
    """L5/L6: the rule and the words of each finding, exactly (what `install` prints)."""
    body = TEMPLATE.replace(old, new) if old != "stage " else "\n".join(
        line.replace("stage ", "echo ", 1) if line.startswith("stage ") else line
        for line in TEMPLATE.splitlines()
    )

    assert s.lint(body, "portraits") == [s.Finding(*finding)]


@pytest.mark.parametrize(
    "halt, halts",
    [
        ("/sbin/poweroff", True),
        ("/usr/sbin/poweroff", True),
        ("/sbin/shutdown -h now", True),
        ("/usr/sbin/shutdown now", True),
        ("shutdown now", True),
        ("shutdown -h -r now", False),
        ("shutdown -r now", False),
        ("shutdown -c", False),
        ("shutdown", False),
        ("systemctl poweroff -i", True),
        ("systemctl reboot", False),
        ("echo poweroff", False),
    ],
)
def test_what_counts_as_a_power_off_l12(halt, halts):
    """L12: the spellings that power a VM off, and the ones that do not (reboot, cancel)."""
    body = TEMPLATE.replace("  poweroff\n", f"  {halt}\n")
    breach = s.Finding("L12", "missing a power-off reachable on every path from the EXIT trap")

    assert (breach not in s.lint(body, "portraits")) is halts


@pytest.mark.parametrize(
    "line, names, finding",
    [
        ("export JOB", ["?"], "the script's JOB must be a literal name, not an expansion"),
        ("read JOB", ["?"], "the script's JOB must be a literal name, not an expansion"),
        ("declare JOB=portraits", ["portraits"], None),
        ("export JOB=portraits", ["portraits"], None),
        ("JOB=`cat name`", ["`cat name`"], "the script's JOB must be a literal name, not an expansion"),
        ("readonly JOB=other", ["other"], "the script's JOB='other' is not the claimed job 'portraits'"),
    ],
)
def test_every_way_of_setting_job_is_read_exactly_once_l4(line, names, finding):
    """L4: export, read, declare, readonly and a backtick substitution all set JOB."""
    body = TEMPLATE.replace('JOB="portraits"\n', f"{line}\n")

    assert oracles.job_names(body) == names
    expected = [] if finding is None else [s.Finding("L4", finding)]
    assert [f for f in s.lint(body, "portraits") if f.rule == "L4"] == expected


@pytest.mark.parametrize(
    "trap, ok",
    [
        ("trap on_exit 0", True),
        ("trap on_exit TERM EXIT", True),
        ("trap on_exit", False),
        ("trap -- on_exit TERM", False),
    ],
)
def test_the_exit_trap_is_found_by_its_signal_list_l5(trap, ok):
    """L5: EXIT or 0 anywhere in the trap's signal list; a trap without it is no exit trap."""
    body = TEMPLATE.replace("trap on_exit EXIT\n", f"{trap}\n")

    assert (s.lint(body, "portraits") == []) is ok


def test_a_trap_for_another_signal_before_the_exit_trap_does_not_count_as_it_l6():
    """L6: the order check looks at the EXIT trap, not the first trap."""
    late = TEMPLATE.replace("trap on_exit EXIT\n", "").replace(
        "stage uploading\n", "trap on_exit EXIT\nstage uploading\n"
    )

    assert s.lint(late, "portraits") == [
        s.Finding(
            "L6",
            "the EXIT trap, the boot marker and both gates must come before run_job, in order",
        )
    ]


@pytest.mark.parametrize(
    "body, fetched",
    [
        ("grab() { gsutil cp gs://b/inputs/$2 .; }\ngrab x y", ["y"]),
        ("grab() { gsutil cp gs://b/inputs/$0 .; }\ngrab x", ["$0"]),
        ("grab() { gsutil cp gs://b/inputs/$3 .; }\ngrab x", ["$3"]),
        ("fetch_input a b", ["a"]),
        ("cp inputs/a/inputs/b .", ["a/inputs/b"]),
        ('X="$(cat inputs/a)$(cat inputs/b)"', ["a", "b"]),
        ("one() { cat inputs/a; cat inputs/b; }\none", ["a", "b"]),
        ("one() { cat inputs/a & }\none", []),
        ("one() { two $1; }\ntwo() { cat inputs/$1; }\none z", ["z"]),
        ("loop() { cat inputs/a; loop; }\nloop", ["a"]),
        ("one() { [ -n \"$X\" ] && cat inputs/a; }\none", []),
    ],
)
def test_function_reads_are_followed_with_their_arguments_l10(body, fetched):
    """L10: positional arguments by number, every read in a body, recursion ends."""
    assert s.unconditional_fetches(body) == fetched


@pytest.mark.parametrize(
    "text, hours",
    [("#!/bin/bash\n# gpuops: max-hours 2.5\n", 2.5), ("# gpuops: max-hours 3\n", 3.0),
     ("#!/bin/bash\n", None), ("# gpuops: max-hours soon\n", None)],
)
def test_the_declared_length_is_read_from_its_one_line(text, hours):
    """The job's declared length, for the provider-native ceiling; none when absent."""
    assert s.declared_hours(text) == hours


def test_render_writes_each_field_where_the_contract_reads_it():
    """render: JOB, the imports, one fetch line per input, the declared length as line two."""
    body = s.render("j", "b", "c", imports=("a", "b"), inputs=("x", "y"), max_hours=2)
    plain = s.render("j", "b", "c").splitlines()

    assert body.splitlines()[:2] == ["#!/bin/bash", "# gpuops: max-hours 2"]
    assert '\nJOB="j"\n' in body and "\npreflight_imports a b\n" in body
    assert "\nfetch_input x\nfetch_input y\n" in body
    assert plain[1].startswith("# gpuops lane startup script") and s.declared_hours("\n".join(plain)) is None
    assert body.endswith("stage succeeded\n") and body.count("max-hours") == 1


def test_an_exit_that_is_not_a_trap_is_no_exit_trap_l5():
    """L5: `echo on_exit EXIT` names no handler; only `trap ... EXIT` does."""
    body = TEMPLATE.replace("trap on_exit EXIT\n", "echo on_exit EXIT\n")

    assert s.Finding("L5", "missing a final log upload on exit (trap on_exit EXIT)") in s.lint(
        body, "portraits"
    )


def test_a_fallback_needs_gsutil_first_l5():
    """L5: `cp ... || upload_rest` is not gsutil with a REST fallback."""
    body = TEMPLATE.replace("gsutil -q cp", "cp")

    assert s.Finding(
        "L5", "missing a gsutil-to-REST fallback with retries in the EXIT trap"
    ) in s.lint(body, "portraits")


def test_a_recursive_exit_handler_is_followed_once():
    """L12: a handler that calls itself is walked once, and its power-off still found."""
    body = TEMPLATE.replace("  poweroff\n}", "  poweroff\n  on_exit\n}")

    assert s.lint(body, "portraits") == []


@pytest.mark.parametrize(
    "body, fetched",
    [
        ("grab() { X=$(cat inputs/$1); }\ngrab a", ["a"]),
        ("one() { cat inputs/a; }\nX=$(one)", ["a"]),
        ("f() { fetch_input $1; }\nf a", ["a"]),
    ],
)
def test_reads_in_substitutions_and_fetches_inside_functions_take_the_calls_arguments_l10(
    body, fetched
):
    """L10: `$1` inside a substitution or a fetch_input in a function is the call's argument."""
    assert s.unconditional_fetches(body) == fetched


def test_a_positional_read_at_top_level_is_returned_as_written_l10():
    """L10: `$1` outside any function names no staged input: it can never match one."""
    assert s.unconditional_fetches("cat inputs/$1") == ["$1"]


def test_a_script_without_the_checked_results_upload_is_refused_l9():
    """L9: the old unchecked loop (`put` failures dropped, no manifest) is a finding."""
    loop = 'for f in "$WORK"/results/*; do [ -e "$f" ] && put "$f" "results/$(basename "$f")"; done\n'
    body = TEMPLATE.replace("upload_results\nstage succeeded", loop + "stage succeeded")

    assert s.lint(body, "portraits") == [
        s.Finding("L9", "missing the checked results upload and manifest (upload_results)")
    ]


_FAIL = 'fail() { stage failed "$1"; exit 1; }'


@pytest.mark.parametrize(
    "old, new, words",
    [
        (_FAIL, 'fail() { stage failed "$1"; trap - EXIT; exit 1; }', "`trap - EXIT` in function fail removes the EXIT trap"),
        (_FAIL, 'fail() { stage failed "$1"; trap "" EXIT; exit 1; }', "`trap '' EXIT` in function fail removes the EXIT trap"),
        (_FAIL, 'fail() { stage failed "$1"; trap -- EXIT; exit 1; }', "`trap -- EXIT` in function fail removes the EXIT trap"),
        (_FAIL, 'fail() { stage failed "$1"; trap "exit 1" 0; exit 1; }', "`trap exit 1 0` in function fail removes the EXIT trap"),
        (_FAIL, 'fail() { stage failed "$1"; exec sleep infinity; }', "`exec sleep infinity` in function fail replaces the shell"),
        (_FAIL, 'fail() { stage failed "$1"; kill -9 $$; }', "`kill -9 $$` in function fail kills or stops the shell"),
        (_FAIL, 'fail() { stage failed "$1"; kill -s KILL $$; }', "`kill -s KILL $$` in function fail kills or stops"),
        (_FAIL, 'fail() { stage failed "$1"; kill -SIGKILL -- -$$; }', "`kill -SIGKILL -- -$$` in function fail"),
        (_FAIL, 'fail() { stage failed "$1"; ( kill -KILL 0 ); }', "`kill -KILL 0` in function fail kills or stops"),
        (_FAIL, 'fail() { stage failed "$1"; kill -STOP $BASHPID; }', "`kill -STOP $BASHPID` in function fail"),
        ("stage succeeded\n", "stage succeeded\ntrap - EXIT\n", "`trap - EXIT` in the script removes the EXIT trap"),
        ("stage succeeded\n", "stage succeeded\nexec true\n", "`exec true` in the script replaces the shell"),
        ("stage running\n", "stage running\n[ -s x ] || exec true\n", "`exec true` in the script replaces the shell"),
        ("trap 'fail", "trap 'trap - EXIT; exit 1' USR1\ntrap 'fail", "`trap - EXIT` in the trap 'trap - EXIT; exit 1' removes"),
    ],
)
def test_a_path_that_leaves_without_the_exit_trap_is_refused_l12(old, new, words):
    """L12: a failure path that removes the EXIT trap, replaces the shell or kills it with a
    signal it cannot trap never powers off; the linter names the command and where it is."""
    body = TEMPLATE.replace(old, new, 1)
    assert body != TEMPLATE

    findings = s.lint(body, "portraits")

    assert [f.rule for f in findings] == ["L12"]
    assert words in findings[0].message and "without the power-off" in findings[0].message


@pytest.mark.parametrize(
    "old, new",
    [
        (_FAIL, 'fail() { stage failed "$1"; ( trap - EXIT; exec true ); exit 1; }'),
        (_FAIL, 'fail() { stage failed "$1"; echo "$(exec true)"; exit 1; }'),
        (_FAIL, 'fail() { stage failed "$1"; kill $$; }'),
        (_FAIL, 'fail() { stage failed "$1"; kill -0 $$; exit 1; }'),
        (_FAIL, 'fail() { stage failed "$1"; ( kill -9 $BASHPID ); exit 1; }'),
        (_FAIL, 'fail() { stage failed "$1"; trap -p EXIT; exit 1; }'),
        ("stage succeeded\n", 'stage succeeded\nexec >> "$LOG" 2>&1\n'),
        ('exec >> "$LOG" 2>&1\n', 'exec >> "$LOG" 2>&1\ntrap - EXIT\n'),
        ("gen.py", "gen.py; exec python3 more.py"),
    ],
)
def test_subshells_redirects_and_catchable_signals_keep_the_exit_trap_l12(old, new):
    """L12: `exec` with only redirects, anything in a subshell but `kill` of `$$`, a signal
    the script traps (TERM) and a reset before the trap is set all keep the power-off."""
    body = TEMPLATE.replace(old, new, 1)
    assert body != TEMPLATE

    assert s.lint(body, "portraits") == []


@pytest.mark.parametrize(
    "rescue",
    ['fail "no reference image"', "exit 1", "{ echo missing; exit 3; }", "die", "{ fail x; }"],
)
def test_a_top_level_fetch_whose_failure_ends_the_script_is_unconditional_l10(rescue):
    """L10: `cmd || fail` at top level needs its input as much as the same line in a
    function does: the job cannot run without it, so it must be staged."""
    line = f'gsutil -q cp "$PREFIX/inputs/ref-3.png" "$WORK/inputs/" || {rescue}'
    body = TEMPLATE.replace("stage running\n", f"die() {{ fail \"$1\"; }}\n{line}\nstage running\n")

    assert s.missing_inputs(body, ["ref-1.png", "ref-2.png"]) == ["ref-3.png"]


@pytest.mark.parametrize("rescue", ["true", 'echo "no ref-3: carrying on"', "stage running"])
def test_a_top_level_fetch_whose_failure_carries_on_is_optional_l10(rescue):
    """L10: a fetch whose `||` carries on is optional: nothing has to be staged for it."""
    line = f'gsutil -q cp "$PREFIX/inputs/ref-3.png" "$WORK/inputs/" || {rescue}'
    body = TEMPLATE.replace("stage running\n", f"{line}\nstage running\n")

    assert s.missing_inputs(body, ["ref-1.png", "ref-2.png"]) == []


@pytest.mark.parametrize(
    "kill, skips",
    [
        ("kill -9 $$", True),
        ("kill -KILL $$", True),
        ("kill -SIGKILL $$", True),
        ("kill -sigkill $$", True),
        ("kill -s KILL $$", True),
        ("kill -n 9 $$", True),
        ("kill -s STOP $$", True),
        ("kill -19 ${$}", True),
        ("kill -9 -- -$$", True),
        ("kill -9 0", True),
        ("kill -9 $BASHPID", True),
        ("kill -9 other $$", True),
        ("kill $$", False),
        ("kill -- -$$", False),
        ("kill -- -9 $$", False),
        ("kill -s", False),
        ("kill -s KILL", False),
        ("kill -9", False),
        ("kill -9 $PPID", False),
        ("kill -0 $$", False),
        ("kill -TERM $$", False),
        ("kill -HUP 0", False),
        ("kill", False),
    ],
)
def test_what_counts_as_killing_the_script_past_its_exit_trap_l12(kill, skips):
    """L12: only KILL or STOP (by name, number or -s/-n) sent to the script's own shell ($$,
    its group, 0, $BASHPID) leaves without the EXIT trap; after `--` every word is a target."""
    body = TEMPLATE.replace('fail() { stage failed "$1"; exit 1; }', f'fail() {{ stage failed "$1"; {kill}; exit 1; }}')

    findings = s.lint(body, "portraits")

    assert bool(findings) is skips
    assert all(f.rule == "L12" and "kills or stops the shell" in f.message for f in findings)


@pytest.mark.parametrize(
    "old, new, findings",
    [
        # a reset right after the trap is set, before the TERM trap: refused
        ("trap on_exit EXIT\n", "trap on_exit EXIT\ntrap - EXIT\n", 1),
        # a reset before the trap is set, after a command that merely mentions it: harmless
        ('exec >> "$LOG" 2>&1\n', 'exec >> "$LOG" 2>&1\necho on_exit EXIT\ntrap - EXIT\n', 0),
        # the handler set again, to itself, in a function: harmless
        (_FAIL, 'fail() { trap on_exit EXIT; stage failed "$1"; exit 1; }', 0),
        # a function nobody calls (a word of echo is not a call): harmless
        ("stage running\n", 'bad() { trap - EXIT; }\necho bad now\nstage running\n', 0),
        # ... but one a TERM trap's handler calls is reached
        ("stage running\n", "bad() { trap - EXIT; }\ntrap 'bad' USR2\nstage running\n", 1),
    ],
)
def test_only_commands_the_script_can_run_outside_its_exit_trap_count_l12(old, new, findings):
    """L12: where the trap is set, which traps' handlers run, and what is merely a word."""
    body = TEMPLATE.replace(old, new, 1)
    assert body != TEMPLATE

    assert len(s.lint(body, "portraits")) == findings


def test_a_recursive_rescue_that_never_exits_keeps_a_fetch_optional_l10():
    """L10: `cmd || retry` where retry only calls itself never ends the script: optional
    (and the walk through the recursion ends)."""
    line = 'gsutil -q cp "$PREFIX/inputs/ref-3.png" "$WORK/inputs/" || again'
    body = TEMPLATE.replace("stage running\n", f"again() {{ again; }}\n{line}\nstage running\n")

    assert s.missing_inputs(body, ["ref-1.png", "ref-2.png"]) == []


@pytest.mark.parametrize(
    "old, new, findings",
    [
        (_FAIL, 'fail() { stage failed "$1"; trap 0; exit 1; }', 1),  # `trap 0` resets EXIT
        (_FAIL, 'fail() { trap -- on_exit EXIT; stage failed "$1"; exit 1; }', 0),
        (_FAIL, 'fail() { trap -l EXIT; stage failed "$1"; exit 1; }', 0),  # lists, no change
        ("trap on_exit EXIT\n", "trap EXIT\ntrap on_exit EXIT\n", 0),  # reset, then set
        ("trap on_exit EXIT\n", "trap '' EXIT\ntrap on_exit EXIT\n", 0),  # ignored, then set
    ],
)
def test_each_spelling_of_trap_is_read_as_bash_reads_it_l12(old, new, findings):
    """L12: `trap 0` is EXIT; `--` ends the options; `-l` and `-p` change nothing; a reset or
    an ignore before the handler is set is not the handler."""
    body = TEMPLATE.replace(old, new, 1)
    assert body != TEMPLATE

    assert len(s.lint(body, "portraits")) == findings


def test_the_log_sync_is_forked_before_the_traps_so_it_never_runs_on_exit_l6():
    """L6: the status keeps the job's own reason. A background subshell forked after the EXIT
    trap holds it until it has run a little; killed in that moment (on_exit kills the sync
    right after a fast preflight failure), bash ran on_exit in it, which wrote "the script
    exited with status 0 before the job ended" over the real reason (seen under load). Forked
    before the traps, the sync never has them."""
    lines = TEMPLATE.splitlines()
    sync = lines.index("sync_log_every 30 &")
    assert lines[sync + 1] == "SYNC_PID=$!"
    assert sync < lines.index("trap on_exit EXIT")
    assert sync < next(i for i, line in enumerate(lines) if line.startswith("trap 'fail "))
