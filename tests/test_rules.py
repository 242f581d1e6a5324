"""Every rule's status is earned: implemented rules name a real test that cites the rule."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpuops.rules import IMPLEMENTED, RULES, VERIFIED, WRITTEN
from oracles import rule as by_id

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT.parent / "shared" / "DESIGN.md"
EXPECTED_IDS = (
    [f"L{i}" for i in range(1, 14)]
    + [f"M{i}" for i in range(1, 18)]
    + [f"H{i}" for i in range(1, 7)]
    + ["O1"]
)


def test_every_rule_of_the_design_is_listed_once_in_order():
    """The rule list is exactly DESIGN §1's: L1-L13, M1-M17, H1-H6, O1."""
    assert [rule.id for rule in RULES] == EXPECTED_IDS


def test_the_rule_ids_match_the_design_document_when_it_is_present():
    """When shared/DESIGN.md sits beside the checkout, its bold rule ids are ours."""
    if not DESIGN.exists():
        pytest.skip("shared/DESIGN.md is not beside this checkout")
    ids = re.findall(r"^- \*\*([LMHO]\d+)\*\*", DESIGN.read_text(), flags=re.M)
    assert ids == EXPECTED_IDS


@pytest.mark.parametrize("rule", [r for r in RULES if r.status != WRITTEN], ids=lambda r: r.id)
def test_an_implemented_rule_names_a_test_that_exists_and_cites_it(rule):
    """H2/H3 and the rest: `implemented` must point at a real test naming the rule id."""
    path, _, function = rule.test.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == function
    ]

    assert found, f"{rule.id}: {rule.test} does not exist"
    docstring = ast.get_docstring(found[0]) or ""
    cites = rule.id.lower() in function.lower().split("_") or re.search(
        rf"\b{rule.id}\b", docstring
    )
    assert cites, f"{rule.id}: {rule.test} neither names nor cites the rule"


def test_statuses_are_only_the_three_honest_ones():
    """A status is written, implemented or verified, and verified needs a dated observation."""
    for rule in RULES:
        assert rule.status in (WRITTEN, IMPLEMENTED, VERIFIED)
        assert (rule.test is None) == (rule.status == WRITTEN)
        if rule.status == VERIFIED:
            assert re.match(r"\d{4}-\d{2}-\d{2}: ", rule.observed or "")
        else:
            assert rule.observed is None


def test_rules_are_found_by_id():
    """by_id finds a rule and refuses an unknown id."""
    assert by_id("M4").status == IMPLEMENTED
    with pytest.raises(KeyError):
        by_id("M99")
