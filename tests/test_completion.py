"""`gpuops completion SHELL`: scripts written from the parser, run in the real shells.

bash is sourced and its completion function called as bash's completion calls it (COMP_WORDS,
COMP_CWORD); zsh's function runs under `zsh -f` with the completion system's builtins stood in
(they exist only inside a completion widget), and fish answers `complete -C`. zsh and fish are
run where they are installed; their scripts' content is checked everywhere.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuops import cli
from gpuops.completion import script, tree

PARSER = cli.build_parser()
NODES = {node.key: node for node in tree(PARSER)}
COMMANDS = list(NODES["gpuops"].commands)


def every_parser(
    parser: argparse.ArgumentParser, path: str = "gpuops"
) -> dict[str, argparse.ArgumentParser]:
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(every_parser(sub, f"{path} {name}"))
    return found


def options_of(path: str) -> set[str]:
    parser = every_parser(PARSER)[path]
    return {name for action in parser._actions for name in action.option_strings}


def test_the_tree_has_every_parser_every_command_and_every_option():
    """Walked, not listed: each parser is a node with its subcommands and all its options."""
    parsers = every_parser(PARSER)

    assert set(NODES) == set(parsers)
    for path, node in NODES.items():
        assert {name for flag in node.flags for name in flag.names} == options_of(path)
    assert {c for c, _ in COMMANDS} >= {"rent", "record", "rules", "lane", "completion"}
    assert [c for c, _ in NODES["gpuops lane"].commands][:2] == ["board", "repair"]
    assert NODES["gpuops completion"].words == cli.SHELLS


def test_a_command_s_help_and_an_option_s_help_come_from_the_parser():
    """The descriptions zsh and fish show are `--help`'s, defaults filled in."""
    helps = dict(COMMANDS)
    hours = next(f for f in NODES["gpuops rent"].flags if "--hours" in f.names)
    kind = next(f for f in NODES["gpuops incident observe"].flags if "--kind" in f.names)

    assert helps["rent"] == "rent a healthy box: race offers, probe, keep one"
    assert hours.help == "billing ceiling in hours" and hours.takes_value
    assert kind.choices == ("real", "drill")
    assert not next(f for f in NODES["gpuops boxes"].flags if "--all" in f.names).takes_value


# --- bash ----------------------------------------------------------------------------------------
def bash(text: str, *lines: list[str]) -> list[str]:
    """`complete -p gpuops`, then the completions bash would offer for each line of words (the
    last word the one being completed), one output line each."""
    calls = "\n".join(
        "COMP_WORDS=({}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=(); _gpuops; "
        'echo "${{COMPREPLY[*]}}"'.format(" ".join(f"'{w}'" for w in words))
        for words in lines
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", f"{text}\ncomplete -p gpuops\n{calls}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


BASH = script("bash", PARSER)


def test_bash_registers_the_function_and_completes_commands_by_prefix():
    """`complete -p gpuops` names the function; `gpuops re` offers rent and record, and
    `gpuops r` also rules and run (every command starting with r)."""
    out = bash(BASH, ["gpuops", "re"], ["gpuops", "r"], ["gpuops", ""])

    assert out[0] == "complete -o default -F _gpuops gpuops"
    assert set(out[1].split()) == {"rent", "record"}
    assert set(out[2].split()) == {"rent", "record", "rules", "run"}
    assert out[3].split() == [c for c, _ in COMMANDS]


def test_bash_completes_rent_s_own_flags_after_its_name():
    """`gpuops rent --` offers exactly rent's long options, global ones included."""
    out = bash(BASH, ["gpuops", "rent", "--"], ["gpuops", "rent", "box", "--h"])

    assert set(out[1].split()) == {o for o in options_of("gpuops rent") if o.startswith("--")}
    assert "--hours" in out[1] and "--no-guard" in out[1] and "--drill" not in out[1]
    assert set(out[2].split()) == {"--help", "--hours"}


def test_bash_follows_subcommands_past_global_options_and_their_values():
    """`gpuops --state /x lane b` reaches lane's commands; in `gpuops --operator lane b`,
    lane is --operator's value, not the command."""
    out = bash(
        BASH,
        ["gpuops", "--state", "/x", "lane", "b"],
        ["gpuops", "--json", "lane", "board", "--l"],
        ["gpuops", "budget", ""],
        ["gpuops", "--operator", "lane", "b"],
    )

    assert out == [
        "complete -o default -F _gpuops gpuops",
        "board",
        "--live --limit",  # lane board's own options: --live, and --history's --limit
        "set",
        "boxes budget",
    ]


def test_bash_offers_an_option_s_choices_and_a_positional_s():
    """--kind's choices (as `--kind X` and `--kind=X`), completion's shells; a free value
    and the words after `--` offer nothing (bash falls back to file names)."""
    out = bash(
        BASH,
        ["gpuops", "incident", "observe", "--kind", ""],
        ["gpuops", "incident", "observe", "--kind", "=", "d"],
        ["gpuops", "completion", ""],
        ["gpuops", "rent", "--gpu", ""],
        ["gpuops", "run", "box", "--", ""],
    )

    assert out[1:] == ["real drill", "drill", "bash zsh fish", "", ""]


def test_bash_completes_a_parser_it_has_never_seen():
    """Nothing is listed by hand: a new command and flag complete from the parser alone."""
    toy = argparse.ArgumentParser(prog="gpuops")
    sub = toy.add_subparsers(dest="command")
    sub.add_parser("rewind", help="a command added today").add_argument("--far", help="how far")

    out = bash(script("bash", toy), ["gpuops", "rew"], ["gpuops", "rewind", "--f"])

    assert out[1:] == ["rewind", "--far"]


# --- zsh and fish ---------------------------------------------------------------------------------
def test_the_zsh_script_names_every_path_command_and_option_with_its_help():
    """Every path has its case, every command and option its `name:help` entry."""
    text = script("zsh", PARSER)

    for path, node in NODES.items():
        assert f"({shlex.quote(path)}) gpuops_reply=(" in text, path
        for name, help_text in node.commands:
            assert shlex.quote(f"{name}:{help_text}" if help_text else name) in text, name
        for flag in node.flags:
            for name in flag.names:
                entry = f"{name}:{flag.help}" if flag.help else name
                assert shlex.quote(entry) in text, (path, name)


def test_the_fish_script_names_every_path_command_and_option_with_its_help():
    """Every command is offered at its path, every option too, each with its help."""
    text = script("fish", PARSER)

    for path, node in NODES.items():
        at = f"complete -c gpuops -n '__gpuops_at \\'{path}\\''"
        for name, _ in node.commands:
            assert f"{at} -a '{name}'" in text, (path, name)
        for flag in node.flags:
            long = [n for n in flag.names if n.startswith("--")]
            assert all(f"-l '{n[2:]}'" in text for n in long), (path, flag)
        assert sum(line.startswith(at + " -") for line in text.splitlines()) >= len(node.flags)
    assert "-l 'hours' -r -d 'billing ceiling in hours'" in text
    assert "-l 'kind' -x -a 'real drill'" in text


def run_shell(argv: list[str], name: str) -> str:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (the script's content is checked above)")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


# stand-ins for the builtins of zsh's completion system, which exist only in a completion widget
ZSH_STUBS = r"""
compdef() { print -r -- "compdef $*" }
_describe() { local -a got; got=("${(@P)${@[-1]}}"); print -r -- "${(j: :)${got[@]%%:*}}" }
compadd() { print -r -- "${(j: :)${(@P)2}}" }
_default() { print default }
_files() { print files }
compset() { : }
t() { words=("$@"); CURRENT=$#words; _gpuops }
"""


def test_zsh_parses_the_script_and_its_function_walks_to_the_right_words(tmp_path):
    """`zsh -n` accepts it; run, it registers with compdef and offers each path's words."""
    path = tmp_path / "_gpuops"
    path.write_text(script("zsh", PARSER))
    run_shell(["zsh", "-n", str(path)], "zsh")
    calls = [
        "t gpuops --state /x lane b",
        "t gpuops --operator lane b",
        "t gpuops rent --",
        "t gpuops incident observe --kind ''",
        "t gpuops incident observe --kind=d",
        "t gpuops completion ''",
        "t gpuops run box -- ''",
    ]

    out = run_shell(["zsh", "-f", "-c", f"{ZSH_STUBS}\nsource {path}\n" + "\n".join(calls)], "zsh")

    lines = out.splitlines()
    assert lines[0] == "compdef _gpuops gpuops"
    assert lines[1].split() == [c for c, _ in NODES["gpuops lane"].commands]
    assert lines[2].split() == [c for c, _ in COMMANDS]  # lane was --operator's value
    assert set(lines[3].split()) == options_of("gpuops rent")
    assert lines[4:] == ["real drill", "real drill", "bash zsh fish", "files"]


def test_fish_parses_the_script_and_completes_each_path(tmp_path):
    """`fish --no-execute` accepts it; sourced, `complete -C` offers each path's words."""
    path = tmp_path / "gpuops.fish"
    path.write_text(script("fish", PARSER))
    run_shell(["fish", "--no-execute", str(path)], "fish")
    lines = ["gpuops re", "gpuops rent --h", "gpuops --state /x lane b", "gpuops completion "]
    lines += ["gpuops --operator lane b"]
    calls = "; ".join(f"complete -C '{line}'; echo ==" for line in lines)

    out = run_shell(["fish", "--no-config", "-c", f"source {path}; {calls}"], "fish")

    answers = [
        sorted(row.split("\t")[0] for row in block.strip().splitlines())
        for block in out.split("==\n")[:-1]
    ]
    assert answers == [
        ["record", "rent"],
        ["--help", "--hours"],
        ["board"],
        ["bash", "fish", "zsh"],
        ["boxes", "budget"],
    ]


# --- the command ---------------------------------------------------------------------------------
def test_the_command_prints_the_script_and_an_unknown_shell_is_a_usage_error(capsys):
    """`gpuops completion bash` prints the bash script; `completion tcsh` is exit 2 naming
    the choices."""
    code = cli.main(["completion", "bash"])
    out = capsys.readouterr().out
    with pytest.raises(SystemExit) as raised:
        cli.main(["completion", "tcsh"])

    assert code == 0 and out == BASH
    assert raised.value.code == 2
    assert "invalid choice: 'tcsh' (choose from 'bash', 'zsh', 'fish')" in capsys.readouterr().err


def test_completion_reads_no_settings_so_a_broken_config_file_still_completes(
    tmp_path, monkeypatch, capsys
):
    """A shell's start-up runs `gpuops completion`: a bad config file does not break it."""
    bad = tmp_path / "config.toml"
    bad.write_text("this is not toml\n")
    monkeypatch.setenv("GPUOPS_CONFIG", str(bad))

    assert cli.main(["completion", "fish"]) == 0
    assert capsys.readouterr().out == script("fish", PARSER)
    assert cli.main(["boxes"]) == 2


def test_every_option_of_the_completion_command_has_help():
    """Its SHELL and every flag say what they are in `gpuops completion --help`."""
    parser = every_parser(PARSER)["gpuops completion"]

    assert all(action.help for action in parser._actions)
    assert "the shell: bash, zsh, fish" in parser.format_help()


def test_the_help_lists_the_command(tmp_path: Path):
    """`gpuops --help` names it, with its one line."""
    assert "completion" in PARSER.format_help()
    assert dict(COMMANDS)["completion"] == "print a completion script for bash, zsh or fish"
