"""Shared test set-up: Hypothesis profiles (the mutation gate runs a lighter one)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Bytecode caching on for the suite and every process it starts, whatever the shell says: with
# PYTHONDONTWRITEBYTECODE set, each xdist worker re-rewrites and recompiles every test module
# (about 3 s of CPU apiece) and each `python -m gpuops` a test starts recompiles what it imports.
# The workers and the tests' children inherit this environment (xdist starts the workers after
# this file is read); the fake VM's boots set their own (fakes/gce/boot.py).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

settings.register_profile("default", deadline=None)
# mutmut re-runs the covering tests once per mutant: fewer examples keep the gate in budget,
# and the state machines still reach every transition within them.
settings.register_profile(
    "mutation",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under mutmut, a mutant of a module with its own tests runs only those
    (mutation/gate.py OWN_TESTS)."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mutation"))
    try:
        from gate import own_tests
    finally:
        sys.path.pop(0)
    files = own_tests(mutant)
    if files is None:
        return
    keep = [item for item in items if item.nodeid.split("::")[0] in files]
    dropped = [item for item in items if item.nodeid.split("::")[0] not in files]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
