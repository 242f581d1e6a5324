"""A startup script, parsed: every simple command with where and when it runs (for the linter).

The linter (gpuops/lane/script.py) judges what a script *does*, so it reads a parse, not lines:
a fetch spelt as a raw ``gsutil cp "$PREFIX/inputs/x"``, a fetch inside ``if true``, a second
``export JOB=...`` are all commands here, whatever their layout. The parser is tree-sitter's bash grammar (``tree-sitter`` + ``tree-sitter-bash``, pinned in
pyproject.toml; imported lazily). bashlex was tried first: it cannot parse ``$(a || b)``,
``case`` or ``$((...))``, all common in startup scripts (the template has the first). A script
with a syntax error is ``Parsed.error``: the linter refuses it rather than guessing.

Each command records its words (quotes removed, as the shell would pass them), which words
hold an expansion, and how it runs: ``conditional`` (it may not run on every path: inside a
branch or loop body whose test is not constant, or after ``&&``/``||``), ``guarded`` (a
failure is caught by a following ``||``), ``background`` (``&``). Function bodies are kept per
function, not as top-level commands: they run where they are called.
"""

from __future__ import annotations

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
    assignments: tuple[str, ...] = ()  # NAME=value prefixes (and bare assignment commands)
    inner: tuple[Command, ...] = ()  # commands in its $(...) substitutions

    @property
    def name(self) -> str:
        return self.words[0] if self.words else ""


@dataclass
class Parsed:
    top: list[Command] = field(default_factory=list)
    functions: dict[str, list[Command]] = field(default_factory=dict)
    error: str | None = None
    text: str = ""  # what was parsed; positions index into it


def constant(command: Command) -> bool | None:
    """True or False when the command's status is known without running it; else None."""
    words, literal = command.words, command.literal
    if not words or not all(literal):
        return None
    if len(words) == 1 and words[0] in TRUE_COMMANDS:
        return True
    if len(words) == 1 and words[0] in FALSE_COMMANDS:
        return False
    inner: tuple[str, ...] = ()
    if words[0] == "[" and words[-1] == "]":
        inner = words[1:-1]
    elif words[0] == "[[" and words[-1] == "]]":
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
_DECLARERS = frozenset({"export", "declare", "typeset", "readonly", "local"})


def parse(text: str) -> Parsed:
    from tree_sitter import Language, Parser
    import tree_sitter_bash

    out = Parsed(text=text)
    data = text.encode("utf-8")
    tree = Parser(Language(tree_sitter_bash.language())).parse(data)
    if tree.root_node.has_error:
        out.error = f"a syntax error near byte {_first_error(tree.root_node)}"
        return out
    _statements(tree.root_node.children, out, out.top, False)
    return out


def _first_error(node: Any) -> int:
    pending = [node]
    while pending:
        current = pending.pop(0)
        if current.type == "ERROR" or current.is_missing:
            return int(current.start_byte)
        pending.extend(current.children)
    return 0


def _word(node: Any) -> tuple[str, bool]:
    """A word as the shell passes it (quotes removed) and whether it holds no expansion."""
    literal = not _has(node, _EXPANSIONS)
    return _unquote(node), literal


def _has(node: Any, kinds: frozenset[str]) -> bool:
    if node.type in kinds:
        return True
    return any(_has(child, kinds) for child in node.children)


def _unquote(node: Any) -> str:
    kind = node.type
    text = node.text.decode("utf-8", "replace")
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        return "".join(
            _unquote(c) for c in node.children if c.type not in ('"',)
        )
    if kind == "concatenation":
        return "".join(_unquote(c) for c in node.children)
    return text


def _statements(nodes: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    """Statements in order; a ``&`` after one puts it in the background."""
    items = list(nodes)
    for index, node in enumerate(items):
        if not node.is_named or node.type == "comment":
            continue
        start = len(into)
        _walk(node, out, into, conditional)
        following = items[index + 1] if index + 1 < len(items) else None
        if following is not None and following.type == "&":
            for k in range(start, len(into)):
                into[k] = _replace(into[k], background=True)


def _walk(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    kind = node.type
    if kind in ("command", "declaration_command", "test_command", "variable_assignment"):
        into.append(_command(node, out, conditional))
    elif kind == "list":
        _list(node, out, into, conditional)
    elif kind == "function_definition":
        body: list[Command] = []
        _walk(node.child_by_field_name("body"), out, body, False)
        out.functions[node.child_by_field_name("name").text.decode()] = body
    elif kind == "if_statement":
        _if(node, out, into, conditional)
    elif kind == "for_statement":
        _for(node, out, into, conditional)
    elif kind == "while_statement":
        _loop(node, out, into, conditional)
    elif kind in ("case_statement", "c_style_for_statement"):
        _statements(node.children, out, into, True)
    elif kind == "negated_command":
        _statements(node.children, out, into, conditional)
    else:  # pipeline, subshell, compound_statement, do_group, redirected_statement, ...
        _statements(node.children, out, into, conditional)
        for child in node.children:
            if child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                _substitutions(child, out, into, conditional)


def _command(node: Any, out: Parsed, conditional: bool) -> Command:
    words: list[str] = []
    literal: list[bool] = []
    assignments: list[str] = []
    inner: list[Command] = []
    kind = node.type
    for child in node.children:
        _substitutions(child, out, inner, conditional)
        if kind == "variable_assignment":
            continue
        if child.type == "variable_assignment" and not words and kind == "command":
            assignments.append(_assignment(child))
        elif child.type in ("command_name",):
            word, lit = _word(child.children[0] if child.children else child)
            words.append(word)
            literal.append(lit)
        elif kind == "declaration_command" and not child.is_named and child.type in _DECLARERS:
            words.append(child.type)
            literal.append(True)
        elif kind == "declaration_command" and child.type == "variable_assignment":
            words.append(_assignment(child))
            literal.append(not _has(child, _EXPANSIONS))
        elif kind == "test_command" and not child.is_named and child.type in ("[", "]", "[[", "]]"):
            words.append(child.type)
            literal.append(True)
        elif child.is_named and child.type not in ("file_redirect", "heredoc_redirect",
                                                    "herestring_redirect", "comment"):
            if kind == "test_command" and child.type in ("binary_expression", "unary_expression"):
                for part in child.children:
                    word, lit = _word(part)
                    words.append(word)
                    literal.append(lit)
                continue
            word, lit = _word(child)
            words.append(word)
            literal.append(lit)
    if kind == "variable_assignment":
        assignments.append(_assignment(node))
    return Command(
        tuple(words),
        tuple(literal),
        int(node.start_byte),
        conditional=conditional,
        assignments=tuple(assignments),
        inner=tuple(inner),
    )


def _assignment(node: Any) -> str:
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    text = name.text.decode() + "="
    if value is not None:
        text += _unquote(value) if not _has(value, _EXPANSIONS) else value.text.decode()
    return text


def _substitutions(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    if node.type in _SUBSTITUTIONS:
        _statements(node.children, out, into, conditional)
        return
    for child in node.children:
        _substitutions(child, out, into, conditional)


def _flatten(node: Any) -> tuple[list[Any], list[str]]:
    """``a && b || c`` (left-nested lists) as items and the operators between them."""
    items: list[Any] = []
    ops: list[str] = []
    for child in node.children:
        if child.type == "list":
            more, more_ops = _flatten(child)
            items += more
            ops += more_ops
        elif child.type in ("&&", "||"):
            ops.append(child.type)
        elif child.is_named and child.type != "comment":
            items.append(child)
    return items, ops


def _list(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    items, ops = _flatten(node)
    previous: list[Command] = []
    for index, item in enumerate(items):
        before = ops[index - 1] if index > 0 else None
        after = ops[index] if index < len(ops) else None
        known = _truth(previous)
        maybe = conditional or (before == "&&" and known is not True) or (
            before == "||" and known is not False
        )
        start = len(into)
        _walk(item, out, into, maybe)
        if after == "||":
            for k in range(start, len(into)):
                into[k] = _replace(into[k], guarded=True)
        previous = into[start:]


def _truth(commands: list[Command]) -> bool | None:
    return constant(commands[-1]) if len(commands) == 1 else None


def _replace(command: Command, **changes: Any) -> Command:
    import dataclasses

    return dataclasses.replace(command, **changes)


def _if(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    """``if`` runs its test; the first branch runs on every path only when the test is
    constant true, ``else`` only when every test before it is constant false."""
    decided_false = True  # every test so far is constant false
    taken = False  # some test so far is constant true: later branches never run
    phase = ""
    cond: list[Command] = []
    for child in node.children:
        if child.type in ("if", "then", "fi"):
            phase = child.type
            if phase == "then":
                truth = _truth(cond)
                into.extend(cond)
                certain = not conditional and truth is True and not taken and decided_false
                decided_false = decided_false and truth is False
                taken = taken or truth is True
            continue
        if child.type in ("elif_clause", "else_clause"):
            if child.type == "elif_clause":
                sub: list[Command] = []
                for part in child.children:
                    if part.type == "then":
                        break
                    if part.is_named:
                        _walk(part, out, sub, conditional or not decided_false)
                into.extend(sub)
                truth = _truth(sub)
                body_certain = not conditional and decided_false and truth is True and not taken
                seen_then = False
                for part in child.children:
                    if part.type == "then":
                        seen_then = True
                    elif seen_then and part.is_named:
                        _walk(part, out, into, not body_certain)
                decided_false = decided_false and truth is False
                taken = taken or truth is True
            else:
                certain_else = not conditional and decided_false and not taken
                _statements(child.children, out, into, not certain_else)
            continue
        if not child.is_named or child.type == "comment":
            continue
        if phase == "if":
            _walk(child, out, cond, conditional)
        elif phase == "then":
            _walk(child, out, into, not certain)


def _for(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    values = [c for c in node.children if node.field_name_for_child(_index(node, c)) == "value"]
    certain = bool(values) and not any(_has(v, _EXPANSIONS) for v in values) and not conditional
    body = node.child_by_field_name("body")
    if body is not None:
        _walk(body, out, into, not certain)


def _index(parent: Any, child: Any) -> int:
    for index, candidate in enumerate(parent.children):
        if candidate.id == child.id:
            return index
    return -1


def _loop(node: Any, out: Parsed, into: list[Command], conditional: bool) -> None:
    keyword = node.children[0].type  # while | until
    cond: list[Command] = []
    body = node.child_by_field_name("body")
    for child in node.children[1:]:
        if body is not None and child.id == body.id:
            break
        if child.is_named and child.type != "comment":
            _walk(child, out, cond, conditional)
    into.extend(cond)
    truth = _truth(cond)
    certain = not conditional and truth is not None and truth == (keyword == "while")
    if body is not None:
        _walk(body, out, into, not certain)
