"""The S3 stand-in `gpuops fakes serve` starts (moto on loopback), judged by boto3 (H4), and
both of gpuops' S3 paths (the state store, the guardian's results) following its exports."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError

from fakes.s3 import FakeS3, serve_s3
from gpuops.errors import AlreadyExists, VersionConflict
from gpuops.market.results import open_results
from gpuops.store.opener import open_store


@pytest.fixture(scope="module")
def fake_s3() -> Iterator[FakeS3]:
    """One stand-in for the module, with its bucket."""
    server = serve_s3()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def exported(fake_s3: FakeS3, monkeypatch: pytest.MonkeyPatch) -> FakeS3:
    """The environment `gpuops fakes serve` prints, applied."""
    for name, value in fake_s3.exports().items():
        monkeypatch.setenv(name, value)
    return fake_s3


def test_the_stand_in_listens_on_loopback_only():
    """A non-loopback address is refused before anything starts."""
    with pytest.raises(ValueError, match="loopback only"):
        serve_s3(host="0.0.0.0")


def test_boto3_conditional_writes_answer_412_on_the_stand_in_h4(exported):
    """IfNoneMatch='*' on an existing key and a stale IfMatch are refused (412), as S3 does."""
    client = boto3.client("s3")
    bucket = exported.bucket
    first = client.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")

    with pytest.raises(ClientError) as again:
        client.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    client.put_object(Bucket=bucket, Key="k", Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=bucket, Key="k", Body=b"4", IfMatch=first["ETag"])

    assert again.value.response["Error"]["Code"] == "PreconditionFailed"
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"


def test_the_state_store_follows_the_exported_endpoint(exported):
    """--state s3://bucket/prefix reaches the stand-in: create-if-absent and compare-and-swap."""
    store = open_store(f"s3://{exported.bucket}/state")

    version = store.create("board", b"free")
    with pytest.raises(AlreadyExists):
        store.create("board", b"again")
    store.put("board", b"claimed", version)
    with pytest.raises(VersionConflict):
        store.put("board", b"stale", version)


def test_the_guardians_results_follow_the_exported_endpoint(exported, tmp_path):
    """GPUOPS_RESULTS=s3://bucket/prefix delivers a results tarball into the stand-in."""
    (tmp_path / "out.txt").write_text("done\n", encoding="utf-8")
    tarball = tmp_path / "results.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(tmp_path / "out.txt", arcname="out.txt")

    where = open_results(f"s3://{exported.bucket}/results").deliver("job", tarball)

    body = boto3.client("s3").get_object(Bucket=exported.bucket, Key="results/job/out.txt")
    assert where == f"s3://{exported.bucket}/results/job/" and body["Body"].read() == b"done\n"
