"""`offers --filter`: vastai's query syntax, the documented subset; pure, on plain offers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuops.errors import UsageError
from gpuops.market.offer_query import FIELDS, Term, failed_terms, parse_query


@dataclass(frozen=True)
class O:
    """An offer with every field a query can name (the recorded RTX 4090's values)."""

    id: int = 18432117
    machine_id: int = 31218
    host_id: int = 104522
    gpu_name: str = "RTX 4090"
    num_gpus: int = 1
    gpu_ram: int = 24564
    dph_total: float = 0.3712
    reliability: float | None = 0.9964
    disk_bw: float | None = 2875.4
    inet_down: float | None = 848.9
    cuda_max_good: float | None = 12.4
    geolocation: str | None = "Texas, US"
    verification: str | None = "verified"


def passes(query: str, offer: O = O()) -> bool:
    return failed_terms(offer, parse_query([query])) == []


def test_the_issue_s_query_reads_as_three_terms_with_vastai_s_alias():
    """`cuda_vers` is vastai's alias of cuda_max_good; the list's items are text."""
    terms = parse_query(["reliability>0.99 geolocation in [US,CA] cuda_vers>=12"])

    assert terms == (
        Term("reliability", "gt", (0.99,), "reliability>0.99"),
        Term("geolocation", "in", ("US", "CA"), "geolocation in [US,CA]"),
        Term("cuda_max_good", "gte", (12.0,), "cuda_vers>=12"),
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("reliability>0.99", True),
        ("reliability>0.9964", False),
        ("reliability>=0.9964", True),
        ("reliability gte 0.9964", True),
        ("reliability gt 0.9964", False),
        ("dph<0.3712", False),
        ("dph<=0.3712", True),
        ("dph_total lte 0.3712", True),
        ("dph_total lt 0.38", True),
        ("num_gpus=1", True),
        ("num_gpus==2", False),
        ("num_gpus eq 1", True),
        ("num_gpus!=1", False),
        ("num_gpus neq 2", True),
        ("num_gpus noteq 1", False),
        ("num_gpus not eq 1", False),
        ("gpu_ram>=24", True),  # GB, times 1000 as vastai reads it: 24000 <= 24564 MB
        ("gpu_ram>=25", False),
        ("machine_id in [1,31218]", True),
        ("machine_id notin [1,31218]", False),
        ("host_id nin [7]", True),
        ("id not in [18432117]", False),
        ("disk_bw>2000 inet_down>800", True),
        ("cuda_max_good<12", False),
        ("geolocation in [US,CA]", True),
        ("geolocation in [de,fr]", False),
        ("geolocation=us", True),  # the country code, in any casing
        ("geolocation=Texas,_US", True),  # the whole text, `_` for the space
        ('geolocation="Texas, US"', True),
        ("geolocation=Tex", False),
        ("geolocation!=US", False),
        ("geolocation notin [DE]", True),
        ("gpu_name=rtx_4090", True),  # any casing, `_` for the space
        ("gpu_name in [RTX_3090,RTX_4090]", True),
        ("gpu_name=RTX_3090", False),
        ("verification=verified", True),
        ("verified=true", True),
        ("verified=false", False),
        ("verified!=true", False),
        ("verified in [true]", True),
        ("verified notin [false]", True),
        ("verified notin [true]", False),
        ("reliability=any", True),  # vastai's wildcard drops the term
        ("reliability=*", True),
        ("reliability=?", True),
        ("gpu_name in [any]", False),  # in a list, `any` is a name like another
        ("", True),
        ("reliability>0.99 ", True),  # trailing and leading space
        ("  num_gpus=1", True),
        ("host_id=104522", True),
        ("host_id=104523", False),
        ("inet_down>848", True),
        ("inet_down>849", False),
        ("gpu_ram>=24.56", True),  # 24560 <= 24564 MB: exactly vastai's x1000
        ("gpu_ram>=24.57", False),
        ('geolocation in [DE, "US"]', True),  # a quoted item after a space
        ("geolocation in [DE,US,]", True),  # an empty item is no value
        ("machine_id=31218.0", True),
        ('gpu_name="rtx  4090"', True),  # spacing folded as gpu_names folds it
        ("verification=X", False),
        ("gpu_name in [X]", False),
    ],
)
def test_each_operator_and_field_holds_as_vastai_defines_it(query, expected):
    """Every operator spelling, the aliases, the GB multiplier, lists, quotes and `_`."""
    assert passes(query) is expected


def test_a_field_the_provider_left_out_fails_its_term_and_says_unknown():
    """Missing is never passing (as the default filter): the reason names the term and value."""
    offer = O(cuda_max_good=None, geolocation=None)

    assert failed_terms(offer, parse_query(["cuda_vers>=12", "geolocation notin [DE]"])) == [
        "filter cuda_vers>=12 (cuda_max_good unknown)",
        "filter geolocation notin [DE] (geolocation unknown)",
    ]
    assert failed_terms(O(), parse_query(["reliability>0.999"])) == [
        "filter reliability>0.999 (reliability 0.9964)"
    ]


def test_several_filters_all_hold_and_each_failure_is_listed():
    """`--filter` repeated: every term of every one must hold."""
    terms = parse_query(["dph<0.3", "reliability>0.99", "num_gpus=2"])

    assert [t.text for t in terms] == ["dph<0.3", "reliability>0.99", "num_gpus=2"]
    assert failed_terms(O(), terms) == [
        "filter dph<0.3 (dph_total 0.3712)",
        "filter num_gpus=2 (num_gpus 1)",
    ]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("rentable=true", r"'rentable=true' names no offer field gpuops reads; known: cuda_max_good, cuda_vers, disk_bw, "),
        ("reliability", r"cannot read 'reliability': each term is FIELD OP VALUE"),
        ("reliability>0.99 ~~", r"cannot read '~~'"),
        ("reliability>high", r"'reliability>high': 'high' is not a number"),
        ("reliability>nan", r"'reliability>nan': 'nan' is not a finite number"),
        ("dph<inf", r"'dph<inf': 'inf' is not a finite number"),
        ("gpu_name>RTX", r"'gpu_name>RTX': gpu_name is text; it takes =, !=, in or notin"),
        ("geolocation>=US", r"geolocation is text; it takes"),
        ("verification<x", r"verification is text; it takes"),
        ("gpu_name lte x", r"gpu_name is text; it takes"),
        ("verified gt true", r"verified is text; it takes"),
        ("geolocation=[US]", r"'geolocation=\[US\]': a list \[..\] takes `in` or `notin`"),
        ("geolocation in []", r"'geolocation in \[\]' has no value"),
        ("reliability>any", r"'reliability>any': a wildcard only makes sense with ="),
        ("verified=maybe", r"'verified=maybe': verified is true or false"),
        ("verified in [true,false]", r"verified is true or false"),
    ],
)
def test_a_term_that_cannot_be_read_or_applied_is_a_usage_error_naming_it(query, message):
    """Exit 2 naming the term (vastai only warns on an unknown field: here nothing passes
    silently)."""
    with pytest.raises(UsageError, match=message) as caught:
        parse_query([query])

    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("--filter: ")


def test_the_fields_listed_are_the_offer_s_own_and_vastai_s_aliases():
    """No invented field: each is a parsed Offer attribute, vastai's alias, or `verified`."""
    from dataclasses import fields

    from gpuops.model import Offer

    own = {f.name for f in fields(Offer)}
    assert set(FIELDS) - own == {"cuda_vers", "dph", "verified"}


def test_the_documented_examples_parse():
    """docs/cli.md's Filtering offers examples are queries this parser reads."""
    import re
    import shlex
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    section = page.split("## Filtering offers", 1)[1].split("\n## ", 1)[0]
    examples = [line for line in section.splitlines() if line.startswith("gpuops offers")]
    assert len(examples) == 2
    for example in examples:
        words = shlex.split(example)
        queries = [words[i + 1] for i, word in enumerate(words) if word == "--filter"]
        assert queries and parse_query(queries)
    assert re.search(r"`rentable`", section)  # the refusal of vastai fields we do not read


def test_a_location_s_country_is_the_part_after_its_last_comma():
    """`CA` matches `Montreal, Quebec, CA`; the whole quoted text is one value, not a list."""
    assert passes("geolocation=CA", O(geolocation="Montreal, Quebec, CA"))
    assert not passes("geolocation=Quebec", O(geolocation="Montreal, Quebec, CA"))
    assert not passes('geolocation="Texas, US"', O(geolocation="Ohio, US"))


def test_verified_reads_as_the_verification_term_it_stands_for():
    """vastai's `verified=BOOL` is `verification` equal (or not) to `verified`."""
    assert parse_query(["verified=false", "verified in [true]"]) == (
        Term("verification", "neq", ("verified",), "verified=false"),
        Term("verification", "eq", ("verified",), "verified in [true]"),
    )


def test_an_unreadable_query_is_shown_an_example_of_one_that_reads():
    """The whole message, example included."""
    with pytest.raises(UsageError) as caught:
        parse_query(["reliability"])

    assert str(caught.value) == (
        "--filter: cannot read 'reliability': each term is FIELD OP VALUE, e.g. "
        "'reliability>0.99 geolocation in [US,CA] cuda_vers>=12'"
    )
