"""Argv fuzzing of the CLI, shared by the suite's slice (tests/test_cli_fuzz.py) and the
benchmark (tests/benchmarks/bench_cli_fuzz.py): every case must be a clean usage error, a typed
refusal or success, never a traceback. Only commands that touch no provider and never sleep
are fuzzed; a throwaway state dir and no provider environment are the caller's job."""

from __future__ import annotations

import contextlib
import io

from hypothesis import strategies as st

from gpuops import cli

# commands that read or write only the local state (or nothing), plus market commands that
# fail cleanly (no provider environment) before any call
COMMANDS = [
    ["rules"], ["boxes"], ["stats"], ["incident", "list"], ["incident", "add"],
    ["policy", "eval"], ["rent", "box"], ["offers"], ["guard"], ["watch", "box"],
    ["destroy", "box"], ["lane", "board"], ["lane", "claim"], ["record", "vast"],
    ["logs", "box"], ["logs"], ["ssh", "box"], ["cost"],
]  # fmt: skip
OPTIONS = [
    "--hours", "--race", "--vram-gb", "--disk-gb", "--gpu", "--json", "--all", "--since",
    "--log", "--policy", "--date", "--what", "--cost-usd", "--rule", "--timeout", "--once",
    "--job", "--max-usd", "--operator", "--deadline", "--print-systemd-unit", "-h",
    "--lines", "--follow", "--lane", "--by", "--print-config",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e9", "1e308", "0.1", "3", "2026-13-40",
                     "RTX 4090", "rtx 4090", "", "-", "--", "%", "%s", "../x", "/dev/null",
                     "greedy", "no spaces", "\u00e9", "L1"]),
    st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers().map(str),
)  # fmt: skip


def _never_serves(argv: list[str]) -> bool:
    """Leave out `guard ... --all`: a well-formed one is the guardian service, which runs until
    a signal stops it (in-process here, it would hold the fuzz for ever)."""
    return not (argv[0] == "guard" and "--all" in argv)


ARGV = st.builds(
    lambda command, rest: [*command, *rest],
    st.sampled_from(COMMANDS),
    st.lists(st.one_of(st.sampled_from(OPTIONS), VALUES), max_size=6),
).filter(_never_serves)


def run_case(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of one in-process run; argparse's own exits count as codes."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(argv)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 2
    return code, err.getvalue()


def clean(code: int, stderr: str) -> bool:
    """A usage error, a typed refusal or unavailability, or success: never a traceback."""
    return code in (0, 2, 3, 4, 5, 6) and "Traceback" not in stderr
