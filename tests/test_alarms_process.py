"""Alarms a person hears (O1) from real `gpuops` processes against `gpuops fakes serve`: the
detached guardian that `rent` starts, and `gpuops sweep`, post through apprise to a real
receiver on loopback in this test (tests/alarm_receiver.py)."""

from __future__ import annotations

import os
import signal

import pytest
from alarm_receiver import Receiver
from test_guard_process import Fakes, _alive, fakes  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.mark.fault(
    "a detached guardian is stopped by SIGTERM while the team's endpoint is down",
    handled="its exit alarm is recorded pending before it exits; the next `gpuops sweep` process delivers it, once (O1)",
)
def test_a_guardian_s_failure_reaches_the_receiver_through_a_later_sweep_once_o1(fakes):  # noqa: F811
    """O1/M7: `rent` starts a detached guardian; SIGTERM stops it (exit 143) while the
    receiver answers 500: the alarm stays pending in the store; `gpuops sweep`, another
    process, delivers it; a second sweep sends nothing more."""
    receiver = Receiver(answers=[500])
    try:
        fakes.env["GPUOPS_NOTIFY"] = receiver.url
        fakes.gpuops("rent", "alarm-box", "--gpu", "RTX 4090", "--hours", "3", "--race", "1")
        fakes.wait_for("its guardian", lambda: fakes.events("guard.lease.taken"))
        (started,) = fakes.events("guard.start")
        pid = int(started["pid"])

        os.kill(pid, signal.SIGTERM)
        fakes.wait_for("the guardian to exit", lambda: not _alive(pid))

        assert [e["code"] for e in fakes.events("guard.exit")] == [143]
        assert receiver.attempts == 1 and receiver.titles() == []  # sent at exit, answered 500
        (undelivered,) = fakes.events("alarm.undelivered")
        assert receiver.url not in str(undelivered)  # H3: never the URL, which holds tokens

        fakes.gpuops("sweep")
        receiver.wait_for("the alarm", lambda r: len(r.received) == 1)
        fakes.gpuops("sweep")

        assert receiver.titles() == ["gpuops: the guardian of alarm-box exited 143"]
        assert "stopped by SIGTERM" in receiver.received[0]["message"]
        assert receiver.attempts == 2
    finally:
        receiver.close()
        fakes.gpuops("destroy", "alarm-box", check=False)
