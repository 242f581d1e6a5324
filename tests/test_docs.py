"""The documentation is self-contained and cannot drift from the tests it describes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fault_matrix

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "fakes" / "README.md", *DOCS]
OUTSIDE = re.compile(r"\.\./shared|shared/DESIGN|seeds/|\bissues? #?\d+", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_points_outside_the_repository_or_names_an_issue(page):
    """README, CONTRIBUTING, fakes/README and docs/ never send a reader outside the clone."""
    found = OUTSIDE.findall(page.read_text(encoding="utf-8"))

    assert found == []


CITES_OUTSIDE = re.compile(r"seeds/\d|shared/reference|shared/DESIGN|\.\./shared")


def test_no_code_help_or_scenario_cites_a_document_outside_the_repository():
    """gpuops/ and fakes/ (code, help text, scenarios, their READMEs) cite only what a clone
    holds: no `seeds/000`, no reference notes kept beside the repository. Recordings keep
    their provenance, which names their public sources."""
    files = [p for top in ("gpuops", "fakes") for p in (ROOT / top).rglob("*")
             if p.suffix in (".py", ".md", ".yaml") and "__pycache__" not in p.parts]  # fmt: skip
    cited = {
        p.relative_to(ROOT).as_posix(): CITES_OUTSIDE.findall(p.read_text(encoding="utf-8"))
        for p in files
    }

    assert {path: found for path, found in cited.items() if found} == {}
    assert CITES_OUTSIDE.findall("see seeds/001 and shared/reference/x.md") == [
        "seeds/0", "shared/reference",
    ]  # fmt: skip


ISSUE = re.compile(r"\bissues? #?\d+", re.I)
SOURCES = ("gpuops", "fakes", "tests", "recordings", "mutation", "docs")


def test_no_file_of_the_project_names_an_issue_number():
    """The code, tests, fakes, recordings and the gate say why, never which tracker item: the
    tracker is not part of a clone (this file's own samples of the pattern aside)."""
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "pyproject.toml"]
    for top in SOURCES:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".yaml")]
    named = {
        p.relative_to(ROOT).as_posix(): ISSUE.findall(p.read_text(encoding="utf-8"))
        for p in files
        if p != Path(__file__).resolve() and "__pycache__" not in p.parts
    }

    assert {path: found for path, found in named.items() if found} == {}
    assert len(files) > 300  # the scan reached the tree


def test_the_outside_pattern_catches_what_it_is_for():
    """The check itself: each forbidden form is caught, ordinary prose is not."""
    caught = ["see ../shared/x", "shared/DESIGN.md", "the seeds/ folder", "(issue 14)", "Issue #3"]

    assert all(OUTSIDE.search(text) for text in caught)
    assert not OUTSIDE.search("a shared board; two issues were found; see docs/rules.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_in_the_docs_lands_on_a_file(page):
    """A markdown link to a path inside the repository names a file that exists."""
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))

    missing = [t for t in targets if not (page.parent / t).resolve().exists()]
    assert missing == []


def test_the_committed_fault_matrix_is_the_generated_one():
    """docs/fault-matrix.md equals what tests/fault_matrix.py makes from the tests' marks."""
    assert fault_matrix.TARGET.read_text(encoding="utf-8") == fault_matrix.render(
        fault_matrix.collect()
    )


def test_every_seed_failure_mode_has_a_row_in_the_fault_matrix():
    """The matrix covers many failure modes, each shown by a test that exists."""
    faults = fault_matrix.collect()

    assert len(faults) >= 20
    for fault in faults:
        path, _, name = fault.test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), fault.test


def test_a_malformed_fault_mark_is_an_error_not_a_silent_row(tmp_path):
    """A fault mark without `handled=` stops the generator, naming the test."""
    bad = tmp_path / "test_bad.py"
    bad.write_text('import pytest\n@pytest.mark.fault("x")\ndef test_x():\n    pass\n')

    with pytest.raises(ValueError, match="test_bad.py::test_x"):
        fault_matrix.faults_in(bad)


def test_only_the_progress_module_carries_colour_codes():
    """NO_COLOR: one module writes ANSI escapes (gpuops/progress.py, whose colour_on honours
    NO_COLOR and a non-terminal; tests/test_progress.py); no other module writes any."""
    sources = {
        p.name: p.read_text(encoding="utf-8")
        for p in (ROOT / "gpuops").rglob("*.py")
        if p != ROOT / "gpuops" / "progress.py"
    }

    assert not [n for n, s in sources.items() if "\\x1b[" in s or "\\033[" in s or "\x1b[" in s]
