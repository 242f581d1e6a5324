"""The S3 stand-in's front (fakes/s3.py's ``S3Front``), under the name the tests have always
used: a loopback proxy in front of moto's server that can lose an answer (``drop``), answer
AWS's 409 ConditionalRequestConflict (``conflict``), ignore preconditions (``blind``), and
judges every conditional request against AWS's conditional-write rules (``breaches``)."""

from __future__ import annotations

from fakes.s3 import CONDITIONS, S3Front

LossyProxy = S3Front

__all__ = ["CONDITIONS", "LossyProxy", "S3Front"]
