"""gpuops/ has no import cycles, and no import runs back up a floor: every import counts, at the
top of a module or inside a function.

A lazy import inside a function is still an edge: one placed there to dodge a cycle hides the
cycle from Python, not from this test. The fix for a cycle is to move the shared piece down
(as store/opener.py holds ``open_store`` above base.py and the backends).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpuops"

# Known cycles, each as a sorted pair of modules, and nothing else may join the list.
KNOWN_CYCLES: frozenset[tuple[str, str]] = frozenset()


def module_names(package: Path) -> dict[str, Path]:
    """Every module under ``package`` by dotted name (a package by its own name)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _owner(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module ``name`` lives in: itself, or the nearest enclosing module we know."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path, modules: Mapping[str, Path]) -> Iterator[str | None]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (_owner(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"  # `from gpuops import timing` names a module
                yield _owner(full if full in modules else base, modules)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, anywhere in its source."""
    modules = module_names(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = set(_imported(module, path, modules))
        graph[module] = {name for name in found if name is not None and name != module}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def _pairs(component: list[str], graph: Mapping[str, set[str]]) -> set[tuple[str, str]]:
    """The two-way edges inside a cycle, as sorted pairs: what KNOWN_CYCLES lists."""
    return {
        (a, b) for a in component for b in component if a < b and b in graph[a] and a in graph[b]
    }


def _explained(component: list[str], graph: Mapping[str, set[str]]) -> bool:
    """A cycle is known when every edge inside it belongs to a known pair."""
    edges = {(a, b) for a in component for b in graph[a] if b in component}
    return all(tuple(sorted(edge)) in KNOWN_CYCLES for edge in edges)


def test_gpuops_has_no_import_cycle_but_the_known_demo_pairs() -> None:
    """No module of gpuops/ reaches itself through imports, lazy and typing-only ones included."""
    graph = import_graph(PACKAGE)

    unknown = [component for component in cycles(graph) if not _explained(component, graph)]

    assert unknown == [], f"import cycles in gpuops/: {unknown}"


def test_the_known_cycle_is_still_there_or_its_entry_goes() -> None:
    """The allow-list stays honest: an entry whose cycle is gone must be removed."""
    graph = import_graph(PACKAGE)

    present = {pair for component in cycles(graph) for pair in _pairs(component, graph)}

    assert present >= KNOWN_CYCLES


def test_a_lazy_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    """An import inside a function is an edge like a top-level one, relative ones too."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "errors.py").write_text("def f():\n    from pkg.events import scrub\n")
    (package / "events.py").write_text("from pkg import errors\n")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("def g():\n    from .a import x\n")
    (package / "sub" / "c.py").write_text("import pkg.sub.a\nimport json\n")

    graph = import_graph(package)

    assert cycles(graph) == [["pkg.errors", "pkg.events"], ["pkg.sub.a", "pkg.sub.b"]]
    assert graph["pkg.sub.c"] == {"pkg.sub.a"}


def test_the_store_backends_and_base_no_longer_import_each_other() -> None:
    """base.py imports no backend; opener.py, above them all, opens a store by URL."""
    graph = import_graph(PACKAGE)

    assert not graph["gpuops.store.base"] & {"gpuops.store.local", "gpuops.store.s3"}
    assert {"gpuops.store.local", "gpuops.store.s3"} <= graph["gpuops.store.opener"]
    assert "gpuops.events" not in graph["gpuops.errors"]


# --- the floors: what must never be imported --------------------------------------------------
# gpuops is built in floors: the values (model, errors, timing, clock, secrets) at the ground,
# the store, events and the typed events above them, the adapters (providers/), the market, the
# analysis that learns from the market's log, and the commands on top. An import from a lower
# floor up to a higher one is a "back-up arrow"; each rule below names one that was there and
# was removed, with where its piece lives now.


@dataclass(frozen=True)
class Never:
    """No module under ``importer`` imports one under ``imported`` (either is a module or a
    package, by dotted name), except the modules in ``but``."""

    importer: str
    imported: str
    why: str
    but: tuple[str, ...] = ()


NEVER: tuple[Never, ...] = (
    Never("gpuops.event_types", "gpuops.market",
          "the typed events sit below the market: the verdicts they name are the model's"),
    Never("gpuops.providers", "gpuops.market",
          "an adapter is transport; the probe loop is the market's (market/probing.py)"),
    Never("gpuops.market", "gpuops.analysis",
          "the ranker that learns from the log is wired by the command (open_market's rank)"),
    Never("gpuops.analysis", "gpuops.market",
          "the analysis reads the log's typed events and the model; of the market only the "
          "policy it evaluates (select.py: its floors, propensities and explore rate)",
          but=("gpuops.market.select",)),
)  # fmt: skip

# Modules that may import only these modules of gpuops (a pure core and what it stands on).
ONLY: dict[str, frozenset[str]] = {
    # the race's decisions are pure: values and durations, never the store-backed quarantine
    "gpuops.market.race": frozenset(
        {"gpuops.errors", "gpuops.model", "gpuops.secrets", "gpuops.timing"}
    ),
}

# Names that live in one module and must be taken from it, never from a module above that
# happens to import them too: module -> the names it must not be asked for.
MOVED: dict[str, frozenset[str]] = {
    "gpuops.market.probe": frozenset({"Verdict", "StepOutput", "HOST_FAULTS", "is_host_fault"}),
    "gpuops.market.quarantine": frozenset({"HOST_FAULTS", "is_host_fault", "Verdict"}),
}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def broken_nevers(graph: Mapping[str, set[str]]) -> list[str]:
    """Every edge that breaks a NEVER or ONLY rule, as 'importer -> imported'."""
    found = []
    for module, imports in sorted(graph.items()):
        for target in sorted(imports):
            for rule in NEVER:
                if (
                    _under(module, rule.importer)
                    and _under(target, rule.imported)
                    and target not in rule.but
                ):
                    found.append(f"{module} -> {target} ({rule.why})")
            allowed = ONLY.get(module)
            if allowed is not None and target not in allowed:
                found.append(f"{module} -> {target} (only {sorted(allowed)})")
    return found


def moved_names_taken(package: Path) -> list[str]:
    """Every place a module of ``package`` takes a MOVED name from the module it left: a
    ``from M import NAME``, or ``ALIAS.NAME`` where ALIAS is bound to M."""
    found = []
    for module, path in module_names(package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in MOVED:
                for alias in node.names:
                    if alias.name in MOVED[node.module]:
                        found.append(f"{module}: {alias.name} from {node.module}")
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MOVED:
                        aliases[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MOVED and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                source = aliases.get(node.value.id)
                if source is not None and node.attr in MOVED[source]:
                    found.append(f"{module}: {node.attr} from {source}")
    return sorted(found)


def floors(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The graph between floors' rooms: each subpackage of gpuops (market, analysis, providers,
    lane, store) as one room, each top-level module as its own."""

    def room(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2])

    rooms: dict[str, set[str]] = {}
    for module, imports in graph.items():
        here = rooms.setdefault(room(module), set())
        here.update(room(target) for target in imports if room(target) != room(module))
    return rooms


def test_no_import_runs_back_up_a_floor() -> None:
    """Every NEVER and ONLY rule holds over gpuops/, lazy and typing-only imports included."""
    assert broken_nevers(import_graph(PACKAGE)) == []


def test_the_verdicts_and_host_faults_are_taken_from_the_model() -> None:
    """Nothing in gpuops/ asks market/probe.py or the quarantine for Verdict, StepOutput or the
    host-fault set: gpuops/model.py holds them."""
    assert moved_names_taken(PACKAGE) == []


def test_the_floors_have_no_cycle_between_folders() -> None:
    """No two of gpuops' folders (or top-level modules) reach each other through imports: every
    arrow between them runs one way, down."""
    assert cycles(floors(import_graph(PACKAGE))) == []


def test_each_floor_rule_sees_its_arrow(tmp_path: Path) -> None:
    """Each rule fails on a package that breaks it, so a kept rule is a real one."""
    package = tmp_path / "gpuops"
    for folder in ("market", "providers", "analysis"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "event_types.py").write_text("from gpuops.market.probe import Verdict\n")
    (package / "market" / "probe.py").write_text("from gpuops.model import Verdict\n")
    (package / "market" / "select.py").write_text("")
    (package / "market" / "quarantine.py").write_text("from gpuops.model import Verdict\n")
    (package / "market" / "race.py").write_text(
        "from gpuops.errors import X\nfrom gpuops.market.quarantine import is_host_fault\n"
    )
    (package / "market" / "session.py").write_text(
        "def f():\n    from gpuops.analysis.learned import ranker\n"
    )
    (package / "providers" / "ssh.py").write_text("from gpuops.market import probe\nprobe.judge\n")
    (package / "analysis" / "learned.py").write_text("")
    (package / "analysis" / "stats.py").write_text(
        "from gpuops.market import probe as p\nfrom gpuops.market.select import FLOOR\np.Verdict\n"
    )

    graph = import_graph(package)
    broken = [line.split(" (")[0] for line in broken_nevers(graph)]

    assert broken == [
        "gpuops.analysis.stats -> gpuops.market.probe",
        "gpuops.event_types -> gpuops.market.probe",
        "gpuops.market.race -> gpuops.market.quarantine",
        "gpuops.market.session -> gpuops.analysis.learned",
        "gpuops.providers.ssh -> gpuops.market.probe",
    ]
    assert moved_names_taken(package) == [
        "gpuops.analysis.stats: Verdict from gpuops.market.probe",
        "gpuops.event_types: Verdict from gpuops.market.probe",
        "gpuops.market.race: is_host_fault from gpuops.market.quarantine",
    ]
    assert cycles(floors(graph)) == [["gpuops.analysis", "gpuops.market"]]
