"""No collaborator is swapped after construction: a Market or a Guardian gets its clock, provider,
prober, ranker and pace from its constructor, and nothing assigns to one afterwards.

An ``ast`` scan of gpuops/, fakes/ and tests/: in each function, a name holds a Market or a
Guardian when it is a parameter annotated with one, or is bound to ``Market(...)``,
``Guardian(...)``, ``open_market(...)``, ``X.on(...)`` or ``copy.copy(X)`` of such a name;
``something.market`` and ``something.guardian`` hold one too. An assignment to an attribute of
any of these is a swap. A market that needs another clock or provider is a new one:
``Market.on(clock=..., vast=..., probe=...)``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("gpuops", "fakes", "tests")
HOLDERS = frozenset({"Market", "Guardian"})
MAKERS = frozenset({"Market", "Guardian", "open_market"})
HELD_AS = frozenset({"market", "guardian"})  # self.market, world.guardian, ...


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _annotated_holder(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = annotation.value if isinstance(annotation, ast.Constant) else ast.unparse(annotation)
    return any(holder in str(text).replace(".", " ").replace("|", " ").split() for holder in HOLDERS)


def _makes_holder(value: ast.expr, held: set[str]) -> bool:
    if not isinstance(value, ast.Call):
        return False
    called = _last_name(value.func)
    if called in MAKERS:
        return True
    if called == "on" and isinstance(value.func, ast.Attribute):
        return _holds(value.func.value, held)
    if called == "copy" and value.args:
        return _holds(value.args[0], held)
    return False


def _holds(node: ast.expr, held: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in held
    return isinstance(node, ast.Attribute) and node.attr in HELD_AS


def _stores(node: ast.AST) -> Iterator[ast.Attribute]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    for target in targets:
        for part in ast.walk(target):
            if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                yield part


def swaps_in(source: str) -> list[tuple[int, str]]:
    """(line, target) of every assignment to an attribute of a Market or a Guardian."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    scopes: list[ast.AST] = [tree]
    scopes += [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for scope in scopes:
        held: set[str] = set()
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = scope.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            held |= {a.arg for a in every if _annotated_holder(a.annotation)}
        body = [n for n in ast.walk(scope) if isinstance(n, ast.stmt)]
        for _ in range(2):  # a name made from another held name, whatever their order
            for statement in body:
                if isinstance(statement, ast.Assign) and _makes_holder(statement.value, held):
                    held |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        for statement in body:
            for store in _stores(statement):
                if _holds(store.value, held):
                    found.append((statement.lineno, ast.unparse(store)))
    return sorted(set(found))


def swaps(root: Path) -> dict[str, list[tuple[int, str]]]:
    """Every swap under ``root``'s scanned folders, by file (relative to ``root``)."""
    found = {}
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            hits = swaps_in(path.read_text(encoding="utf-8"))
            if hits:
                found[path.relative_to(root).as_posix()] = hits
    return found


def test_no_market_or_guardian_has_a_collaborator_assigned_after_construction():
    """Every collaborator of a Market or a Guardian is a constructor argument: no file assigns
    to an attribute of one once it is built."""
    assert swaps(ROOT) == {}


def test_the_scan_sees_each_way_a_collaborator_was_swapped():
    """The shapes the scan must catch: on a parameter annotated Market, on a name bound to
    Market(...), open_market(...), copy.copy(market) or market.on(...), and on self.market;
    assignments to the object's own attributes inside its class, or to anything else, pass."""
    source = '''
def guard(market: Market, other: "Guardian | None") -> None:
    market.sleep = sleep
    other.clock = clock

def session():
    market = Market(vast)
    market.pace = pace
    opened = open_market(settings)
    opened.pass_rates = None
    shared = copy.copy(opened)
    shared.vast = paced
    again = shared.on(clock=clock)
    again.probe = probe

class Guardian:
    def __init__(self, market: Market) -> None:
        self.market = market
        self.market.clock = clock
        self.mind = mind

def elsewhere(board, counts):
    board.state = "x"
    counts.events += 1
'''
    lines = source.splitlines()

    hits = [(lines[line - 1].strip(), target) for line, target in swaps_in(source)]

    assert [target for _, target in hits] == [
        "market.sleep",
        "other.clock",
        "market.pace",
        "opened.pass_rates",
        "shared.vast",
        "again.probe",
        "self.market.clock",
    ]

