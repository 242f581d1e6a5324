"""The S3 stand-in `gpuops fakes serve` starts: moto's server on loopback, with one bucket.

moto (``moto[server]``) is a dev dependency only, so it is imported here, lazily: a user
without the dev extras gets the other fakes and an ``# S3 stand-in absent`` line in the
exports instead of a crash. The exports point both ways gpuops reaches S3 at it: boto3's own
``AWS_ENDPOINT_URL`` (the state store, ``--state s3://...``) and ``GPUOPS_S3_ENDPOINT`` (the
guardian's ``GPUOPS_RESULTS=s3://...``), with throwaway credentials and a region.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

BUCKET = "gpuops-fakes"
REGION = "us-east-1"
# moto accepts any credentials; these say what they are (never a real key, H3).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fake-s3-access-key", "AWS_SECRET_ACCESS_KEY": "fake-s3-secret"}


class S3Unavailable(RuntimeError):
    """moto's server is not installed (the dev extras are absent)."""


@dataclass
class FakeS3:
    """A running moto server on 127.0.0.1; ``url`` is its endpoint."""

    server: Any
    url: str
    bucket: str = BUCKET

    def exports(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "GPUOPS_S3_ENDPOINT": self.url,
            "AWS_DEFAULT_REGION": REGION,
            **CREDENTIALS,
            "GPUOPS_FAKE_S3_BUCKET": self.bucket,
        }

    def close(self) -> None:
        self.server.stop()


def serve_s3(host: str = "127.0.0.1", bucket: str = BUCKET) -> FakeS3:
    """Start moto's S3 on ``host`` (loopback only) on a free port, with ``bucket`` created."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the S3 stand-in binds loopback only, not {host}")
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise S3Unavailable(
            f"moto[server] is not installed ({exc}); install the dev extras"
        ) from None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    bound_host, port = server.get_host_and_port()
    fake = FakeS3(server, f"http://{bound_host}:{port}", bucket)
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=fake.url,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=bucket)
    return fake
