"""`gpuops completion SHELL`: a completion script for bash, zsh or fish, written from the parser.

``tree`` walks the argparse parser: every command and subcommand, every option with its help,
whether it takes a value and its choices, and a positional's choices (``completion SHELL``'s
shells). Nothing is listed by hand, so a command or a flag completes as soon as the parser has
it. Each script is that tree as data (one ``case``/``switch`` per question: the commands under
a path, the options there, whether an option takes a value) and one small function that walks
the words typed so far to the path they reach, skipping options and their values; after
``--`` (``run NAME -- CMD``) the shell completes files. A word it cannot complete (a NAME, a
path) falls back to the shell's own file completion.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Flag", "Node", "script", "tree"]


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]  # "-h", "--help"
    help: str
    takes_value: bool
    choices: tuple[str, ...]  # empty: any value (a file, a name, a number)


@dataclass(frozen=True)
class Node:
    """One parser: its path of command words, its subcommands with their help, the choices
    of its positionals, and its options."""

    path: tuple[str, ...]  # ("gpuops", "lane", "board")
    commands: tuple[tuple[str, str], ...]
    words: tuple[str, ...]
    flags: tuple[Flag, ...]

    @property
    def key(self) -> str:
        return " ".join(self.path)


def tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("gpuops",)) -> Iterator[Node]:
    """Every parser under ``parser``, itself first, depth first, in the parser's order."""
    commands: list[tuple[str, str]] = []
    children: list[tuple[str, argparse.ArgumentParser]] = []
    words: list[str] = []
    flags: list[Flag] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {id(action.choices[a.dest]): _help(parser, a) for a in action._choices_actions}
            for name, sub in action.choices.items():
                commands.append((name, helps.get(id(sub), "")))
                children.append((name, sub))
        elif action.help == argparse.SUPPRESS:
            continue
        elif action.option_strings:
            choices = tuple(str(c) for c in action.choices or ())
            flags.append(
                Flag(
                    tuple(action.option_strings), _help(parser, action), action.nargs != 0, choices
                )
            )
        elif action.choices is not None:
            words.extend(str(c) for c in action.choices)
    yield Node(path, tuple(commands), tuple(words), tuple(flags))
    for name, sub in children:
        yield from tree(sub, (*path, name))


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as `--help` prints it (``%(default)s`` filled in), on one line."""
    if not action.help:
        return ""
    try:
        text = parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        text = action.help
    return " ".join(text.split())


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash, zsh or fish) of the whole ``parser``."""
    writers: dict[str, Callable[[Sequence[Node]], str]] = {
        "bash": _bash,
        "zsh": _zsh,
        "fish": _fish,
    }
    return writers[shell](list(tree(parser)))


def _sh(word: str) -> str:
    return shlex.quote(word)


def _valued(nodes: Sequence[Node]) -> Iterator[tuple[str, Flag]]:
    """Each (path, option name) that takes a value, with its flag."""
    for node in nodes:
        for flag in node.flags:
            if flag.takes_value:
                for name in flag.names:
                    yield f"{node.key} {name}", flag


# --- bash ----------------------------------------------------------------------------------------
def _bash(nodes: Sequence[Node]) -> str:
    commands = [
        f"        {_sh(n.key)}) echo {_sh(' '.join([*(c for c, _ in n.commands), *n.words]))} ;;"
        for n in nodes
        if n.commands or n.words
    ]
    options = [
        f"        {_sh(n.key)}) echo {_sh(' '.join(name for f in n.flags for name in f.names))} ;;"
        for n in nodes
    ]
    values = [
        f"        {_sh(key)}) echo {_sh(' '.join(f.choices))} ;;" for key, f in _valued(nodes)
    ]
    return "\n".join(
        [
            "# gpuops completion for bash, written from gpuops' own parser by",
            '# `gpuops completion bash`: eval "$(gpuops completion bash)" in ~/.bashrc, or save',
            "# it as ~/.local/share/bash-completion/completions/gpuops",
            "_gpuops_commands() {  # the words after the command path $1",
            "    case $1 in",
            *commands,
            "    esac",
            "}",
            "_gpuops_options() {  # the options at the command path $1",
            "    case $1 in",
            *options,
            "    esac",
            "}",
            "_gpuops_values() {  # the choices of option $2 at path $1; fails if it takes no value",
            '    case "$1 $2" in',
            *values,
            "        *) return 1 ;;",
            "    esac",
            "}",
            "_gpuops() {",
            "    local cur=${COMP_WORDS[COMP_CWORD]} path=gpuops want= word i",
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            "        word=${COMP_WORDS[i]}",
            "        [[ $word == = ]] && continue  # --opt=value, split at the =",
            "        if [[ -n $want ]]; then want=; continue; fi",
            "        case $word in",
            "            --) COMPREPLY=(); return 0 ;;  # the job's own words: files",
            "            -*=*) ;;",
            '            -*) _gpuops_values "$path" "$word" >/dev/null && want=$word ;;',
            '            *) [[ " $(_gpuops_commands "$path") " == *" $word "* ]] && path="$path $word" ;;',
            "        esac",
            "    done",
            "    [[ $cur == = ]] && cur=",
            "    if [[ -n $want ]]; then",
            '        COMPREPLY=($(compgen -W "$(_gpuops_values "$path" "$want")" -- "$cur"))',
            "    elif [[ $cur == -* ]]; then",
            '        COMPREPLY=($(compgen -W "$(_gpuops_options "$path")" -- "$cur"))',
            "    else",
            '        COMPREPLY=($(compgen -W "$(_gpuops_commands "$path")" -- "$cur"))',
            "    fi",
            "}",
            "complete -o default -F _gpuops gpuops",
            "",
        ]
    )


# --- zsh -----------------------------------------------------------------------------------------
def _described(name: str, text: str) -> str:
    """An entry of _describe: ``name:description``, a colon in the name escaped."""
    return _sh(name.replace(":", "\\:") + (f":{text}" if text else ""))


def _zsh(nodes: Sequence[Node]) -> str:
    commands = []
    for n in nodes:
        if n.commands or n.words:
            entries = [_described(c, t) for c, t in n.commands] + [
                _described(w, "") for w in n.words
            ]
            commands.append(f"        ({_sh(n.key)}) gpuops_reply=({' '.join(entries)}) ;;")
    options = []
    for n in nodes:
        entries = [_described(name, f.help) for f in n.flags for name in f.names]
        options.append(f"        ({_sh(n.key)}) gpuops_reply=({' '.join(entries)}) ;;")
    values = [
        f"        ({_sh(key)}) gpuops_reply=({' '.join(_sh(c) for c in f.choices)}) ;;"
        for key, f in _valued(nodes)
    ]
    return "\n".join(
        [
            "#compdef gpuops",
            "# gpuops completion for zsh, written from gpuops' own parser by",
            "# `gpuops completion zsh`: save it as _gpuops in a directory of $fpath, or",
            '# eval "$(gpuops completion zsh)" in ~/.zshrc after compinit',
            "_gpuops_commands() {  # the words after the command path $1, with their help",
            "    gpuops_reply=()",
            "    case $1 in",
            *commands,
            "    esac",
            "}",
            "_gpuops_options() {  # the options at the command path $1, with their help",
            "    gpuops_reply=()",
            "    case $1 in",
            *options,
            "    esac",
            "}",
            "_gpuops_values() {  # the choices of option $2 at path $1; fails if it takes no value",
            "    gpuops_reply=()",
            '    case "$1 $2" in',
            *values,
            "        (*) return 1 ;;",
            "    esac",
            "}",
            "_gpuops() {",
            "    local cmdpath=gpuops want= word cur=${words[CURRENT]} i",
            "    local -a gpuops_reply",
            "    for ((i = 2; i < CURRENT; i++)); do",
            "        word=${words[i]}",
            "        if [[ -n $want ]]; then want=; continue; fi",
            "        case $word in",
            "            (--) _files; return ;;  # the job's own words",
            "            (-*=*) ;;",
            '            (-*) _gpuops_values "$cmdpath" "$word" && want=$word ;;',
            "            (*)",
            '                _gpuops_commands "$cmdpath"',
            '                (( ${gpuops_reply[(I)${(b)word}(|:*)]} )) && cmdpath="$cmdpath $word" ;;',
            "        esac",
            "    done",
            '    if [[ -z $want && $cur == -*=* ]] && _gpuops_values "$cmdpath" "${cur%%=*}"; then',
            "        want=${cur%%=*}",
            "        compset -P '*='",
            "    fi",
            "    if [[ -n $want ]]; then",
            '        _gpuops_values "$cmdpath" "$want"',
            "        if (( $#gpuops_reply )); then compadd -a gpuops_reply; else _default; fi",
            "    elif [[ $cur == -* ]]; then",
            '        _gpuops_options "$cmdpath"',
            "        _describe -t options option gpuops_reply",
            "    else",
            '        _gpuops_commands "$cmdpath"',
            "        if (( $#gpuops_reply )); then _describe -t commands command gpuops_reply; else _default; fi",
            "    fi",
            "}",
            'if [[ "$funcstack[1]" == _gpuops ]]; then _gpuops "$@"; else compdef _gpuops gpuops; fi',
            "",
        ]
    )


# --- fish ----------------------------------------------------------------------------------------
def _fq(text: str) -> str:
    """A fish single-quoted string."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_flag(flag: Flag) -> str:
    parts = []
    for name in flag.names:
        if name.startswith("--"):
            parts.append(f"-l {_fq(name[2:])}")
        elif len(name) == 2:
            parts.append(f"-s {_fq(name[1:])}")
        else:
            parts.append(f"-o {_fq(name[1:])}")
    if flag.choices:
        parts.append(f"-x -a {_fq(' '.join(flag.choices))}")
    elif flag.takes_value:
        parts.append("-r")
    if flag.help:
        parts.append(f"-d {_fq(flag.help)}")
    return " ".join(parts)


def _fish(nodes: Sequence[Node]) -> str:
    commands = []
    for n in nodes:
        if n.commands or n.words:
            commands += [
                f"        case {_fq(n.key)}",
                f"            printf '%s\\n' {' '.join(_fq(w) for w in [*(c for c, _ in n.commands), *n.words])}",
            ]
    values = []
    for n in nodes:  # one case per path: its options that take a value
        valued = [_fq(f"{n.key} {name}") for f in n.flags if f.takes_value for name in f.names]
        if valued:
            values += [f"        case {' '.join(valued)}", "            return 0"]
    lines = [
        "# gpuops completion for fish, written from gpuops' own parser by",
        "# `gpuops completion fish`: save it as ~/.config/fish/completions/gpuops.fish",
        "function __gpuops_commands --description 'the words after the command path $argv[1]'",
        "    switch $argv[1]",
        *commands,
        "    end",
        "end",
        "function __gpuops_takes_value --description 'whether option $argv[2] at path $argv[1] takes one'",
        '    switch "$argv[1] $argv[2]"',
        *values,
        "    end",
        "    return 1",
        "end",
        "function __gpuops_path --description 'the command path the words typed so far reach'",
        "    set -l path gpuops",
        "    set -l want 0",
        "    for word in (commandline -opc)[2..-1]",
        "        if test $want = 1",
        "            set want 0",
        "            continue",
        "        end",
        "        switch $word",
        "            case --",
        '                echo -- "$path --"  # the job\'s own words: no completion of ours',
        "                return",
        "            case '-*=*'",
        "            case '-*'",
        '                __gpuops_takes_value "$path" $word; and set want 1',
        "            case '*'",
        '                contains -- $word (__gpuops_commands "$path"); and set path "$path $word"',
        "        end",
        "    end",
        "    echo -- $path",
        "end",
        "function __gpuops_at --description 'whether the words typed so far reach path $argv[1]'",
        '    test (__gpuops_path) = "$argv[1]"',
        "end",
    ]
    for n in nodes:
        when = f"-n {_fq('__gpuops_at ' + _fq(n.key))}"
        if n.commands or n.words:
            lines.append(f"complete -c gpuops {when} -f")
        for name, text in n.commands:
            lines.append(
                f"complete -c gpuops {when} -a {_fq(name)}" + (f" -d {_fq(text)}" if text else "")
            )
        if n.words:
            lines.append(f"complete -c gpuops {when} -a {_fq(' '.join(n.words))}")
        for flag in n.flags:
            lines.append(f"complete -c gpuops {when} {_fish_flag(flag)}")
    return "\n".join([*lines, ""])
