"""The systemd unit text for guardians on an always-on host (``gpuops guard --systemd-unit``)."""

from __future__ import annotations

import sys

from gpuops import timing


def systemd_unit(state_url: str, operator: str) -> str:
    """A template unit (``gpuops-guard@NAME.service``) for guardians on an always-on host."""
    restart_s = int(timing.LEASE_TTL_S)
    return f"""\
# gpuops guardian for one box: systemctl --user enable --now gpuops-guard@NAME
# Install as ~/.config/systemd/user/gpuops-guard@.service. Put the provider's key in
# ~/.config/gpuops/env (VAST_API_KEY=...); it stays on this host and never reaches a box.
[Unit]
Description=gpuops guardian for box %i (billing ceiling, rule M5)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=-%h/.config/gpuops/env
ExecStart={sys.executable} -m gpuops guard %i --foreground --state {state_url} --operator {operator}
# 0: the box is confirmed gone. 7: another guardian was verified alive and guards it (M7).
SuccessExitStatus=7
# 3: refused (not ours, or no such rental): restarting cannot help.
RestartPreventExitStatus=3
Restart=on-failure
RestartSec={restart_s}

[Install]
WantedBy=default.target
"""


def service_unit(state_url: str, operator: str) -> str:
    """A unit (``gpuops-guard-all.service``) for one guardian service per host: `gpuops guard
    --all`, guarding every rental in the state, each under its own lease."""
    restart_s = int(timing.LEASE_TTL_S)
    return f"""\
# gpuops guardian service: every rental in the state, one process (gpuops guard --all).
# Install as ~/.config/systemd/user/gpuops-guard-all.service, then
#   systemctl --user enable --now gpuops-guard-all
# Put the provider's key in ~/.config/gpuops/env (VAST_API_KEY=...); it stays on this host.
[Unit]
Description=gpuops guardian service: every rental's billing ceiling (rule M5)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=-%h/.config/gpuops/env
ExecStart={sys.executable} -m gpuops guard --all --state {state_url} --operator {operator}
# It runs until stopped; a stop gives every lease up (standbys elsewhere take over at once)
# and exits 128 + the signal, loudly: until it runs again, its rentals have one ceiling less.
Restart=always
RestartSec={restart_s}

[Install]
WantedBy=default.target
"""
