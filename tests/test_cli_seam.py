"""The CLI's seam is typed (one shape: the CLI only parses, calls and prints): no function in
gpuops/cli/ takes or returns ``Any``, so mypy --strict checks every call the command line makes
into the market, the lane and the rest. A JSON payload (``dict[str, Any]``) is the one
exception: it is what a command prints."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "gpuops" / "cli"
# JSON values as a command prints them: the only place Any may stand in a signature
JSON_SHAPES = ("dict[str, Any]", "list[Any]")


def untyped(source: str) -> list[str]:
    """Every parameter or return of a function in ``source`` annotated with Any, or with
    none at all (mypy --strict refuses the latter too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        shown = [(p.arg, p.annotation) for p in params if p.arg not in ("self", "cls")]
        for name, annotation in [*shown, ("return", node.returns)]:
            text = "" if annotation is None else ast.unparse(annotation)
            for shape in JSON_SHAPES:
                text = text.replace(shape, "")
            if annotation is None or "Any" in text:
                found.append(f"{node.name}({name}: {ast.unparse(annotation) if annotation else '?'})")
    return found


def test_the_scan_finds_an_any_parameter_and_a_missing_annotation():
    source = "def f(market: Any, rows: dict[str, Any]) -> int: ...\ndef g(x) -> None: ...\n"
    assert untyped(source) == ["f(market: Any)", "g(x: ?)"]
    assert untyped("def h(view: dict[str, Any]) -> list[dict[str, Any]]: ...") == []


def test_no_function_of_the_cli_takes_or_returns_any():
    found = {
        path.name: untyped(path.read_text())
        for path in sorted(CLI.glob("*.py"))
    }
    assert {name: where for name, where in found.items() if where} == {}
