"""Shared test set-up: Hypothesis profiles (the mutation gate runs a lighter one)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

# Bytecode caching on for the suite and every process it starts, whatever the shell says: with
# PYTHONDONTWRITEBYTECODE set, each xdist worker re-rewrites and recompiles every test module
# (about 3 s of CPU apiece) and each `python -m gpuops` a test starts recompiles what it imports.
# The workers and the tests' children inherit this environment (xdist starts the workers after
# this file is read); the fake VM's boots set their own (fakes/gce/boot.py).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# No test reads the config file of the person running the suite (~/.config/gpuops/config.toml
# could send alarms to a real channel or name a real bucket), nor vastai's key file beside it:
# /dev/null is an empty config file, and a test that drops every GPUOPS_* variable still finds
# no file under an XDG_CONFIG_HOME that does not exist. A test of the file names its own.
os.environ["GPUOPS_CONFIG"] = os.devnull
os.environ["XDG_CONFIG_HOME"] = str(Path(tempfile.gettempdir(), "gpuops-tests-no-config-home"))
# Nor does any test write the per-user directory of the person running it (an event log, an
# s3:// state's listing cache): a test that needs its own sets XDG_STATE_HOME or GPUOPS_* itself.
os.environ["XDG_STATE_HOME"] = str(Path(tempfile.gettempdir(), "gpuops-tests-state-home"))

settings.register_profile("default", deadline=None)
# mutmut re-runs the covering tests once per mutant: fewer examples keep the gate in budget,
# and the state machines still reach every transition within them. No shrinking and no
# explaining: a mutant is killed by the first failing example, and minimizing it (seconds per
# killed mutant, for a message nobody reads) changes no verdict: a test that failed still fails.
settings.register_profile(
    "mutation",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[p for p in Phase if p not in (Phase.shrink, Phase.explain)],
)
# CI (the CI variable set, as .ci/run and most CI services set it): the default's examples, drawn
# from a fixed seed, so a landing is judged on the same examples each run and never fails on a
# rare draw (a rare draw once shrank for 330 s before failing). A developer's run draws afresh:
# that is where a new example is found (and then kept in .hypothesis/ and replayed first).
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _ci else "default"))


# Tests that wait on real deadlines, and about how long each takes on a quiet 2-core machine
# (seconds). Only the order of the run reads these: a stale figure makes it slower, never wrong.
LONG_S = {
    "test_guard_process.py::test_guardians_killed_after_the_copy": 50,
    "test_demo.py::test_the_whole_demo_passes": 30,
    "test_demo.py::test_a_fake_that_never_destroys": 30,
    "test_guard_process.py::test_a_rented_box_is_destroyed": 18,
    "test_guard_process.py::test_twenty_september": 11,
    "test_guard_process.py::test_a_fire_drill": 10,
    "test_guard_process.py::test_a_guardian_stopped_mid_copy": 20,
    "test_lane_machine.py::": 20,  # 7 to 30 s: its examples are drawn afresh, boots run jobs
    "test_lane_machine_hosts.py::": 12,  # 6 to 20 s: two hosts over moto's S3, boots run jobs
    "test_demo.py::test_ctrl_c_during_the_market_act": 9,
    "test_owner_process.py::test_two_rents": 8,
    "test_owner_process.py::test_a_rent_killed": 7,
    "test_check_process.py::": 14,  # fakes serve with its S3 stand-in, three `gpuops check`
    "test_alarms_process.py::": 8,  # rent, a guardian, two sweeps
    "test_guard_all_process.py::": 13,  # two guardian services, deadlines 8 to 10 s away
    "test_ceiling_process.py::": 22,  # three rented hours and their 30-minute grace at x600
    "test_soak.py::test_over_an_s3_state": 8,  # moto's server behind a proxy, 4 lifecycles
}
LONG_DEFAULT_S = 5  # any other process or soak test
# The long tests mostly wait, on real deadlines and processes, using little CPU. They go to
# LONG_SHARES shares at least (about 35 tests, about 250 s together: four shares keep each near
# 60 s, the longest test 35 s); a worker beyond that, up to FREE_SHARES of them (one per core
# of the 2-core machine the suite is sized for), starts on the short tests instead, so the
# cores have work while the long ones wait.
LONG_SHARES = 4
FREE_SHARES = 2


def _long_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The collection reordered for `--dist worksteal` over ``workers``: it hands each worker
    one contiguous share, so the long tests (process and soak tests, weighed by LONG_S) are
    dealt out longest first, each to the share holding the least so far, at the front of it,
    over all shares but the last ``FREE_SHARES`` beyond ``LONG_SHARES`` (with six workers,
    four shares start with the long tests and two with short ones); the short ones fill the
    shares in their collection order. Every worker computes the same order, and the shares
    come out exactly the sizes the scheduler cuts."""

    def weight(item: pytest.Item) -> float:
        for fragment, seconds in LONG_S.items():
            if fragment in item.nodeid:
                return seconds
        marked = item.get_closest_marker("process") or item.get_closest_marker("soak")
        return LONG_DEFAULT_S if marked else 0

    sizes, left = [], len(items)
    for remaining in range(workers, 0, -1):  # xdist: len(pending) // nodes_remaining
        sizes.append(left // remaining)
        left -= sizes[-1]
    longs = sorted((i for i in items if weight(i) > 0), key=weight, reverse=True)
    shares: list[list[pytest.Item]] = [[] for _ in sizes]
    loads = [0.0] * len(sizes)
    waiting = max(min(workers, LONG_SHARES), workers - FREE_SHARES)
    for item in longs:
        open_ = [n for n in range(waiting) if len(shares[n]) < sizes[n]] or [
            n for n in range(len(sizes)) if len(shares[n]) < sizes[n]
        ]
        n = min(open_, key=lambda n: loads[n])
        shares[n].append(item)
        loads[n] += weight(item)
    short = iter(i for i in items if weight(i) == 0)
    for n, share in enumerate(shares):
        share.extend(next(short) for _ in range(sizes[n] - len(share)))
    return [item for share in shares for item in share]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the long tests first in each worker's share (``_long_first``). Under
    mutmut, a mutant of a module with its own tests runs only those (mutation/gate.py
    OWN_TESTS)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:  # a worker (xdist tells it only the count, not the --dist mode)
        items[:] = _long_first(items, workers)
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mutation"))
    try:
        from gate import own_tests
    finally:
        sys.path.pop(0)
    _hang_limits(items)
    files = own_tests(mutant)
    if files is None:
        return
    keep = [item for item in items if item.nodeid.split("::")[0] in files]
    dropped = [item for item in items if item.nodeid.split("::")[0] not in files]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# Under mutmut, a test that runs HANG_FACTOR times as long as it did on the unmutated code in
# mutmut's own stats run, plus HANG_GRACE_S, has hung: it fails there (pytest-timeout's mark),
# and the mutant is killed, as mutmut's own limit would kill it later. mutmut's limit is per
# mutant, 15 times the sum of all its tests' times: one mutant that loops forever in a fast
# unit test of the lane linter held a worker for 383 s. Both runs see the same machine.
HANG_FACTOR, HANG_GRACE_S = 10.0, 10.0


def _hang_limits(items: list[pytest.Item]) -> None:
    try:
        from mutmut.state import state
    except ImportError:
        return
    durations = state().duration_by_test
    for item in items:
        took = durations.get(item.nodeid)
        if took is not None:
            item.add_marker(pytest.mark.timeout(HANG_FACTOR * took + HANG_GRACE_S))
