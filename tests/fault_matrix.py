"""Writes docs/fault-matrix.md from the tests' own `@pytest.mark.fault(mode, handled=...)` marks.

Reads the test files' syntax trees (nothing is imported or run), so it is fast and the table
cannot claim a test that does not exist. Usage, from the checkout root:

    .venv/bin/python tests/fault_matrix.py           # print the table
    .venv/bin/python tests/fault_matrix.py --write   # write docs/fault-matrix.md

tests/test_docs.py fails while the committed file differs from what this generates.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "fault-matrix.md"

HEADER = """# Fault matrix

Every failure mode gpuops knows about, what it does when the failure happens, and the test that
shows it. Generated from the tests' `@pytest.mark.fault(...)` marks by
`tests/fault_matrix.py --write`; do not edit by hand (tests/test_docs.py fails if this file
and the tests disagree). The rules cited are explained in [rules.md](rules.md).

| failure mode | what gpuops does | shown by |
|---|---|---|
"""


@dataclass(frozen=True, order=True)
class Fault:
    mode: str
    handled: str
    test: str  # tests/file.py::test_name


def _is_fault_mark(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (
        isinstance(target, ast.Attribute)
        and target.attr == "fault"
        and isinstance(target.value, ast.Attribute)
        and target.value.attr == "mark"
    )


def faults_in(path: Path) -> list[Fault]:
    """The fault marks on the test functions of one file; a malformed mark is an error."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if not _is_fault_mark(decorator):
                continue
            if not isinstance(decorator, ast.Call) or len(decorator.args) != 1:
                raise ValueError(f"{path.name}::{node.name}: fault(mode, handled=...) expected")
            keywords = {k.arg: k.value for k in decorator.keywords}
            mode, handled = decorator.args[0], keywords.get("handled")
            if not (
                isinstance(mode, ast.Constant)
                and isinstance(mode.value, str)
                and isinstance(handled, ast.Constant)
                and isinstance(handled.value, str)
            ):
                raise ValueError(f"{path.name}::{node.name}: mode and handled must be strings")
            test = f"{path.relative_to(ROOT).as_posix()}::{node.name}"
            found.append(Fault(mode.value, handled.value, test))
    return found


def collect(tests_dir: Path = ROOT / "tests") -> list[Fault]:
    return sorted(f for path in sorted(tests_dir.rglob("test_*.py")) for f in faults_in(path))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(faults: list[Fault]) -> str:
    rows = [f"| {_cell(f.mode)} | {_cell(f.handled)} | `{f.test}` |" for f in faults]
    return HEADER + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    text = render(collect())
    if argv == ["--write"]:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET.relative_to(ROOT)} ({text.count(chr(10)) - HEADER.count(chr(10))} faults)")
        return 0
    if argv:
        print("usage: tests/fault_matrix.py [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
