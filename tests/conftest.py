"""Shared test set-up: Hypothesis profiles (the mutation gate runs a lighter one)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
