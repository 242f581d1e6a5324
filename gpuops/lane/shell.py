"""A startup script, parsed: every simple command with where and when it runs (for the linter).

The linter (gpuops/lane/script.py) judges what a script *does*, so it reads a parse, not lines:
a fetch spelt as a raw ``gsutil cp "$PREFIX/inputs/x"``, a fetch inside ``if true``, a second
``export JOB=...`` are all commands here, whatever their layout. The parser is tree-sitter's
bash grammar (``tree-sitter`` + ``tree-sitter-bash``, pinned in pyproject.toml; imported
lazily). bashlex was tried first: it cannot parse ``$(a || b)``, ``case`` or ``$((...))``, all
common in startup scripts (the template has the first). A script with a syntax error is
``Parsed.error``: the linter refuses it rather than guessing.

Each command records its words (quotes removed, as the shell would pass them), which words
hold an expansion, and how it runs: ``conditional`` (it may not run on every path: inside a
branch or loop body whose test is not constant, in a ``case`` item, or after ``&&``/``||``),
``guarded`` (a failure is caught by a following ``||``, whose commands are its ``rescue``),
``background`` (``&``), ``negated`` (``! cmd``: its status is inverted), ``subshell`` (it runs
in a child shell: ``( ... )``, ``$(...)``, ``<(...)``, a part of a pipeline). The commands the shell runs while expanding a command's
words (``$(...)``, ``<(...)``) are its ``inner`` commands; an input redirect (``< FILE``) is
kept as the command ``<`` FILE, since the shell opens the file whatever the command is.
Function bodies are kept per function, not as top-level commands: they run where they are
called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Commands whose exit status is constant: a test of one of these is not a condition.
TRUE_COMMANDS = frozenset({"true", ":", "/bin/true", "/usr/bin/true"})
FALSE_COMMANDS = frozenset({"false", "/bin/false", "/usr/bin/false"})


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    literal: tuple[bool, ...]  # per word: no expansion in it
    pos: int
    conditional: bool = False
    guarded: bool = False
    background: bool = False
    negated: bool = False
    assignments: tuple[str, ...] = ()  # NAME=value prefixes (and bare assignment commands)
    inner: tuple[Command, ...] = ()  # commands in its $(...) substitutions and input redirects
    subshell: bool = False  # it runs in a subshell: ( ... ), $(...), <(...), a pipeline's part
    rescue: tuple[Command, ...] = ()  # when guarded: the commands the following || runs

    @property
    def name(self) -> str:
        return self.words[0] if self.words else ""


@dataclass
class Parsed:
    top: list[Command] = field(default_factory=list)
    functions: dict[str, list[Command]] = field(default_factory=dict)
    error: str | None = None


def constant(command: Command) -> bool | None:
    """True or False when the command's status is known without running it; else None."""
    if not command.words or not all(command.literal):
        return None
    status = _status(command.words)
    return None if status is None else status != command.negated


def _status(words: tuple[str, ...]) -> bool | None:
    """The status of a literal command: a constant command, or a test of literals."""
    if len(words) == 1 and words[0] in TRUE_COMMANDS:
        return True
    if len(words) == 1 and words[0] in FALSE_COMMANDS:
        return False
    if words[0] == "[" and words[-1] == "]" or words[0] == "[[" and words[-1] == "]]":
        inner = words[1:-1]
    elif words[0] == "test":
        inner = words[1:]
    else:
        return None
    if len(inner) == 1:
        return inner[0] != ""
    if len(inner) == 3 and inner[1] in ("=", "=="):
        return inner[0] == inner[2]
    if len(inner) == 3 and inner[1] == "!=":
        return inner[0] != inner[2]
    return None


_EXPANSIONS = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "arithmetic_expansion",
        "process_substitution",
    }
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_DECLARERS = frozenset({"export", "declare", "typeset", "readonly", "local"})


def parse(text: str) -> Parsed:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    tree = Parser(Language(tree_sitter_bash.language())).parse(text.encode())
    if tree.root_node.has_error:
        return Parsed(error=f"a syntax error near byte {min(_errors(tree.root_node))}")
    out = Parsed()
    _statements(tree.root_node.children, out.top, False)
    _functions(tree.root_node, out.functions)
    return out


def _functions(node: Any, into: dict[str, list[Command]]) -> None:
    """Every function defined under ``node``, wherever: its body as if it ran on its own."""
    for child in node.children:
        if child.type == "function_definition":
            body: list[Command] = []
            _walk(child.child_by_field_name("body"), body, False)
            into[child.child_by_field_name("name").text.decode()] = body
        _functions(child, into)


def _errors(node: Any) -> Iterator[int]:
    """Where each error or missing token under ``node`` starts."""
    if node.type == "ERROR" or node.is_missing:
        yield node.start_byte
    for child in node.children:
        yield from _errors(child)


def _word(node: Any) -> tuple[str, bool]:
    """A word as the shell passes it (quotes removed) and whether it holds no expansion."""
    return _unquote(node), not _has(node, _EXPANSIONS)


def _has(node: Any, kinds: frozenset[str]) -> bool:
    return node.type in kinds or any(_has(child, kinds) for child in node.children)


def _unquote(node: Any) -> str:
    text: str = node.text.decode()
    if node.type == "raw_string":
        return text[1:-1]
    if node.type in ("string", "concatenation"):
        return "".join(_unquote(c) for c in node.children if c.type != '"')
    return text


def _statements(nodes: Iterable[Any], into: list[Command], conditional: bool) -> None:
    """Statements in order; a ``&`` after one puts it in the background."""
    items = list(nodes)
    for index, node in enumerate(items):
        start = len(into)
        _walk(node, into, conditional)
        following = items[index + 1] if index + 1 < len(items) else None
        if following is not None and following.type == "&":
            _mark(into, start, background=True)


def _mark(into: list[Command], start: int, **changes: Any) -> None:
    """Set ``changes`` on every command from ``start`` on."""
    for k in range(start, len(into)):
        into[k] = dataclasses.replace(into[k], **changes)


def _walk(node: Any, into: list[Command], conditional: bool) -> None:
    kind = node.type
    if kind in ("command", "declaration_command", "test_command", "variable_assignment"):
        into.append(_command(node, conditional))
    elif kind == "list":
        _list(node, into, conditional)
    elif kind == "function_definition":
        pass  # its body runs where it is called (_functions)
    elif kind == "if_statement":
        _if(node, into, conditional)
    elif kind == "for_statement":
        _for(node, into, conditional)
    elif kind == "while_statement":
        _loop(node, into, conditional)
    elif kind == "case_statement":  # the subject is expanded on every path, no item is
        _substitutions(node.child_by_field_name("value"), into, conditional)
        _statements((c for c in node.children if c.type == "case_item"), into, True)
    elif kind == "c_style_for_statement":
        _statements(node.children, into, True)
    elif kind == "negated_command":
        start = len(into)
        _statements(node.children, into, conditional)
        for k in range(start, len(into)):
            into[k] = dataclasses.replace(into[k], negated=not into[k].negated)
    elif kind in _REDIRECTS:  # a redirect of a compound statement
        _substitutions(node, into, conditional)
    elif kind in ("subshell", "pipeline"):  # tree-sitter's pipeline: two commands or more
        start = len(into)
        _statements(node.children, into, conditional)
        _mark(into, start, subshell=True)
    else:  # pipeline, subshell, compound_statement, do_group, redirected_statement, ...
        _statements(node.children, into, conditional)


def _command(node: Any, conditional: bool) -> Command:
    words: list[str] = []
    literal: list[bool] = []
    assignments: list[str] = []
    inner: list[Command] = []
    kind = node.type
    for child in node.children:
        _substitutions(child, inner, conditional)
        if kind == "variable_assignment":
            continue
        if child.type == "variable_assignment" and kind == "command":
            assignments.append(_assignment(child))
        elif child.type == "command_name":
            word, lit = _word(child.children[0])
            words.append(word)
            literal.append(lit)
        elif kind == "declaration_command" and child.type in _DECLARERS:
            words.append(child.type)
            literal.append(True)
        elif kind == "declaration_command" and child.type == "variable_assignment":
            words.append(_assignment(child))
            literal.append(not _has(child, _EXPANSIONS))
        elif kind == "test_command" and child.type in ("[", "]", "[[", "]]"):
            words.append(child.type)
            literal.append(True)
        elif kind == "test_command" and child.type in ("binary_expression", "unary_expression"):
            for part in child.children:
                word, lit = _word(part)
                words.append(word)
                literal.append(lit)
        elif child.is_named and child.type not in _REDIRECTS and child.type != "comment":
            word, lit = _word(child)
            words.append(word)
            literal.append(lit)
    if kind == "variable_assignment":
        assignments.append(_assignment(node))
    return Command(
        tuple(words),
        tuple(literal),
        node.start_byte,
        conditional=conditional,
        assignments=tuple(assignments),
        inner=tuple(inner),
    )


def _assignment(node: Any) -> str:
    """``NAME=value``: the value unquoted when it is literal, as written when not."""
    value = node.child_by_field_name("value")
    name: str = node.child_by_field_name("name").text.decode()
    text = name + "="
    if value is not None:
        raw: str = value.text.decode()
        text += _unquote(value) if not _has(value, _EXPANSIONS) else raw
    return text


def _substitutions(node: Any, into: list[Command], conditional: bool) -> None:
    """The commands the shell runs while expanding ``node``: its ``$(...)`` and ``<(...)``
    substitutions, and an input redirect as the command ``<`` FILE."""
    if node.type in _SUBSTITUTIONS:
        start = len(into)
        _statements(node.children, into, conditional)
        _mark(into, start, subshell=True)
        return
    if node.type == "file_redirect" and any(c.type == "<" for c in node.children):
        word, lit = _word(node.child_by_field_name("destination"))
        into.append(Command(("<", word), (True, lit), node.start_byte, conditional=conditional))
    for child in node.children:
        _substitutions(child, into, conditional)


def _flatten(node: Any) -> tuple[list[Any], list[str]]:
    """``a && b || c`` (left-nested lists) as items and the operators between them."""
    items: list[Any] = []
    ops: list[str] = []
    for child in node.children:
        if child.type == "list":  # lists nest to the left: only ever the first child
            items, ops = _flatten(child)
        elif child.type in ("&&", "||"):
            ops.append(child.type)
        elif child.type != "comment":
            items.append(child)
    return items, ops


def _list(node: Any, into: list[Command], conditional: bool) -> None:
    """``a && b``: b runs on every path only when a is constant true (``||``: false); a
    command before ``||`` is guarded."""
    items, ops = _flatten(node)
    previous: list[Command] = []
    rescued: tuple[int, int] | None = None  # the commands the item just walked rescues
    for index, item in enumerate(items):
        before = ops[index - 1] if index > 0 else None
        known = _truth(previous)
        maybe = (
            conditional
            or (before == "&&" and known is not True)
            or (before == "||" and known is not False)
        )
        start = len(into)
        _walk(item, into, maybe)
        if rescued is not None:
            rescue = tuple(into[start:])
            for k in range(*rescued):
                into[k] = dataclasses.replace(into[k], rescue=rescue)
            rescued = None
        if index < len(ops) and ops[index] == "||":
            _mark(into, start, guarded=True)
            rescued = (start, len(into))
        previous = into[start:]


def _truth(commands: list[Command]) -> bool | None:
    """The status of a test that is one command of constant status; else None."""
    return constant(commands[0]) if len(commands) == 1 else None


def _if(node: Any, into: list[Command], conditional: bool) -> None:
    """A clause's test runs on every path only when every test before it is constant false;
    its body, only when its own test is also constant true. ``else`` is a clause of its own
    kind: its body runs, like a test, on every path when every test before it is false."""
    every = not conditional  # every test so far is constant false
    for test, body in _clauses(node):
        cond: list[Command] = []
        _statements(test, cond, not every)
        into.extend(cond)
        truth = _truth(cond)
        _statements(body, into, not (every and truth is True))
        every = every and truth is False


def _clauses(node: Any) -> list[tuple[list[Any], list[Any]]]:
    """An ``if`` statement's (test, body) nodes: the ``if``, each ``elif``, and the ``else``
    with its body as the test (it has no ``then``)."""
    clauses = []
    for part in [node, *(c for c in node.children if c.type in ("elif_clause", "else_clause"))]:
        test: list[Any] = []
        body: list[Any] = []
        current = test
        for child in part.children:
            if child.type == "then":
                current = body
            elif child.type not in ("elif_clause", "else_clause"):
                current.append(child)
        clauses.append((test, body))
    return clauses


def _for(node: Any, into: list[Command], conditional: bool) -> None:
    """``for x in`` literal words runs its body on every path; over an expansion, none, or a
    ``select`` menu it may not run."""
    values = node.children_by_field_name("value")
    for value in values:
        _substitutions(value, into, conditional)
    certain = (
        not conditional
        and node.children[0].type == "for"
        and bool(values)
        and not any(_has(v, _EXPANSIONS) for v in values)
    )
    _walk(node.child_by_field_name("body"), into, not certain)


def _loop(node: Any, into: list[Command], conditional: bool) -> None:
    """``while`` runs its body on every path when its test is constant true (``until``:
    false)."""
    cond: list[Command] = []
    _statements(node.children_by_field_name("condition"), cond, conditional)
    into.extend(cond)
    certain = not conditional and _truth(cond) == (node.children[0].type == "while")
    _walk(node.child_by_field_name("body"), into, not certain)
