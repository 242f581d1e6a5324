"""Every input surface fuzzed, N cases each (default 10,000), and the untyped-exception count
of each: the goal is 0 everywhere.

    .venv/bin/python tests/benchmarks/bench_fuzz.py [N] [--surfaces argv,vast,gce,gcs,records,events]

Surfaces (an untyped exception is anything that is not a gpuops error, or for argv a traceback
or an exit code outside the documented ones):

- ``argv``: the CLI's arguments (tests/cli_fuzz.py's strategy), in-process, in a throwaway
  state dir with no provider environment.
- ``vast``, ``gce``, ``gcs``: each provider's wire answers through its adapter (tests/
  wire_fuzz.py: recordings with fields replaced, truncated, HTML, empty, non-UTF-8, NaN,
  huge numbers, no answer at all); a call that waited past its limit counts too ("late").
- ``records``: every state record kind through its codec (``decode``): its own encoded
  record with one field replaced by any JSON value (10**400, 1e400, NaN, Infinity, deep
  nesting, wrong types), fields dropped or added, the bytes truncated or made non-UTF-8.
  Each kind gets N cases.
- ``events``: event-log lines through the scanner and every fold that reads them (stats,
  off-policy evaluation, pass rates): EventLog's own lines with a payload field replaced,
  stamps altered (``0`` for ``Z``, no fraction, another offset, garbage), torn, non-UTF-8;
  one case is a log of 1 to 6 such lines beside valid ones.

Seeded (``random.Random(seed)``) for records and events, Hypothesis for argv and the wire
(their existing strategies), so a run is repeatable. Exit 0 only if every surface ran N cases
with 0 untyped. ``python -m tests.benchmarks`` runs it last (``--quick``: 300 a surface); it
replaces time.sleep and time.monotonic with a virtual clock for the wire surfaces, for the
rest of the process.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from gpuops.errors import GpuopsError  # noqa: E402

SURFACES = ("argv", "vast", "gce", "gcs", "records", "events")
SEED = 20260718
Tally = tuple[collections.Counter[str], collections.Counter[str]]  # outcomes, untyped by type


# --- argv ------------------------------------------------------------------------------------
def fuzz_argv(n: int, root: Path) -> Tally:
    from cli_fuzz import ARGV, clean, run_case
    from hypothesis import HealthCheck, given, settings

    counts: collections.Counter[str] = collections.Counter()
    untyped: collections.Counter[str] = collections.Counter()
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            del os.environ[name]
    os.environ.update(
        GPUOPS_STATE=str(root / "state"), GPUOPS_OPERATOR="alice",
        XDG_STATE_HOME=str(root / "xdg"), HOME=str(root / "home"),
    )  # fmt: skip

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(argv=ARGV)
    def case(argv: list[str]) -> None:
        code, stderr = run_case(argv)
        if clean(code, stderr):
            counts[f"exit {code}"] += 1
        else:
            counts["untyped"] += 1
            last = stderr.strip().splitlines()[-2:] if stderr.strip() else [f"exit {code}"]
            untyped[f"{argv[:3]!r}: {' | '.join(last)[:160]}"] += 1

    try:
        case()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return counts, untyped


# --- the wire --------------------------------------------------------------------------------
def fuzz_wire(provider: str, n: int, root: Path) -> Tally:
    from bench_wire_fuzz import _virtual_time
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests import wire_fuzz

    _virtual_time()
    counts: collections.Counter[str] = collections.Counter()
    untyped: collections.Counter[str] = collections.Counter()

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(call=st.sampled_from(sorted(wire_fuzz.CALLS[provider])),
           served=wire_fuzz.answers(provider))  # fmt: skip
    def case(call: str, served: list[wire_fuzz.Answer]) -> None:
        outcome = wire_fuzz.run_case(provider, call, served, root / f"{provider}.jsonl")
        if outcome.verdict in ("escaped", "late"):
            counts["untyped"] += 1
            untyped[f"{call}: {outcome.verdict} {type(outcome.error).__name__}: "
                    f"{str(outcome.error)[:100]}"] += 1  # fmt: skip
        else:
            counts[outcome.verdict] += 1

    case()
    return counts, untyped


# --- values a fuzzer puts where a field was ---------------------------------------------------
_NASTY_TEXT = [
    "1" + "0" * 400, "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1e308", "-0",
    "[" * 3000 + "]" * 3000, '"' + "x" * 5000 + '"', '"2026-13-40T99:99:99Z"',
    '"2026-07-18T00:00:00.0000000"', '""', '"\\ud800"', '"../x"', "true", "null", "{}", "[]",
    "9223372036854775808", "-9223372036854775809", "1.5", '"nan"', '"inf"',
]  # fmt: skip


def _any_json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(10 if depth < 3 else 6)
    if pick == 0:
        return None
    if pick == 1:
        return rng.random() < 0.5
    if pick == 2:
        return rng.choice([0, 1, -1, 2**53, 2**63, -(2**63) - 1, 10**30, rng.randrange(-999, 999)])
    if pick == 3:
        return rng.choice([0.5, -0.0, 1e308, -1e308, 5e-324, rng.uniform(-1e6, 1e6)])
    if pick in (4, 5):
        return rng.choice(["", "x", "live", "gone-confirmed", "pass", "a/b", "é", "\x00", "2026"])
    if pick in (6, 7):
        return [_any_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["a", "id", "name", ""]): _any_json(rng, depth + 1) for _ in range(2)}


def _as_text(rng: random.Random, value: Any) -> str:
    """JSON text for ``value``, or one of the texts Python's json reads that no writer should."""
    if rng.random() < 0.35:
        return rng.choice(_NASTY_TEXT)
    return json.dumps(value)


def _mutated(rng: random.Random, body: dict[str, Any]) -> bytes:
    """``body`` (a JSON object) with one change a disk, a person or another version makes."""
    keys = sorted(body)
    how = rng.randrange(8)
    if how == 0 and keys:  # a field dropped
        body = {k: v for k, v in body.items() if k != rng.choice(keys)}
        return json.dumps(body).encode()
    if how == 1:  # a field added
        body = {**body, rng.choice(["extra", "x", "name2"]): _any_json(rng)}
        return json.dumps(body).encode()
    if how == 2:  # truncated
        raw = json.dumps(body).encode()
        return raw[: rng.randrange(len(raw) + 1)]
    if how == 3:  # not UTF-8
        raw = bytearray(json.dumps(body).encode())
        raw.insert(rng.randrange(len(raw) + 1), rng.choice([0xFF, 0xC3, 0x80]))
        return bytes(raw)
    if how == 4:  # not an object
        return _as_text(rng, _any_json(rng)).encode()
    # one field replaced by any value, as text (so 10**400 and NaN reach the parser)
    field = rng.choice(keys) if keys else "x"
    marker = "\x00MARK\x00"
    text = json.dumps({**body, field: marker})
    return text.replace(json.dumps(marker), _as_text(rng, _any_json(rng))).encode()


# --- state records ---------------------------------------------------------------------------
def _record_kinds() -> dict[str, tuple[Any, Any]]:
    """Every record kind: its codec and one valid value (the fuzz mutates its encoding)."""
    from gpuops import alarms, ledger
    from gpuops.lane import journal
    from gpuops.market import budget, budgets, jobs, leases, quarantine, rentals
    from gpuops.market import guardian as g
    from gpuops.register import Incident, Observation, _codec

    kinds: dict[str, tuple[Any, Any]] = {}
    iso = "2026-07-18T00:00:00+00:00"
    samples: list[tuple[Any, dict[str, Any]]] = [
        (ledger.CLAIMS, {}),
        (rentals.CODEC, {}),
        (leases.CODEC, {}),
        (jobs.CODEC, {}),
        (quarantine.CODEC, {}),
        (budgets.LIMITS, {}),
        (budgets.SPENDS, {}),
        (alarms.CAUSE_CODEC, {}),
        (alarms.PENDING_CODEC, {}),
        (journal.CODEC, {}),
        (_codec(Incident, "register entry"), {"date": "2026-07-18", "id": "2026-07-18-1"}),
        (_codec(Observation, "register entry"), {"date": "2026-07-18", "id": "2026-07-18-1"}),
    ]
    del budget, g
    for codec, overrides in samples:
        kinds[
            codec.what if codec.what not in kinds else f"{codec.what} ({codec.kind.__name__})"
        ] = (
            codec,
            _sample(codec, overrides, iso),
        )
    kinds["ledger record"] = (ledger._Codec(), None)
    return kinds


def _sample(codec: Any, overrides: dict[str, Any], iso: str) -> dict[str, Any]:
    """A plausible stored body for ``codec``'s kind: each field a value of its type."""
    body: dict[str, Any] = {}
    for f in codec.fields:
        scalar = next(t for t in f.allowed if t is not type(None))
        check = codec.checks.get(f.name)
        if f.name in overrides:
            body[f.name] = overrides[f.name]
        elif scalar is str:
            body[f.name] = iso if check is not None else "alice"
        elif scalar is bool:
            body[f.name] = False
        elif scalar is int:
            body[f.name] = 1
        else:
            body[f.name] = 1.5
    return body


def _ledger_body() -> bytes:
    from gpuops.ledger import BoxState, Record, _Codec

    record = Record(
        name="a+1-0", owner="alice", state=BoxState.LIVE, intent_id="i", provider="vast",
        revision=1, updated_at="2026-07-18T00:00:00+00:00", instance_id="1",
    )  # fmt: skip
    return _Codec().encode(record)


def _byte_mutated(rng: random.Random, raw: bytes) -> bytes:
    """``raw`` (a text record) with bytes cut, inserted or a number blown up."""
    how = rng.randrange(4)
    at = rng.randrange(len(raw) + 1)
    if how == 0:
        return raw[:at]
    if how == 1:
        return raw[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5))) + raw[at:]
    if how == 2:
        return raw.replace(b"1", rng.choice([b"1" + b"0" * 400, b"nan", b"inf", b"-1", b""]), 1)
    return raw.replace(b" ", rng.choice([b"  ", b"", b"\t", b" x=1 "]), 1)


def _text_kinds() -> dict[str, tuple[Callable[[bytes], object], bytes]]:
    """Records that are not a codec's JSON: the lane board (its text) and the pass-rate
    index's checkpoint (None for anything unreadable: rebuilt from the log)."""
    from gpuops.analysis import index
    from gpuops.analysis.shrink import MachineCounts
    from gpuops.lane import board as b
    from gpuops.lane.runner import BoardCodec

    board = b.Board("g2", "gpu-lane", 1_800_000_000.0)
    checkpoint = index.Checkpoint(
        10, "h", MachineCounts(passes={1: 1}, trials={1: 2}, gpu={1: "RTX 4090"})
    )
    return {
        "lane board": (
            lambda data: BoardCodec().decode("lane/board", data),
            b.render(board, ["x"]).encode(),
        ),  # fmt: skip
        "pass-rate index": (index.decode, index.encode(checkpoint)),
    }


def fuzz_records(n: int) -> Tally:
    counts: collections.Counter[str] = collections.Counter()
    untyped: collections.Counter[str] = collections.Counter()
    rng = random.Random(SEED)

    def judge(what: str, decode: Callable[[bytes], object], data: bytes) -> None:
        try:
            decode(data)
            counts["valid"] += 1
        except GpuopsError:
            counts["typed"] += 1
        except Exception as exc:  # the bug this hunts
            counts["untyped"] += 1
            untyped[f"{what}: {type(exc).__name__} at {_where(exc)}: {str(exc)[:100]}"] += 1

    for what, (decode, raw) in _text_kinds().items():
        for i in range(n):
            mutated = _byte_mutated(rng, raw) if i % 2 else _mutated(rng, _as_object(raw))
            judge(what, decode, mutated)
    for what, (codec, body) in _record_kinds().items():
        base = json.loads(_ledger_body()) if body is None else body
        try:
            codec.decode("k", json.dumps(base).encode())  # the base itself reads
        except GpuopsError as exc:
            untyped[f"{what}: the fuzz's own base does not read: {exc}"] += 1
        for _ in range(n):
            judge(what, functools.partial(codec.decode, f"fuzz/{what}"), _mutated(rng, dict(base)))
    return counts, untyped


def _as_object(raw: bytes) -> dict[str, Any]:
    """A JSON record's fields, or a text record as one field (its mutation is then JSON)."""
    try:
        found = json.loads(raw)
    except ValueError:
        return {"text": raw.decode("utf-8", "replace")}
    return found if isinstance(found, dict) else {"value": found}


# --- event-log lines -------------------------------------------------------------------------
def _event_samples() -> list[tuple[str, dict[str, Any]]]:
    cands = [{"id": 1, "machine_id": 11, "dph_total": 0.4, "reliability": 0.99, "disk_bw": 900.0,
              "gpu_ram": 24564}, {"id": 2, "machine_id": 12, "dph_total": 0.5}]  # fmt: skip
    return [
        (
            "market.selection",
            {
                "name": "a",
                "gpu_name": "RTX 4090",
                "k": 2,
                "candidates": cands,
                "picks": [{"id": 1, "rank": 0, "propensity": 0.95, "explored": False}],
            },
        ),  # fmt: skip
        (
            "market.create",
            {
                "name": "a",
                "offer_id": 1,
                "machine_id": 11,
                "outcome": "created",
                "instance_id": "100",
            },
        ),  # fmt: skip
        (
            "market.probe",
            {"name": "a", "offer_id": 1, "machine_id": 11, "instance_id": "100", "verdict": "pass"},
        ),  # fmt: skip
        ("market.rent.done", {"name": "a", "instance_id": "100"}),
        ("market.rent.stopped", {"name": "a", "reason": "x"}),
        ("market.quarantine", {"machine_id": 11, "cause": "slow-disk", "until": 2.0}),
        (
            "ledger.transition",
            {
                "name": "a+1-0",
                "instance_id": "100",
                "before": "destroying",
                "after": "gone-confirmed",
            },
        ),  # fmt: skip
        (
            "guard.confirmed_gone",
            {
                "name": "a",
                "instance_id": "100",
                "deadline": "2026-07-18T03:30:00+00:00",
                "delay_s": 1.5,
            },
        ),  # fmt: skip
        ("lane.start", {"lane": "g2", "job": "v", "attempt": 1, "outcome": "started"}),
        (
            "lane.job_end",
            {
                "lane": "g2",
                "job": "v",
                "attempts": 1,
                "stockouts": 0,
                "waiting_s": 0.0,
                "running_s": 1.0,
                "cost_usd": 0.1,
                "outcome": "succeeded",
            },
        ),  # fmt: skip
    ]


_STAMPS = [
    lambda ts: ts, lambda ts: ts[:-1] + "0", lambda ts: ts[:-8] + "Z", lambda ts: ts[:-1] + "+05:00",
    lambda ts: "2026-13-40T00:00:00.000000Z", lambda ts: "", lambda ts: "x" * 27,
    lambda ts: ts.replace("T", " "), lambda ts: ts[:-1],
]  # fmt: skip


def _event_line(rng: random.Random, i: int, kind: str, payload: dict[str, Any]) -> bytes:
    ts = f"2026-07-18T00:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}Z"
    ts = rng.choice(_STAMPS)(ts) if rng.random() < 0.15 else ts
    head = json.dumps({"ts": ts, "operator": "o", "kind": kind}, separators=(",", ":"))[:-1]
    if rng.random() < 0.3:
        body = _mutated(rng, dict(payload)).decode("utf-8", "surrogateescape")
    else:
        body = json.dumps(payload, separators=(",", ":"))
    line = f'{head},"payload":{body}}}'.encode("utf-8", "surrogateescape")
    cut = rng.random()
    if cut < 0.04:
        line = line[: rng.randrange(len(line) + 1)]
    elif cut < 0.07:
        line = b"\xff\xfe" + line
    return line + b"\n"


def fuzz_events(n: int, root: Path) -> Tally:
    from gpuops.analysis import ope, shrink
    from gpuops.analysis.scan import ScanCounts, scan_events
    from gpuops.analysis.stats import KINDS, NEEDLES, Stats

    counts: collections.Counter[str] = collections.Counter()
    untyped: collections.Counter[str] = collections.Counter()
    rng = random.Random(SEED + 1)
    samples = _event_samples()
    path = root / "events.jsonl"
    for _ in range(n):
        if rng.random() < 0.5:  # a whole story in order (a race, its box, the guardian, the
            story = samples  # lane), each line fuzzed or not: the folds' joins are reached
        else:
            story = [rng.choice(samples) for _ in range(rng.randrange(1, 7))]
        lines = [_event_line(rng, i, kind, payload) for i, (kind, payload) in enumerate(story)]
        path.write_bytes(b"".join(lines))
        try:
            scanned, stats = ScanCounts(), Stats()
            for ts, kind, event in scan_events(path, kinds=KINDS, counts=scanned, needles=NEEDLES):
                stats.add_event(ts, kind, event)
            stats.report()
            decisions, machines = ope.Decisions(), shrink.MachineCounts()
            for ts, kind, event in scan_events(path, kinds=ope.KINDS | shrink.KINDS):
                if kind in ope.KINDS:
                    decisions.add_event(ts, event)
                machines.add_event(event)
            rates = shrink.PassRates.from_counts(machines)
            try:
                ope.evaluate(decisions.rows, ope.named("greedy", rates))
            except ValueError:  # no decisions: `policy eval` says so as a usage error
                counts["no decisions"] += 1
                continue
            counts["read"] += 1
        except GpuopsError:
            counts["typed"] += 1
        except Exception as exc:  # the bug this hunts
            counts["untyped"] += 1
            untyped[f"{type(exc).__name__} at {_where(exc)}: {str(exc)[:120]}"] += 1
    return counts, untyped


def _where(exc: BaseException) -> str:
    """The innermost gpuops frame an exception passed through: where to fix it."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/gpuops/" in f.filename]
    last = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(last.filename).name}:{last.lineno} {last.name}"


# --- the run ---------------------------------------------------------------------------------
def run(surface: str, n: int, root: Path) -> Tally:
    runners: dict[str, Callable[[], Tally]] = {
        "argv": lambda: fuzz_argv(n, root / "argv"),
        "vast": lambda: fuzz_wire("vast", n, root),
        "gce": lambda: fuzz_wire("gce", n, root),
        "gcs": lambda: fuzz_wire("gcs", n, root),
        "records": lambda: fuzz_records(n),
        "events": lambda: fuzz_events(n, root),
    }
    return runners[surface]()


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Rows for ``python -m tests.benchmarks``: one per surface."""
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv and not argv[0].startswith("-") else 10_000
    surfaces = list(SURFACES)
    if "--surfaces" in argv:
        surfaces = argv[argv.index("--surfaces") + 1].split(",")
        unknown = sorted(set(surfaces) - set(SURFACES))
        if unknown:
            raise SystemExit(f"no surface named {', '.join(unknown)}; known: {', '.join(SURFACES)}")
    # argv first: the wire surfaces replace time.sleep for the rest of the process
    surfaces.sort(key=lambda s: s in ("vast", "gce", "gcs"))
    root = Path(tempfile.mkdtemp(prefix="gpuops-fuzz-all-"))
    rows: list[tuple[str, str, str]] = []
    try:
        for surface in surfaces:
            started = time.perf_counter()
            with (
                contextlib.redirect_stderr(io.StringIO())
                if surface == "records"
                else contextlib.nullcontext()
            ):
                counts, untyped = run(surface, n, root)
            took = time.perf_counter() - started
            total = sum(counts.values())
            bad = counts["untyped"]
            each = "; ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "untyped")
            print(
                f"{surface}: {total} cases in {took:.1f} s ({total / took:.0f}/s); untyped {bad}; "
                f"{each}; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            for line, times in untyped.most_common(8):
                print(f"    {line} x{times}")
            kinds = len(_record_kinds()) + len(_text_kinds())
            least = n * (kinds if surface == "records" else 1)
            verdict = "ok" if bad == 0 and not untyped and total >= least else "FAILED"
            rows.append((f"fuzz {surface}", f"{bad} of {total} untyped", f"target 0 ({verdict})"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    found = main()
    sys.exit(0 if all(note.endswith("(ok)") for _, _, note in found) else 1)
