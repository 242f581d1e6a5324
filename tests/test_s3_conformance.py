"""gpuops' S3 requests held to AWS's published conditional-write rules, and the S3 stand-in
answering what moto never does (H6).

The stand-in is moto's server behind fakes/s3.py's ``S3Front``: every conditional request
through it is judged by ``conditional_breaches`` (If-None-Match only ``*``, If-Match a quoted
ETag, ``*`` only on a delete, no conditional header on a multipart part, Signature Version 4;
each rule's AWS page is cited beside it), and it can answer AWS's 409
ConditionalRequestConflict or lose an answer after the write landed. A tour drives the state
store (gpuops/store/s3.py) through every conditional path it has: create, lost races, a
compare-and-swap, a delete, a lost answer read back, a 409 retried, a 409 that never clears.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from fakes.s3 import CREDENTIALS, REGION, FakeS3, S3Front, conditional_breaches, serve_s3
from gpuops.errors import AlreadyExists, VersionConflict
from gpuops.store.s3 import _CONFLICT_ATTEMPTS, S3Store

SIGNED = {"authorization": "AWS4-HMAC-SHA256 Credential=x/20261202/us-east-1/s3/aws4_request"}
ETAG = '"0123456789abcdef0123456789abcdef"'


@dataclass
class Front:
    moto: FakeS3
    front: S3Front
    client: object

    def store(self, prefix: str) -> S3Store:
        return S3Store(self.moto.bucket, prefix, client=self.client)


@pytest.fixture(scope="module")
def moto() -> Iterator[FakeS3]:
    server = serve_s3()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def world(moto: FakeS3) -> Iterator[Front]:
    front = S3Front(moto.url)
    config = Config(connect_timeout=2, read_timeout=5, retries={"total_max_attempts": 1})
    client = boto3.client(
        "s3", endpoint_url=front.url, region_name=REGION, config=config,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip
    try:
        yield Front(moto, front, client)
    finally:
        front.close()


def tour(world: Front, prefix: str) -> None:
    """Every conditional request the state store sends, on every path it has."""
    store, other = world.store(prefix), world.store(prefix)
    version = store.create("board", b"free")
    with pytest.raises(AlreadyExists):
        other.create("board", b"mine")  # 412
    version = store.put("board", b"claimed", version)
    with pytest.raises(VersionConflict):
        other.put("board", b"stale", ETAG)  # 412
    world.front.drop(1, "PUT")
    version = store.put("board", b"landed, answer lost", version)  # read back: ours
    world.front.conflict(1, "PUT")
    version = store.put("board", b"after a 409", version)  # retried, written
    world.front.conflict(_CONFLICT_ATTEMPTS, "PUT")
    with pytest.raises(VersionConflict):
        store.put("board", b"never clears", version)
    world.front.drop(1, "PUT")
    store.create("intent", b"new")  # landed, answer lost: read back, ours
    with pytest.raises(VersionConflict):
        store.delete("board", ETAG)  # 412
    world.front.drop(1, "DELETE")
    store.delete("board", version)  # landed, answer lost: read back, gone
    store.list()


def test_every_conditional_request_the_state_store_sends_keeps_awss_rules_h6(world):
    """H6: create, compare-and-swap, delete, a lost answer and a 409, each on the wire through
    the stand-in's front: no request breaks AWS's conditional-write rules."""
    tour(world, "tour")

    print(f"s3 H6: {world.front.judged} conditional requests judged")
    assert world.front.breaches == []
    assert world.front.judged >= 12
    assert len(world.front.conflicted) == 1 + _CONFLICT_ATTEMPTS
    assert [method for method, _ in world.front.dropped] == ["PUT", "PUT", "DELETE"]


def test_a_store_that_sends_an_unquoted_etag_breaks_awss_rules_h6(world, monkeypatch):
    """H6: a state store whose If-Match drops the ETag's quotes (moto takes it; AWS expects the
    entity-tag S3 gave) is named by the front: breaking gpuops fails the check."""
    real = S3Store._conditional

    def unquoted(self, key, data, **condition):  # type: ignore[no-untyped-def]
        if "IfMatch" in condition:
            condition["IfMatch"] = condition["IfMatch"].strip('"')
        return real(self, key, data, **condition)

    monkeypatch.setattr(S3Store, "_conditional", unquoted)
    store = world.store("unquoted")
    version = store.create("board", b"free")
    store.put("board", b"claimed", version)

    assert world.front.breaches == [f"PUT object: If-Match {version.strip(chr(34))!r} is not a "
                                    "quoted ETag"]  # fmt: skip


def test_a_store_whose_create_sends_an_etag_as_if_none_match_breaks_awss_rules_h6(
    world, monkeypatch
):
    """H6: If-None-Match with anything but ``*`` (RFC 7232 allows a list of tags; AWS's
    PutObject expects only the asterisk) is named by the front."""
    real = S3Store._conditional

    def tagged(self, key, data, **condition):  # type: ignore[no-untyped-def]
        if "IfNoneMatch" in condition:
            condition["IfNoneMatch"] = ETAG
        return real(self, key, data, **condition)

    monkeypatch.setattr(S3Store, "_conditional", tagged)
    world.store("tagged").create("board", b"free")  # moto takes it as a plain create

    assert world.front.breaches == [f"PUT object: If-None-Match {ETAG!r}, AWS expects '*' only"]


def test_the_stand_in_answers_awss_409_conditional_request_conflict_and_nothing_lands_h6(world):
    """H6: a scripted conflict reaches boto3 as AWS's 409 ConditionalRequestConflict, and the
    write it answered did not land."""
    client = world.client
    world.front.conflict(1, "PUT")

    with pytest.raises(ClientError) as conflict:
        client.put_object(Bucket=world.moto.bucket, Key="c/k", Body=b"1", IfNoneMatch="*")  # type: ignore[attr-defined]
    client.put_object(Bucket=world.moto.bucket, Key="c/k", Body=b"2", IfNoneMatch="*")  # type: ignore[attr-defined]

    error = conflict.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert error["Error"]["Code"] == "ConditionalRequestConflict"
    body = client.get_object(Bucket=world.moto.bucket, Key="c/k")["Body"].read()  # type: ignore[attr-defined]
    assert body == b"2" and world.front.conflicted == [("PUT", "/gpuops-fakes/c/k")]


@pytest.mark.parametrize(
    ("method", "query", "headers", "breach"),
    [
        ("PUT", {}, {"if-none-match": ETAG}, f"PUT object: If-None-Match {ETAG!r}, AWS expects"),
        ("PUT", {}, {"if-match": ETAG.strip('"')}, "PUT object: If-Match '0123"),
        ("PUT", {}, {"if-match": "*"}, "PUT object: If-Match '*' is not a quoted ETag"),
        ("PUT", {}, {"if-match": ETAG, "if-none-match": "*"}, "PUT object: both If-Match"),
        ("DELETE", {}, {"if-none-match": "*"}, "DELETE object: If-None-Match on DeleteObject"),
        ("DELETE", {}, {"if-match": "abc"}, "DELETE object: If-Match 'abc' is not a quoted"),
        ("PUT", {"partNumber": "1", "uploadId": "u"}, {"if-match": ETAG},
         "PUT uploadId: UploadPart and CreateMultipartUpload take no conditional header"),
        ("POST", {"uploads": ""}, {"if-none-match": "*"},
         "POST object: UploadPart and CreateMultipartUpload take no conditional header"),
        ("PATCH", {}, {"if-match": ETAG}, "PATCH object: a conditional header on a PATCH"),
    ],
    ids=["if-none-match an etag", "unquoted etag", "put if-match star", "both", "delete none-match",
         "delete unquoted", "upload part", "create multipart", "no such write"],
)  # fmt: skip
def test_the_front_names_each_way_a_request_breaks_awss_conditional_write_rules_h6(
    method, query, headers, breach
):
    """H6: each of AWS's conditional-write rules, broken once, is named."""
    found = conditional_breaches(method, query, SIGNED | headers)

    assert any(b.startswith(breach) for b in found), found


def test_a_conditional_write_not_signed_with_sigv4_breaks_awss_rules_h6():
    """H6: AWS takes conditional writes only signed with Signature Version 4 (or over TLS)."""
    found = conditional_breaches("PUT", {}, {"if-none-match": "*", "authorization": "AWS k:s"})

    assert found == ["PUT object: a conditional write not signed with Signature Version 4"]


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("PUT", {"if-none-match": "*"}),
        ("PUT", {"if-match": ETAG}),
        ("PUT", {"if-match": 'W/"weak"'}),
        ("DELETE", {"if-match": ETAG}),
        ("DELETE", {"if-match": "*"}),
        ("GET", {"if-none-match": ETAG}),
        ("PUT", {}),
    ],
)
def test_what_aws_documents_passes_the_conditional_write_rules_h6(method, headers):
    """H6: the documented forms (If-None-Match '*', If-Match a quoted ETag, a delete's '*',
    a conditional read, no condition at all) are no breach."""
    assert conditional_breaches(method, {}, SIGNED | headers) == []


# --- a bucket policy that requires conditional writes (docs/s3-state.md) -------------------------
@pytest.fixture
def protected() -> Iterator[FakeS3]:
    """The stand-in as `gpuops fakes serve` starts it: `state/` protected by the policy."""
    server = serve_s3(protect="state")
    try:
        yield server
    finally:
        server.close()


def client_of(url: str) -> object:
    return boto3.client(
        "s3", endpoint_url=url, region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip


@pytest.mark.fault(
    "an old or careless client writes the shared state unconditionally",
    handled="the bucket policy refuses it (403 AccessDenied) and gpuops' own writes land",
)
def test_an_old_clients_unconditional_write_is_refused_and_gpuops_writes_land_m3(protected):
    """M3/M4: with the policy, a plain put_object under `state/` (an old client) is AWS's 403
    AccessDenied and does not land; gpuops' own store (If-None-Match, If-Match, a delete)
    works there as before, and writes outside the prefix stay unconditional."""
    old = client_of(protected.url)
    store = S3Store(protected.bucket, "state", client=old)
    version = store.create("ledger/job", b"alice's")

    with pytest.raises(ClientError) as refused:
        old.put_object(Bucket=protected.bucket, Key="state/ledger/job", Body=b"bob's")  # type: ignore[attr-defined]
    with pytest.raises(ClientError):
        old.copy_object(  # type: ignore[attr-defined]
            Bucket=protected.bucket, Key="state/ledger/job",
            CopySource={"Bucket": protected.bucket, "Key": "results/x"},
        )  # fmt: skip
    changed = store.put("ledger/job", b"alice's, changed", version)
    old.put_object(Bucket=protected.bucket, Key="results/job/out.txt", Body=b"done")  # type: ignore[attr-defined]
    store.delete("ledger/job", changed)

    error = refused.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("AccessDenied", 403)
    assert protected.front is not None
    assert protected.front.denied == [("PUT", f"/{protected.bucket}/state/ledger/job")] * 2
    assert store.get("ledger/job") is None and protected.front.breaches == []


def test_the_policy_is_read_back_and_lifted_like_s3s(protected):
    """GetBucketPolicy gives the document set; DeleteBucketPolicy lifts it (then an
    unconditional write lands, and GetBucketPolicy is NoSuchBucketPolicy)."""
    import json

    from fakes.s3 import conditional_writes_policy

    old = client_of(protected.url)
    kept = json.loads(old.get_bucket_policy(Bucket=protected.bucket)["Policy"])  # type: ignore[attr-defined]
    old.delete_bucket_policy(Bucket=protected.bucket)  # type: ignore[attr-defined]
    old.put_object(Bucket=protected.bucket, Key="state/x", Body=b"1")  # type: ignore[attr-defined]
    with pytest.raises(ClientError) as none:
        old.get_bucket_policy(Bucket=protected.bucket)  # type: ignore[attr-defined]

    assert kept == conditional_writes_policy(protected.bucket, "state")
    assert none.value.response["Error"]["Code"] == "NoSuchBucketPolicy"


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ({"Principal": {"AWS": "arn:aws:iam::111122223333:user/Alice"}}, "the principal"),
        ({"Condition": {"StringEquals": {"s3:if-match": "x"}}}, "the condition operator"),
        ({"Condition": {"Null": {"s3:ObjectCreationOperation": "true"}}}, "the condition key"),
        ({"Condition": {"Null": {"s3:if-match": "maybe"}}}, "the Null value"),
        ({"NotAction": "s3:GetObject"}, "the statement field NotAction"),
    ],
)
def test_a_policy_the_stand_in_cannot_enforce_is_refused_loudly_h4(protected, statement, what):
    """H4: what the stand-in does not model is a loud error (501), never a policy half
    enforced; the one set before stays."""
    import json

    from fakes.s3 import conditional_writes_policy

    doc = conditional_writes_policy(protected.bucket, "state")
    doc["Statement"][0] |= statement
    old = client_of(protected.url)
    with pytest.raises(ClientError) as refused:
        old.put_bucket_policy(Bucket=protected.bucket, Policy=json.dumps(doc))  # type: ignore[attr-defined]

    assert refused.value.response["Error"]["Code"] == "NotImplemented"
    assert what in refused.value.response["Error"]["Message"]
    with pytest.raises(ClientError):
        old.put_object(Bucket=protected.bucket, Key="state/y", Body=b"1")  # type: ignore[attr-defined]
