"""The demo's story: each step as a row (what happened, the rule, the evidence), the live
narration, the closing table and the verdict. Used by gpuops/demo/__init__.py and both acts."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from dataclasses import asdict, dataclass

from gpuops.errors import ExitCode
from gpuops.progress import colour_on, paint

WIDTH = 96


@dataclass(frozen=True)
class Row:
    act: str
    happened: str
    rule: str
    rule_id: str
    evidence: str
    held: bool
    refused_by: str | None = None


class Story:
    """The rows, and the live narration (suppressed under --json)."""

    def __init__(self, as_json: bool, colour: bool = False) -> None:
        """``colour``: Settings.colour (NO_COLOR, TERM); used only on a terminal."""
        self.as_json = as_json
        self.rows: list[Row] = []
        self.colour = not as_json and colour_on(sys.stdout, colour)
        self.interrupted = False

    def _print(self, text: str) -> None:
        if not self.as_json:
            print(text, flush=True)

    def heading(self, text: str) -> None:
        self._print("\n" + paint(text, "bold", self.colour))

    def say(self, text: str) -> None:
        indent = "    " if text.startswith("  ") else "  "
        self._print(textwrap.fill(text.strip(), WIDTH, initial_indent=indent,
                                  subsequent_indent=indent))  # fmt: skip

    def check(
        self,
        act: str,
        happened: str,
        rule: str,
        rule_id: str,
        evidence: str,
        held: bool,
        refused_by: str | None = None,
    ) -> None:
        self.rows.append(Row(act, happened, rule, rule_id, evidence, bool(held), refused_by))
        mark = paint("ok  ", "green", self.colour) if held else paint("FAIL", "red", self.colour)
        lines = textwrap.wrap(happened, WIDTH - 7) + [
            paint(line, "dim", self.colour) for line in textwrap.wrap(evidence, WIDTH - 9)
        ]
        for index, line in enumerate(lines):
            self._print(f"  {mark} {line}" if index == 0 else f"         {line}")

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.held for r in self.rows) and not self.interrupted

    def finish(self, seconds: float) -> int:
        verdict = (
            "PASSED: nothing leaked"
            if self.passed
            else "INTERRUPTED: cleaned up, see the table"
            if self.interrupted
            else "FAILED: " + "; ".join(r.happened for r in self.rows if not r.held)
        )
        if self.as_json:
            json.dump(
                {
                    "passed": self.passed,
                    "interrupted": self.interrupted,
                    "verdict": verdict,
                    "seconds": round(seconds, 1),
                    "rows": [asdict(r) for r in self.rows],
                },
                sys.stdout,
                indent=2,
            )
            sys.stdout.write("\n")
        else:
            self._table()
            colour = "green" if self.passed else "red"
            print(f"\n{paint(verdict, colour, self.colour)}  ({seconds:.0f} s)", flush=True)
        if self.passed:
            return ExitCode.OK
        return ExitCode.signalled(signal.SIGINT) if self.interrupted else ExitCode.ERROR

    def _table(self) -> None:
        print("\n" + paint("What happened, the rule that held, and the evidence", "bold",
                           self.colour))  # fmt: skip
        head = f"  {'':4} {'RULE':<7} {'WHAT HAPPENED / THE RULE / THE EVIDENCE (from the fakes)'}"
        print(head)
        for row in self.rows:
            mark = "ok" if row.held else "FAIL"
            mark = paint(f"{mark:<4}", "green" if row.held else "red", self.colour)
            lines = [row.happened, f"rule: {row.rule}", f"evidence: {row.evidence}"]
            first = True
            for text in lines:
                for piece in textwrap.wrap(text, WIDTH - 15) or [""]:
                    lead = f"  {mark} {row.rule_id or '-':<7} " if first else " " * 15
                    print(lead + piece)
                    first = False
