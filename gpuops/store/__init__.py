"""The state store: one small compare-and-swap interface, local-directory and S3 backends.

The board, the ownership ledger, leases, quarantine and retry state all live here, so that
several processes and hosts share one truth with no server to run (DESIGN §2).
"""

from __future__ import annotations

from gpuops.store.base import Store, Versioned, check_key, is_key
from gpuops.store.opener import open_store

__all__ = ["Store", "Versioned", "check_key", "is_key", "open_store"]
