"""The learning commands' arguments (stats, policy eval, record, incident): parsing only.

Kept apart from cli/learn.py so that `gpuops --help` and `gpuops rules` compile only this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuops.cli.parser import Commands, Parser


def add_commands(commands: Commands, common: Parser) -> None:
    stats = commands.add_parser(
        "stats",
        parents=[common],
        help="figures from the event log: create failures, probe verdicts, spend",
    )
    stats.add_argument("--since", metavar="DATE", help="only events at or after DATE (UTC)")
    stats.add_argument("--log", metavar="FILE", help="event log (default: the state's)")
    stats.add_argument("--html", metavar="FILE", help="also write an HTML report with plots")
    policy = commands.add_parser(
        "policy", parents=[common], help="score a selection policy from the log, renting nothing"
    )
    policy_commands = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    evaluate = policy_commands.add_parser(
        "eval", parents=[common], help="IPS and self-normalised IPS with 95%% intervals"
    )
    evaluate.add_argument(
        "--policy",
        required=True,
        metavar="NAME",
        help="logged, greedy, uniform, reliable or shrunk",
    )
    evaluate.add_argument("--since", metavar="DATE", help="only races at or after DATE (UTC)")
    evaluate.add_argument("--log", metavar="FILE", help="event log (default: the state's)")
    record = commands.add_parser(
        "record", parents=[common], help="a one-cent rental that captures raw provider output"
    )
    record_commands = record.add_subparsers(
        dest="record_command", metavar="PROVIDER", required=True
    )
    vast = record_commands.add_parser(
        "vast", parents=[common], help="rent the cheapest box under the cap, probe, destroy"
    )
    vast.add_argument("--gpu", metavar="MODEL", required=True, help="GPU model, e.g. 'RTX 4090'")
    vast.add_argument("--max-usd", type=float, default=0.05, help="hard spend cap (default 0.05)")
    vast.add_argument("--yes-spend", action="store_true", help="without it, nothing is spent")
    vast.add_argument("--out", metavar="DIR", help="recordings root (default: the checkout's)")
    gce = record_commands.add_parser(
        "gce", parents=[common], help="the lane's calls: get, setMetadata, start if TERMINATED"
    )
    gce.add_argument("--max-usd", type=float, default=0.05, help="hard spend cap (default 0.05)")
    gce.add_argument("--usd-per-hour", type=float, default=None, help="default 0.70")
    gce.add_argument("--yes-spend", action="store_true", help="without it, nothing is spent")
    gce.add_argument("--out", metavar="DIR", help="recordings root (default: the checkout's)")
    incident = commands.add_parser(
        "incident", parents=[common], help="the incident register: add, update, list, observe"
    )
    incident_commands = incident.add_subparsers(
        dest="incident_command", metavar="COMMAND", required=True
    )
    add = incident_commands.add_parser("add", parents=[common], help="record an incident today")
    add.add_argument("--date", required=True, metavar="YYYY-MM-DD", help="when it happened")
    add.add_argument("--what", required=True, help="what happened")
    add.add_argument("--cost-usd", type=float, metavar="USD", help="what it cost")
    add.add_argument("--cause", help="the cause, once known")
    add.add_argument("--rule", metavar="ID", help="the prevention rule it led to")
    update = incident_commands.add_parser(
        "update", parents=[common], help="add the cause, rule or cost once known"
    )
    update.add_argument("id", metavar="ID", help="the incident's id (incident list shows it)")
    update.add_argument("--cost-usd", type=float, metavar="USD", help="what it cost")
    update.add_argument("--cause", help="the cause, once known")
    update.add_argument("--rule", metavar="ID", help="the prevention rule it led to")
    incident_commands.add_parser("list", parents=[common], help="every incident, oldest first")
    observe = incident_commands.add_parser(
        "observe", parents=[common], help="record a rule seen working on a real job or a drill"
    )
    observe.add_argument("--rule", required=True, metavar="ID", help="the rule seen working")
    observe.add_argument("--date", required=True, metavar="YYYY-MM-DD", help="when it was seen")
    observe.add_argument(
        "--kind", required=True, choices=("real", "drill"), help="on a real job or in a drill"
    )
    observe.add_argument("--what", required=True, help="what was seen")
