"""The startup script's parse (gpuops/lane/shell.py): every command with its words and when it
runs, which the linter's L4, L10 and L12 checks read. Pure: no process is started."""

from __future__ import annotations

import pytest

import oracles
from gpuops.lane import script as s
from gpuops.lane.shell import Command, constant, parse


def shape(command: Command) -> tuple:
    """A command as (words, conditional, guarded, background)."""
    return command.words, command.conditional, command.guarded, command.background


def top(text: str) -> list[tuple]:
    parsed = parse(text)
    assert parsed.error is None, parsed.error
    return [shape(c) for c in parsed.top]


def status(text: str) -> bool | None:
    """constant() of the script's one top-level command."""
    (command,) = parse(text).top
    return constant(command)


# --- constant tests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, known",
    [
        ("true", True),
        (":", True),
        ("/bin/true", True),
        ("/usr/bin/true", True),
        ("false", False),
        ("/bin/false", False),
        ("/usr/bin/false", False),
        ("true x", None),
        ("false x", None),
        ("echo", None),
        ('"$T"', None),
        ("X=1", None),
    ],
)
def test_the_constant_commands_are_known_and_nothing_else_is(text, known):
    """L10: true, :, false (and their paths) have a known status; any other command does not."""
    assert status(text) is known


@pytest.mark.parametrize(
    "text, known",
    [
        ("[ a ]", True),
        ('[ "" ]', False),
        ("[[ a ]]", True),
        ("[[ '' ]]", False),
        ("test a", True),
        ('test ""', False),
        ("[ a = a ]", True),
        ("[ a = b ]", False),
        ("[ a == a ]", True),
        ("[[ a == b ]]", False),
        ("test a = a", True),
        ("[ a != b ]", True),
        ("[ a != a ]", False),
        ("test a != a", False),
        ("[ a -lt b ]", None),
        ("test a = a b", None),
        ("[ -n a ]", None),
        ("test", None),
        ('[ "$X" ]', None),
        ('[ a = "$X" ]', None),
        ("echo a ]", None),
        ("echo a ]]", None),
        ("[[ a # a comment inside the test\n]]", True),
    ],
)
def test_a_test_of_literals_is_decided_and_a_test_of_an_expansion_is_not(text, known):
    """L10: `[ a = a ]` is constant, `[ "$X" ]` is a real condition, `echo a ]` is no test."""
    assert status(text) is known


@pytest.mark.parametrize(
    "text, known",
    [("! true", False), ("! false", True), ("! [ a = b ]", True), ("! echo", None)],
)
def test_a_negated_constant_has_the_opposite_status(text, known):
    """L10: `! false` is always true, so it is no condition either."""
    assert status(text) is known


def test_a_negated_pipeline_or_group_marks_each_of_its_commands():
    """`! ( a; b )` negates the subshell's status: both commands carry it; `!` twice cancels."""
    assert [c.negated for c in parse("! ( a; b ); c").top] == [True, True, False]
    assert status("! ( ! true )") is True
    assert [c.negated for c in parse("a; ! b").top] == [False, True]


# --- parse errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, byte",
    [
        ("(cat", 4),  # a missing ")"
        ("if true; then echo; ", 19),  # a missing "fi"
        ('echo "abc', 5),  # an error node
        ("a; b; ) c", 6),
        ("echo ok; (", 0),
    ],
)
def test_a_syntax_error_is_reported_at_its_first_byte_and_nothing_is_parsed(text, byte):
    """L5: a script that does not parse is an error naming where, with no commands."""
    parsed = parse(text)

    assert parsed.error == f"a syntax error near byte {byte}"
    assert parsed.top == [] and parsed.functions == {}


def test_a_clean_script_has_no_error():
    """A script that parses has error None (what lint reads)."""
    assert parse("echo ok\n").error is None


# --- words, quoting, positions --------------------------------------------------------------


def test_words_are_passed_as_the_shell_passes_them_with_their_expansions_marked():
    """Quotes are removed; a word holding $x, ${x}, $(..) or $((..)) is not literal."""
    (command,) = parse(
        """echo 'a b' "c d" e"f"'g' $x "$y" "a$y" ${z:-w} $((1+2)) "$(date)" "" 'q"r'"""
    ).top

    assert command.words == (
        "echo", "a b", "c d", "efg", "$x", "$y", "a$y", "${z:-w}", "$((1+2))", "$(date)", "",
        'q"r',
    )  # fmt: skip
    assert command.literal == (
        True, True, True, True, False, False, False, False, False, False, True, True,
    )  # fmt: skip


@pytest.mark.parametrize(
    "text, name", [('"fetch_input" x', "fetch_input"), ("'poweroff'", "poweroff"),
                   ('fetch_"input" x', "fetch_input")]
)  # fmt: skip
def test_a_quoted_command_name_is_the_command_it_names(text, name):
    """`"fetch_input" x` runs fetch_input: the quotes are no disguise."""
    assert parse(text).top[0].name == name


def test_each_command_records_the_byte_it_starts_at():
    """Positions order the contract's steps (L6)."""
    assert [c.pos for c in parse("a; bb\n  c x").top] == [0, 3, 8]


def test_a_command_without_words_has_an_empty_name():
    """A bare assignment has no command name."""
    assert parse("X=1").top[0].name == ""


# --- assignments and declarations (L4) ------------------------------------------------------


@pytest.mark.parametrize(
    "text, assignments",
    [
        ("X=1", ("X=1",)),
        ('X="a b"', ("X=a b",)),
        ("X='a'", ("X=a",)),
        ("X=", ("X=",)),
        ("X=$Y", ("X=$Y",)),
        ('X="$(cat f)"', ('X="$(cat f)"',)),
        ("A=1 B=2 cmd X=3", ("A=1", "B=2")),
    ],
)
def test_assignments_are_kept_literal_values_unquoted_expansions_as_written(text, assignments):
    """L4: `X="a b"` assigns `a b`; `X=$Y` is kept as written so it is seen as an expansion."""
    (command,) = parse(text).top

    assert command.assignments == assignments


def test_an_assignment_prefix_is_not_a_word_and_an_argument_is_not_an_assignment():
    """`A=1 cmd X=3`: A=1 is an assignment, X=3 an argument of cmd."""
    (command,) = parse("A=1 cmd X=3").top

    assert command.words == ("cmd", "X=3") and command.assignments == ("A=1",)


def test_several_bare_assignments_are_one_command_each():
    """`A=1 B=2` on one line assigns both (L4 counts each)."""
    assert [c.assignments for c in parse("A=1 B=2").top] == [("A=1",), ("B=2",)]


@pytest.mark.parametrize("declarer", ["export", "declare", "typeset", "readonly", "local"])
def test_each_declaring_command_keeps_its_name_and_its_assignments_as_words(declarer):
    """L4: `export JOB=a B` is the command export with the words JOB=a and B."""
    (command,) = parse(f"""{declarer} JOB=a B X=$Y Q="a b" R='c'""").top

    assert command.words == (declarer, "JOB=a", "B", "X=$Y", "Q=a b", "R=c")
    assert command.literal == (True, True, True, False, True, True)
    assert command.assignments == ()


def test_a_substitution_in_an_assignment_is_an_inner_command():
    """`X=$(cat inputs/a)` and `local x=$(y)` run the substituted command."""
    assigned, declared = parse("X=$(cat inputs/a)\nlocal x=$(y z)").top

    assert [c.words for c in assigned.inner] == [("cat", "inputs/a")]
    assert [c.words for c in declared.inner] == [("y", "z")]


# --- test commands --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, words, literal",
    [
        ('[ -n "$a" ]', ("[", "-n", "$a", "]"), (True, True, False, True)),
        ("[ a = b ]", ("[", "a", "=", "b", "]"), (True,) * 5),
        ("[[ a ]]", ("[[", "a", "]]"), (True,) * 3),
        ("[[ a # c\n]]", ("[[", "a", "]]"), (True,) * 3),
    ],
)
def test_a_test_command_is_its_brackets_and_operands(text, words, literal):
    """`[ -n "$a" ]` is the words [, -n, $a, ]; a comment inside `[[ ]]` is no word."""
    (command,) = parse(text).top

    assert (command.words, command.literal) == (words, literal)


# --- redirects ------------------------------------------------------------------------------


def test_an_input_redirect_is_a_read_of_its_file():
    """L10: `cat < inputs/x` reads inputs/x: the redirect is kept as the command `<` FILE."""
    assert top("cat < inputs/x") == [(("cat",), False, False, False),
                                     (("<", "inputs/x"), False, False, False)]  # fmt: skip
    (command,) = parse("< inputs/y cat").top
    assert command.words == ("cat",) and [c.words for c in command.inner] == [("<", "inputs/y")]


def test_an_input_redirect_records_its_position_and_whether_its_file_is_literal():
    """`< "$D/inputs/x"` is a read of an expansion, at the redirect's byte."""
    _, redirect = parse('cat < "$D/inputs/x"').top

    assert (redirect.words, redirect.literal, redirect.pos) == (("<", "$D/inputs/x"), (True, False), 4)


def test_output_redirects_are_neither_reads_nor_words():
    """`>o echo hi` passes echo the word hi; writing o reads nothing."""
    (command,) = parse(">o echo hi").top
    assert command.words == ("echo", "hi") and command.inner == ()
    assert top("echo hi > out 2>&1") == [(("echo", "hi"), False, False, False)]


def test_substitutions_in_redirects_and_heredocs_run():
    """A here-document's `$(...)` and a here-string's run their commands."""
    heredoc = "cat <<EOF\n$(cat inputs/j)\nEOF\n"
    (herestring,) = parse('cat <<< "$(cat inputs/k)"').top

    assert top(heredoc) == [(("cat",), False, False, False), (("cat", "inputs/j"), False, False, False)]
    assert herestring.words == ("cat",)
    assert [c.words for c in herestring.inner] == [("cat", "inputs/k")]


def test_a_redirect_of_a_loop_is_read_when_the_loop_runs():
    """`while read l; do ...; done < inputs/list` reads the list, but not inside a branch."""
    assert ("<", "inputs/list") in [c[0] for c in top("while read l; do :; done < inputs/list")]
    assert [c.conditional for c in parse("if x; then { a; } < inputs/list; fi").top] == [
        False, True, True
    ]  # fmt: skip


# --- substitutions --------------------------------------------------------------------------


def test_command_and_process_substitutions_are_inner_commands_in_order():
    """`echo $(a) <(b) "$(c $(d))"`: each substitution's commands, nested ones too."""
    (command,) = parse('echo $(a) <(b x) "$(c $(d))"').top

    assert [c.words[0] for c in command.inner] == ["a", "b", "c"]
    assert [c.words for c in command.inner[2].inner] == [("d",)]


def test_a_substitution_runs_when_its_command_runs():
    """`x && echo $(cat a)`: the cat is as conditional as the echo; `$(a &)` backgrounds a."""
    (_, echo) = parse("x && echo $(cat a)").top
    (plain,) = parse("echo $(a &)").top

    assert echo.inner[0].conditional is True
    assert plain.inner[0].background is True


# --- background -----------------------------------------------------------------------------


def test_an_ampersand_puts_the_statement_before_it_in_the_background():
    """`a & b`: only a; `{ c; d; } &` at the end: both."""
    assert [c.background for c in parse("a & b\n{ c; d; } &").top] == [True, False, True, True]
    assert [c.background for c in parse("a &").top] == [True]
    assert [c.background for c in parse("f() { a & b; }").functions["f"]] == [True, False]


# --- && and || ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a && b", [(("a",), False, False, False), (("b",), True, False, False)]),
        ("a || b", [(("a",), False, True, False), (("b",), True, False, False)]),
        ("true && b", [(("true",), False, False, False), (("b",), False, False, False)]),
        ("false || b", [(("false",), False, True, False), (("b",), False, False, False)]),
        ("false && b", [(("false",), False, False, False), (("b",), True, False, False)]),
        ("true || b", [(("true",), False, True, False), (("b",), True, False, False)]),
        ("! false && b", [(("false",), False, False, False), (("b",), False, False, False)]),
        ("! true || b", [(("true",), False, True, False), (("b",), False, False, False)]),
        ("true && true && b", [(("true",), False, False, False),
                               (("true",), False, False, False),
                               (("b",), False, False, False)]),
        ("a && b || c", [(("a",), False, False, False), (("b",), True, True, False),
                         (("c",), True, False, False)]),
        ("true | true && b", [(("true",), False, False, False), (("true",), False, False, False),
                              (("b",), True, False, False)]),
        ("a && true || c", [(("a",), False, False, False), (("true",), True, True, False),
                            (("c",), True, False, False)]),
        ("false || b && c", [(("false",), False, True, False), (("b",), False, False, False),
                             (("c",), True, False, False)]),
        ("a &&\n# a comment between\nb", [(("a",), False, False, False),
                                         (("b",), True, False, False)]),
    ],
)  # fmt: skip
def test_a_command_after_and_or_or_runs_on_every_path_only_after_a_constant(text, expected):
    """L10: `true && b` runs b always, `a && b` may not; a command before `||` is guarded."""
    assert top(text) == expected


def test_a_chain_inside_a_branch_stays_conditional():
    """`if x; then true && b; fi`: b runs only when x does."""
    assert top("if x; then true && b; fi")[-1] == (("b",), True, False, False)


# --- if ---------------------------------------------------------------------------------------


def conditional(text: str) -> dict[str, bool]:
    """Command name -> conditional, for scripts whose names are all different."""
    return {c.name: c.conditional for c in parse(text).top}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("if a; then b; fi", {"a": False, "b": True}),
        ("if true; then b; fi", {"true": False, "b": False}),
        ("if false; then b; else c; fi", {"false": False, "b": True, "c": False}),
        ("if a; then b; else c; fi", {"a": False, "b": True, "c": True}),
        ("if a; then b; elif c; then d; else e; fi",
         {"a": False, "b": True, "c": True, "d": True, "e": True}),
        ("if false; then b; elif c; then d; fi", {"false": False, "b": True, "c": False, "d": True}),
        ("if false; then b; elif true; then d; else e; fi",
         {"false": False, "b": True, "true": False, "d": False, "e": True}),
        ("if false; then b; elif [ a = b ]; then d; else e; fi",
         {"false": False, "b": True, "[": False, "d": True, "e": False}),
        ("if true; then b; elif c; then d; else e; fi",
         {"true": False, "b": False, "c": True, "d": True, "e": True}),
        ("if ! false; then b; fi", {"false": False, "b": False}),
        ("if a; then if true; then b; fi; fi", {"a": False, "true": True, "b": True}),
        ("x && if true; then b; fi", {"x": False, "true": True, "b": True}),
        ("x && if false; then b; else c; fi", {"x": False, "false": True, "b": True, "c": True}),
        ("if cat inputs/a; then b; fi", {"cat": False, "b": True}),
        ("if true\nthen\n  b\n  c\nfi", {"true": False, "b": False, "c": False}),
    ],
)  # fmt: skip
def test_a_branch_runs_on_every_path_only_when_its_tests_are_constant(text, expected):
    """L10: `if true` is no condition; an elif's test runs only when every test before it is
    constant false; `else` runs always only when every test is constant false."""
    assert conditional(text) == expected


def test_an_ampersand_inside_a_branch_puts_the_command_in_the_background():
    """`if true; then a & fi`: a runs in the background, in the then, elif and else bodies."""
    assert [c.background for c in parse("if true; then a & fi").top] == [False, True]
    text = "if false; then :; elif false; then b & c; else d & fi"
    assert [(c.name, c.background) for c in parse(text).top] == [
        ("false", False), (":", False), ("false", False), ("b", True), ("c", False), ("d", True)
    ]  # fmt: skip


# --- loops and case -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("while a; do b; done", {"a": False, "b": True}),
        ("while true; do b; done", {"true": False, "b": False}),
        ("while :; do b; done", {":": False, "b": False}),
        ("while false; do b; done", {"false": False, "b": True}),
        ("until false; do b; done", {"false": False, "b": False}),
        ("until true; do b; done", {"true": False, "b": True}),
        ("until a; do b; done", {"a": False, "b": True}),
        ("x && while true; do b; done", {"x": False, "true": True, "b": True}),
        ("for f in a b; do c; done", {"c": False}),
        ("for f in $x; do c; done", {"c": True}),
        ('for f in a "$x"; do c; done', {"c": True}),
        ("for f; do c; done", {"c": True}),
        ("select f in a; do c; done", {"c": True}),
        ("x && for f in a; do c; done", {"x": False, "c": True}),
        ("for ((i = 0; i < 3; i++)); do c; done", {"c": True}),
        ("case x in a) b ;; esac", {"b": True}),
        ("case x in *) b ;; esac", {"b": True}),
    ],
)
def test_a_loop_body_runs_on_every_path_only_when_its_loop_surely_starts(text, expected):
    """L10: `while true`, `until false` and `for` over literal words run their body; a loop
    over an expansion, a `select` menu, a C-style loop and a case item may not."""
    found = conditional(text)

    assert {name: found[name] for name in expected} == expected


def test_what_a_loop_or_case_expands_before_it_starts_runs_on_every_path():
    """`for f in $(cat inputs/l)` and `case $(cat inputs/s) in` run the cat whatever happens."""
    assert top("for f in $(cat inputs/l); do b; done")[:1] == [
        (("cat", "inputs/l"), False, False, False)
    ]
    assert top("case $(cat inputs/s) in a) b ;; esac") == [
        (("cat", "inputs/s"), False, False, False), (("b",), True, False, False)
    ]  # fmt: skip
    assert top("x && for f in $(y); do :; done")[1] == (("y",), True, False, False)


# --- functions, subshells, pipelines --------------------------------------------------------


def test_a_function_body_is_kept_by_name_and_not_run_at_top_level():
    """`f() { a; }` defines f; only a call runs its body (in either spelling)."""
    parsed = parse("f() { a; b x; }\nfunction g { h; }\nk() ( m )\nf")

    assert [c.words for c in parsed.top] == [("f",)]
    assert {n: [c.words for c in body] for n, body in parsed.functions.items()} == {
        "f": [("a",), ("b", "x")], "g": [("h",)], "k": [("m",)]
    }  # fmt: skip


def test_a_function_defined_anywhere_is_known_by_its_name():
    """A definition inside a loop, a substitution or another function still defines it."""
    parsed = parse("for x in a; do f() { a; }; done\necho $(g() { b; })\nh() { k() { c; }; }")

    assert {n: [c.words for c in body] for n, body in parsed.functions.items()} == {
        "f": [("a",)], "g": [("b",)], "h": [], "k": [("c",)]
    }  # fmt: skip
    assert [c.words[0] for c in parsed.top] == ["echo"]


def test_a_function_defined_in_a_branch_runs_its_body_fully_when_called():
    """A function body is judged where it is called, not where it is defined."""
    parsed = parse("if x; then f() { a; }; fi")

    assert [c.conditional for c in parsed.functions["f"]] == [False]


def test_pipelines_subshells_and_groups_run_every_command():
    """`a | b`, `( c; d )`, `{ e; }`: every command runs on every path."""
    assert top("a | b\n( c; d )\n{ e; }") == [
        ((n,), False, False, False) for n in ("a", "b", "c", "d", "e")
    ]


# --- the linter's walk-arounds, through the parse -------------------------------------------

TEMPLATE = s.render("portraits", "bkt", "python3 gen.py", inputs=("ref-1.png",))


@pytest.mark.parametrize(
    "line",
    [
        "! false && fetch_input x.png",
        "if ! false; then fetch_input x.png; fi",
        'python3 gen.py < "$WORK/inputs/x.png"',
        '< "$WORK/inputs/x.png" python3 gen.py',
        'while read -r l; do :; done < "$WORK/inputs/x.png"',
        'for f in $(gsutil cat "$PREFIX/inputs/x.png"); do :; done',
        'case "$(cat "$WORK/inputs/x.png")" in a) ;; esac',
        'cat <<EOF\n$(gsutil cat "$PREFIX/inputs/x.png")\nEOF',
        "if [[ a # a comment\n]]; then fetch_input x.png; fi",
        '"fetch_input" x.png',
    ],
)
def test_new_walk_arounds_of_the_fetch_check_are_still_fetches_l10(line):
    """L10: a negated constant, an input redirect, a loop's or case's expansion, a quoted name."""
    body = TEMPLATE.replace("stage running\n", f"{line}\nstage running\n")

    assert s.missing_inputs(body, ["ref-1.png"]) == ["x.png"]


@pytest.mark.parametrize(
    "line",
    [
        "! true && fetch_input x.png",
        "select f in a; do fetch_input x.png; done",
        "if true; then fetch_input x.png & fi",
        'echo hi > "$WORK/inputs/x.png"',
    ],
)
def test_a_fetch_that_may_not_run_or_a_write_is_not_a_required_input_l10(line):
    """L10: a negated true, a select menu, a background fetch, a write into inputs/."""
    body = TEMPLATE.replace("stage running\n", f"{line}\nstage running\n")

    assert s.missing_inputs(body, ["ref-1.png"]) == []


@pytest.mark.parametrize(
    "change, breach",
    [
        (("  poweroff\n", "  ! true || poweroff\n"), False),
        (("  poweroff\n", "  ! false || poweroff\n"), True),
        (("  poweroff\n", "  true && poweroff\n"), False),
        (("  poweroff\n", "  case x in *) poweroff ;; esac\n"), True),
        (("  poweroff\n", "  ( poweroff )\n"), False),
        (("  poweroff\n", "  until false; do poweroff; done\n"), False),
    ],
)
def test_a_power_off_behind_a_constant_is_reached_and_behind_a_case_is_not_l12(change, breach):
    """L12: the EXIT trap reaches `! true || poweroff`, but not a poweroff in a case item."""
    findings = s.lint(TEMPLATE.replace(*change), "portraits")

    assert (
        s.Finding("L12", "missing a power-off reachable on every path from the EXIT trap")
        in findings
    ) is breach


@pytest.mark.parametrize(
    "line, count",
    [("JOB=portraits X=1", 2), ("X=1 JOB=portraits", 2), ("typeset JOB=x", 2),
     ("local JOB", 2), ("JOB=portraits true", 2), ("echo JOB=x", 1)],
)  # fmt: skip
def test_every_form_of_assigning_job_is_counted_l4(line, count):
    """L4: JOB set by an assignment list, a prefix or a declaration counts; an argument not."""
    body = TEMPLATE.replace('BUCKET="bkt"\n', f'BUCKET="bkt"\n{line}\n')

    assert len(oracles.job_names(body)) == count


@pytest.mark.parametrize(
    "text, subshells",
    [
        ("a; ( b; c ); d", [("a", False), ("b", True), ("c", True), ("d", False)]),
        ("a | b", [("a", True), ("b", True)]),
        ("! a", [("a", False)]),
        ("a > f", [("a", False)]),
        ("{ a; b; }", [("a", False), ("b", False)]),
        ("case $(a) in x) b;; esac", [("a", True), ("b", False)]),
    ],
)
def test_commands_in_a_child_shell_are_marked_subshell_l12(text, subshells):
    """L12: `( ... )`, a pipeline's parts and substitutions run in a child shell, where
    `trap - EXIT` or `exec` cannot touch the script's own EXIT trap."""
    parsed = parse(text)

    assert [(c.name, c.subshell) for c in parsed.top] == subshells


def test_an_inner_substitution_is_a_subshell_and_the_command_holding_it_is_not_l12():
    """L12: `echo "$(exec x)"`: echo runs in the script, exec in the substitution's shell."""
    (echo,) = parse('echo "$(exec x)"').top

    assert echo.subshell is False and [(c.name, c.subshell) for c in echo.inner] == [("exec", True)]


@pytest.mark.parametrize(
    "text, rescues",
    [
        ("a || b", [("a", ["b"]), ("b", [])]),
        ("a || { b; exit 1; }", [("a", ["b", "exit"]), ("b", []), ("exit", [])]),
        ("a || b || c", [("a", ["b"]), ("b", ["c"]), ("c", [])]),
        ("a && b", [("a", []), ("b", [])]),
        ("a && b || c", [("a", []), ("b", ["c"]), ("c", [])]),
    ],
)
def test_a_guarded_command_knows_the_commands_its_or_runs_l10(text, rescues):
    """L10: the commands after `||` are the guarded command's rescue (`cmd || fail` needs
    its input; `cmd || true` does not)."""
    parsed = parse(text)

    assert [(c.name, [r.name for r in c.rescue]) for c in parsed.top] == rescues
