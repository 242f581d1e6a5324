"""The box's own ceiling (M14): an onstart script by which a Vast box destroys itself.

The guardian is one process on one host; when that host, its disk or its guardian dies, only
`sweep` is left, and only if someone runs it. So every box gpuops rents also carries its own
deadline: at create, its ``onstart`` starts a small loop that, once the box's clock passes the
rental's deadline plus ``timing.BOX_CEILING_GRACE_S``, asks Vast to destroy this instance, and
asks again every ``timing.BOX_CEILING_POLL_S`` until the destroy lands (the loop dies with the
box). Neither ceiling depends on the other's host being alive.

The loop uses the box's per-instance key, never the account key: Vast puts one in every
container as ``CONTAINER_API_KEY``, with the instance's id as ``CONTAINER_ID``, and that key
"can only start, stop, or destroy that specific instance" (docs.vast.ai, api-reference/hello-
world). The script names the variable; the key itself never passes through gpuops (H3).

It runs in whatever image the rental asked for, so it needs nothing but a POSIX ``sh``, ``date``
and ``sleep``, and tries ``curl``, then ``wget``, then ``python3`` for the one HTTP call. Each
attempt is appended to ``$HOME/gpuops-ceiling.log`` on the box.
"""

from __future__ import annotations

import math
import re

from gpuops import timing
from gpuops.errors import UsageError

__all__ = ["ceiling_at", "ceiling_script", "destroy_url", "rearm_script"]

# Where the loop lives on the box, beside its log.
SCRIPT_NAME = "gpuops-ceiling.sh"
# The epoch second the loop waits for, re-read on each wake: moving a deadline later rewrites it
# over ssh (``rearm_script``). Missing, the loop falls back to the second it was armed with;
# garbage in it fails the loop's comparison, and the box ends itself (fail closed).
AT_NAME = "gpuops-ceiling.at"
_SAFE_URL = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?")


def ceiling_at(deadline_at: float) -> int:
    """The epoch second (on the box's clock) from which the box destroys itself: the rental's
    deadline plus the grace, rounded up, so it never fires before the grace is over."""
    return math.ceil(deadline_at + timing.BOX_CEILING_GRACE_S)


def destroy_url(base_url: str) -> str:
    """The instance's own destroy endpoint under the adapter's base URL, ending in the
    container's id as the box itself knows it. The URL goes into a shell script between double
    quotes, so one holding a character the shell would read there is refused."""
    if not _SAFE_URL.fullmatch(base_url):
        raise UsageError(f"the Vast base URL {base_url!r} cannot go into a box's ceiling script")
    return base_url.rstrip("/") + "/api/v0/instances/$CONTAINER_ID/"


def ceiling_script(deadline_at: float, base_url: str) -> str:
    """The ``onstart`` that arms the box's ceiling for a rental due at ``deadline_at`` (epoch
    seconds), talking to Vast at ``base_url``. It writes the loop to a file and starts it in the
    background, detached, so the container's start is not held up."""
    armed = ceiling_at(deadline_at)
    loop = "\n".join(
        [
            f'u="{destroy_url(base_url)}"',
            'h="Authorization: Bearer $CONTAINER_API_KEY"',
            "while :; do",
            f'  c=$(cat "$HOME/{AT_NAME}" 2>/dev/null || echo {armed})',
            "  n=$(date +%s)",
            '  if [ "$n" -lt "$c" ]; then',
            '    echo "$n sleeping until $c"',
            '    sleep "$((c - n))"',
            "    continue",
            "  fi",
            '  echo "$n destroying $CONTAINER_ID"',
            '  curl -fsS -X DELETE -H "$h" "$u" ||',
            '  wget -qO- --method=DELETE --header="$h" "$u" ||',
            "  python3 -c 'import os,sys,urllib.request as r;"
            'r.urlopen(r.Request(sys.argv[1],method="DELETE",'
            'headers={"Authorization":"Bearer "+os.environ["CONTAINER_API_KEY"]}))\' "$u"',
            f"  sleep {timing.BOX_CEILING_POLL_S:g}",
            "done",
        ]
    )
    return "\n".join(
        [
            rearm_script(deadline_at),
            f"cat > \"$HOME/{SCRIPT_NAME}\" <<'GPUOPS_CEILING'",
            loop,
            "GPUOPS_CEILING",
            f'nohup sh "$HOME/{SCRIPT_NAME}" >> "$HOME/gpuops-ceiling.log" 2>&1 &',
            "",
        ]
    )


def rearm_script(deadline_at: float) -> str:
    """The shell line that moves the box's ceiling to cover a rental now due at ``deadline_at``
    (written whole, then renamed over the old one: the loop never reads half a number). The
    loop is asleep until the old ceiling; it wakes then, reads this one, and sleeps on."""
    at = f'"$HOME/{AT_NAME}"'
    return (
        f"printf '%s\\n' {ceiling_at(deadline_at)} > {at[:-1]}.new\" && mv -f {at[:-1]}.new\" {at}"
    )
