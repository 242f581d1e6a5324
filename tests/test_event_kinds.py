"""Every event kind is typed: a scan of gpuops/ that fails on an event written by a bare kind
(a free-form ``log.append("x.y", ...)``), on a kind spelled by hand instead of by its type's
``KIND``. Kept out of the mutation gate's own tests (mutmut rewrites the sources it would
scan); the registry's own test is in tests/test_event_ops.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuops import event_types as ev

PACKAGE = Path(__file__).resolve().parent.parent / "gpuops"
# where the kinds are declared and written (event_base's ``write``, the one typed append):
# the modules the scan leaves alone
DECLARED = frozenset({"event_types.py", "event_ops.py", "event_base.py"})
# Every module names a kind by its type (the analysis folds' KINDS sets too).
SPELLED_BY_VALUE: frozenset[str] = frozenset()
# sinks that pass on whatever kind they are given (the writers call them with a typed event)
FORWARDERS = frozenset({("market/guard.py", "append")})
_LOOKS_LIKE_A_KIND = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+")


def _typed_write(call: ast.Call) -> bool:
    """``sink.append(event.KIND, **event.to_payload())``: the one shape of a typed append."""
    if len(call.args) != 1 or len(call.keywords) != 1:
        return False
    (kind,), (payload,) = call.args, call.keywords
    return (
        isinstance(kind, ast.Attribute)
        and kind.attr == "KIND"
        and payload.arg is None
        and isinstance(payload.value, ast.Call)
        and isinstance(payload.value.func, ast.Attribute)
        and payload.value.func.attr == "to_payload"
        and _same_type(payload.value.func.value, kind.value)
    )


def _same_type(built: ast.expr, kind_of: ast.expr) -> bool:
    """The payload is the KIND's own event: the same name, or one built of the same type."""
    if isinstance(built, ast.Call):
        built = built.func
    return ast.dump(built) == ast.dump(kind_of)


def free_writes(source: str, where: str) -> list[str]:
    """Each event in ``source`` written or read by a bare kind, as ``where:line: what``."""
    found: list[str] = []
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]

    def inside(node: ast.AST) -> str:
        lineno = getattr(node, "lineno", 0)
        around = [f for f in functions if f.lineno <= lineno <= (f.end_lineno or f.lineno)]
        return min(around, key=lambda f: (f.end_lineno or 0) - f.lineno).name if around else ""

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            bare = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if bare and node.keywords and _LOOKS_LIKE_A_KIND.fullmatch(first.value):  # type: ignore[union-attr]
                found.append(f"{where}:{node.lineno}: {name}({first.value!r}, ...) by a bare kind")  # type: ignore[union-attr]
            elif (
                name == "append"
                and len(node.args) == 1  # an event sink's shape: (kind, /, **payload)
                and node.keywords
                and not _typed_write(node)
                and (where, inside(node)) not in FORWARDERS
            ):
                found.append(f"{where}:{node.lineno}: an append not of a typed event's KIND")
        elif (
            isinstance(node, ast.Constant)
            and node.value in ev.ALL_KINDS
            and where not in SPELLED_BY_VALUE
        ):
            found.append(f"{where}:{node.lineno}: the kind {node.value!r} spelled by hand")
    return sorted(found, key=lambda said: int(said.split(":")[1]))


def test_no_module_writes_or_reads_an_event_by_a_bare_kind():
    """Every event in gpuops/ is written through its type (``write(sink, event)``, a wrapper
    taking the event, or ``append(event.KIND, **event.to_payload())``), and named by its KIND."""
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if path.name not in DECLARED:
            found += free_writes(path.read_text(encoding="utf-8"), where)
    assert found == []


def test_the_scan_finds_a_free_form_write_a_hand_spelled_kind_and_an_untyped_append():
    """The scan can fail: a new free kind, a registered kind spelled by hand (a reader's or a
    writer's), and an append of a kind held in a variable are each named; typed ones are not."""
    source = """
def f(log, event, kind, payload, fakes):
    log.append("guard.new_thing", code=1)
    self._log("lane.whatever", job="j")
    fakes.events_of("guard.exit", "n")
    log.append(kind, **payload)
    log.append(event.KIND, **event.to_payload())
    write(log, ops.GuardAllStart(pid=1))
    lines.append("a.b")
"""
    assert free_writes(source, "x.py") == [
        "x.py:3: append('guard.new_thing', ...) by a bare kind",
        "x.py:4: _log('lane.whatever', ...) by a bare kind",
        "x.py:5: the kind 'guard.exit' spelled by hand",
        "x.py:6: an append not of a typed event's KIND",
    ]
    assert free_writes(source.replace("log.append(event", "log.append(other"), "x.py")[-1] == (
        "x.py:7: an append not of a typed event's KIND"
    )
