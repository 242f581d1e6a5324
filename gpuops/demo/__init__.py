"""`gpuops demo`: the whole story against local stand-ins, judged by the stand-ins themselves.

Two acts, each gpuops' real code against fakes started here and ended here:

- the lane (gpuops/demo/lane.py): one shared GCE VM whose boots run the installed startup
  script for real; a claim, a typo refused, stockouts that keep the claim, a second operator
  refused, a job watched to the end, a failing job that powers its VM off, a silent no-op
  start flagged, release;
- the market (gpuops/demo/market.py): a race of three with a taken offer, an SSH failure and
  a slow disk; the losers destroyed; a job under tmux; an interrupted race cleaned up; the
  guardian copying results and destroying the box at its deadline; a sweep finding nothing.

Every step is a row: what happened, the rule that held (in words, with its id), and the
evidence, read from the fakes (which boxes still bill, what the VM is doing), never from what
gpuops printed. The story runs under a keeper process, a child subreaper, so every process it
or its children started (guardians in their own sessions, the fake VM's boots, the fake boxes'
tmux servers) stays under the demo and is reaped there; whatever is still running at the end
is ended and named. Exit 0 only if every
rule held and nothing was left; 130 on Ctrl-C (after the same clean-up), 1 otherwise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from gpuops import procs, timing
from gpuops.clock import SYSTEM
from gpuops.demo.story import Story
from gpuops.errors import Interrupted, UsageError
from gpuops.progress import paint
from gpuops.settings import Settings

ACTS = ("lane", "market")


def run_demo(
    settings: Settings,
    operator: str,
    as_json: bool,
    acts: tuple[str, ...] = ACTS,
    *,
    state_url: str | None = None,
) -> int:
    """Run the acts (both, unless a test asks for a slice); the return value is the exit code
    (0 only if every rule held and nothing was left running). ``state_url``: --state when it
    was given (GPUOPS_STATE is not used: the demo never writes into a store by default)."""
    if state_url is not None:
        _check_fresh(state_url)
    keeper = Keeper.start()
    if keeper is None:  # the keeper: it waited for the story and ended what was left
        return Keeper.exit_code
    try:
        code = _story(settings, state_url, operator, as_json, acts, keeper)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if keeper.forked:
        os._exit(code)  # the story's process ends here; the keeper returns its code
    return code


def _story(
    settings: Settings,
    state_url: str | None,
    operator: str,
    as_json: bool,
    acts: tuple[str, ...],
    keeper: Keeper,
) -> int:
    started = SYSTEM.monotonic()  # the story's own length, in real seconds
    story = Story(as_json, settings.colour)
    reaper = Reaper(keeper)
    other = "bob" if operator != "bob" else "carol"
    if not as_json:
        print(
            paint("gpuops demo", "bold", story.colour) + ": the whole story against local "
            "stand-ins for Google Compute Engine and Vast.ai (no account, no network, no money)."
        )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="gpuops-demo-") as scratch_dir:
            scratch = Path(scratch_dir)
            root = state_url or str(scratch / "state")
            try:
                from gpuops.demo.lane import lane_act
                from gpuops.demo.market import market_act

                if "lane" in acts:
                    _act(story, "lane", lambda: lane_act(story, scratch, root, operator, other))
                if "market" in acts:
                    _act(
                        story,
                        "market",
                        lambda: market_act(story, scratch, root, operator, settings),
                    )
            except (KeyboardInterrupt, Interrupted):  # Ctrl-C here, or inside rent's race
                story.interrupted = True
                print("gpuops demo: interrupted; ending everything it started", file=sys.stderr)
            finally:
                ended = reaper.end()
                story.check(
                    "after",
                    "When the demo ends, every process it started is gone",
                    "nothing is left running behind you",
                    "",
                    "no process was left running"
                    if not ended
                    else f"{len(ended)} left running and ended by the demo: " + ", ".join(ended),
                    not ended,
                )
    finally:
        signal.signal(signal.SIGTERM, previous)
    return story.finish(SYSTEM.monotonic() - started)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _act(story: Story, act: str, run: Any) -> None:
    """One act; an unexpected error fails it loudly (with the traceback on stderr) and the
    demo goes on to the next act and the clean-up."""
    try:
        run()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        story.check(
            act,
            f"The {act} act stopped early: {type(exc).__name__}",
            "every step completes",
            "",
            str(exc) or type(exc).__name__,
            False,
        )


class Keeper:
    """The demo's parent: a child subreaper (Linux) that runs nothing itself. The story runs in
    a forked child; whatever the story's processes start and then orphan (a guardian in its own
    session, a daemonised tmux server, a fake boot's background process) is re-parented to the
    keeper, not to init, so nothing can slip away. The keeper reaps those orphans as they end
    (so no zombie is left for a fake to wait on), and on the story's request ends whatever of
    them still runs and names it, so the table can say so. Without fork or prctl the story runs
    in this process and sees only its own descendants."""

    exit_code = 1

    def __init__(self, forked: bool, ask: int = -1, answer: int = -1) -> None:
        self.forked, self._ask, self._answer = forked, ask, answer

    @classmethod
    def start(cls) -> Keeper | None:
        """In the story's process: its Keeper handle. In the keeper: None, once the story has
        ended (its exit code in ``Keeper.exit_code``)."""
        try:
            procs.become_subreaper()
        except (OSError, AttributeError):
            return cls(False)
        ask_r, ask_w = os.pipe()
        answer_r, answer_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            os.close(ask_r)
            os.close(answer_w)
            return cls(True, ask_w, answer_r)
        os.close(ask_w)
        os.close(answer_r)
        cls.exit_code = cls._keep(child, ask_r, answer_w)
        return None

    @classmethod
    def _keep(cls, child: int, ask: int, answer: int) -> int:
        import select

        # Ctrl-C reaches the story (same process group), which cleans up; the keeper waits
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
            signal.SIGTERM: signal.signal(
                signal.SIGTERM, lambda signum, frame: os.kill(child, signal.SIGTERM)
            ),
        }
        me = Reaper(None)
        code = None
        try:
            while code is None:
                ready, _, _ = select.select([ask], [], [], timing.DEMO_POLL_S)
                if ready and os.read(ask, 1):
                    others = {p: n for p, n in me.descendants().items() if p != child}
                    ended = me.end_these(others) if others else []
                    os.write(answer, ("\n".join(ended) + "\0").encode())
                while True:  # reap orphans as they end; notice the story's own end
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    if pid == child:
                        code = os.waitstatus_to_exitcode(status)
                        code = 128 - code if code < 0 else code
            me.end_these(me.descendants())  # nothing should be left; never leave it running
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(ask)
            os.close(answer)
        return code

    def orphans_ended(self) -> list[str]:
        """Ask the keeper to end what the story's processes left with it; what it ended."""
        if not self.forked:
            return []
        os.write(self._ask, b"?")
        data = b""
        while not data.endswith(b"\0"):
            chunk = os.read(self._answer, 4096)
            if not chunk:
                break
            data += chunk
        return [line for line in data.rstrip(b"\0").decode().split("\n") if line]


class Reaper:
    """Finds and ends the live processes under this one."""

    def __init__(self, keeper: Keeper | None) -> None:
        self.pid = os.getpid()
        self.keeper = keeper

    def descendants(self) -> dict[int, str]:
        """pid -> a short description of every live process below this one."""
        return {pid: _describe(argv) for pid, argv in procs.descendants(self.pid).items()}

    def end(self) -> list[str]:
        """End every descendant still running, and what the keeper holds; what was found."""
        mine = self.end_these(self.descendants())
        theirs = self.keeper.orphans_ended() if self.keeper is not None else []
        return sorted(set(mine + theirs))

    def end_these(self, left: dict[int, str]) -> list[str]:
        """End these (TERM, then KILL), reaping as they go; their descriptions."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in list(left):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            ends = SYSTEM.monotonic() + timing.DEMO_POLL_S * 40
            while SYSTEM.monotonic() < ends and set(left) & set(self.descendants()):
                procs.reap()
                SYSTEM.sleep(timing.DEMO_POLL_S)
        procs.reap()
        return sorted(set(left.values()))


def _describe(argv: list[str]) -> str:
    """A process in words, from its argv's shape (never a search of its text): a guardian
    (gpuops' `guard` subcommand), a fake box's tmux server (the program tmux), a fake VM's
    boot (bash running the fake's startup-script file), or its program's name."""
    from fakes.gce.boot import STARTUP_SCRIPT

    if not argv:
        return "a process"
    program = Path(argv[0]).name
    if "guard" in argv[1:]:
        return "a guardian"
    if program == "tmux":
        return "a fake box's tmux server"
    if program == "bash" and len(argv) == 2 and Path(argv[1]).name == STARTUP_SCRIPT:
        return "a fake VM boot process"
    return program


def _check_fresh(state_url: str) -> None:
    """The demo writes records and events of its own: never into state that holds anything."""
    from gpuops.store import open_store

    if state_url.startswith("s3://"):
        raise UsageError("the demo runs on a local directory only; omit --state or give a new one")
    path = Path(state_url.removeprefix("file://")).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(
            f"the demo needs a new or empty state directory, and {path} is not; "
            "omit --state to use a throwaway one"
        )
    open_store(state_url)  # an unsupported URL is a usage error here, before anything starts
