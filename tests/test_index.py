"""The pass-rate index: tallies in the store, folded from the log by offset, agree with the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.simulate import simulate_market
from gpuops.analysis import index
from gpuops.analysis.index import index_key, machine_counts
from oracles import pass_rates_from_log
from gpuops.analysis.shrink import MachineCounts
from gpuops.analysis.scan import scan_events
from gpuops.analysis.stats import KINDS, Stats
from gpuops.model import is_host_fault
from gpuops.store.memory import MemoryStore


@pytest.fixture(scope="module")
def simulated_log(tmp_path_factory) -> bytes:
    """The bytes of a simulated market run against the fakes (probes, races, rentals)."""
    log = tmp_path_factory.mktemp("sim") / "events.jsonl"
    simulate_market(log, rentals=25, seed=3)
    return log.read_bytes()


def tallies(counts) -> tuple[dict[int, int], dict[int, int], dict[int, str]]:
    return counts.passes, counts.trials, counts.gpu


def starts_seen(monkeypatch) -> list[int]:
    """The byte offsets the index's folds start from, recorded as they happen."""
    seen: list[int] = []

    def recording(path, **kw):
        seen.append(kw["start"])
        return scan_events(path, **kw)

    monkeypatch.setattr(index, "scan_events", recording)
    return seen


def test_the_index_folded_as_the_log_grows_agrees_with_stats_and_a_full_read(
    tmp_path, simulated_log
):
    """Folded in five steps, cut mid-line, the index equals one full read, and stats agrees."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    for cut in (0, 1, len(simulated_log) // 3, len(simulated_log) // 2 + 7, len(simulated_log)):
        log.write_bytes(simulated_log[:cut])
        counts = machine_counts(log, store)
    stats = Stats()
    for ts, kind, event in scan_events(log, kinds=KINDS):
        stats.add_event(ts, kind, event)
    verdicts = stats.report()["market"]["verdicts"]  # type: ignore[index]

    full = pass_rates_from_log(log)
    assert {m: (counts.passes[m], counts.trials[m]) for m in counts.trials} == dict(full.counts)
    assert dict(full.gpu) == counts.gpu
    assert sum(counts.passes.values()) == verdicts.get("pass", 0) > 0
    judged = sum(n for v, n in verdicts.items() if v == "pass" or is_host_fault(v))
    assert sum(counts.trials.values()) == judged
    assert set(counts.passes) >= stats.passed


def test_a_second_call_folds_only_what_the_log_gained(tmp_path, simulated_log, monkeypatch):
    """offers and rent pay for new lines only: the fold starts at the checkpoint's offset."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    half = simulated_log.index(b"\n", len(simulated_log) // 2) + 1
    log.write_bytes(simulated_log[:half])
    seen = starts_seen(monkeypatch)

    machine_counts(log, store)
    machine_counts(log, store)
    log.write_bytes(simulated_log)
    machine_counts(log, store)

    assert seen == [0, half, half]


def test_a_replaced_or_shrunk_log_is_folded_again_from_its_start(
    tmp_path, simulated_log, monkeypatch
):
    """A checkpoint for other bytes is never trusted: a new log is read from byte 0."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    log.write_bytes(simulated_log)
    machine_counts(log, store)
    seen = starts_seen(monkeypatch)

    log.write_bytes(simulated_log[: len(simulated_log) // 4])  # shrunk
    shrunk = machine_counts(log, store)
    log.write_bytes(b"\n" + simulated_log[1:])  # same size, other first bytes
    replaced = machine_counts(log, store)

    assert seen == [0, 0]
    assert tallies(shrunk) == tallies(pass_rates_from_log_counts(log, simulated_log, 4))
    assert sum(replaced.trials.values()) >= sum(shrunk.trials.values())


def pass_rates_from_log_counts(tmp: Path, data: bytes, part: int):
    other = tmp.with_name("other.jsonl")
    other.write_bytes(data[: len(data) // part])
    return machine_counts(other, MemoryStore())


def test_an_unreadable_checkpoint_is_rebuilt_from_the_log(tmp_path, simulated_log):
    """Bad input: a corrupt index entry is not trusted and not fatal; it is rebuilt."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    log.write_bytes(simulated_log)
    expected = tallies(machine_counts(log, MemoryStore()))
    store.create(index_key(log), b'{"format":1,"offset":"x"')

    got = machine_counts(log, store)

    assert tallies(got) == expected
    assert index.decode(store.get(index_key(log)).data) is not None  # type: ignore[union-attr]


def test_losing_the_checkpoint_write_to_another_process_still_answers(tmp_path, simulated_log):
    """Compare-and-swap: a checkpoint another process stored meanwhile, for as much of the
    same log, is left to it; the answer is the same."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    log.write_bytes(simulated_log)
    found = store.get(index_key(log))
    machine_counts(log, store)  # what the other process folds and stores: the same log, whole
    theirs = store.get(index_key(log)).data  # type: ignore[union-attr]

    class Racing(MemoryStore):
        def create(self, key: str, data: bytes) -> str:
            super().create(key, theirs)  # the other process wins the race
            return super().create(key, data)

    racing = Racing()
    counts = machine_counts(log, racing)

    assert found is None and sum(counts.trials.values()) > 0
    assert racing.get(index_key(log)).data == theirs  # type: ignore[union-attr]


def test_a_checkpoint_that_does_not_parse_is_folded_again_and_replaced(tmp_path, simulated_log):
    """An unreadable checkpoint (another process's half-written one, a hand's edit) is never
    trusted, nor left standing: the log is folded from its start and the good one replaces it."""
    log, store = tmp_path / "events.jsonl", MemoryStore()
    log.write_bytes(simulated_log)
    store.create(index_key(log), b"{}")

    counts = machine_counts(log, store)

    assert sum(counts.trials.values()) > 0
    assert index.decode(store.get(index_key(log)).data) is not None  # type: ignore[union-attr]


def test_no_log_yet_means_no_tallies_and_nothing_written(tmp_path):
    """A host that never probed anything ranks by price alone and writes no checkpoint."""
    store = MemoryStore()

    counts = machine_counts(tmp_path / "none.jsonl", store)

    assert counts.trials == {} and store.list("") == []


def test_the_skipped_count_survives_the_checkpoint_and_a_first_format_one_is_rebuilt(tmp_path):
    """`offers` and `rent` say how many lines the rates left out: the count is kept with the
    tallies, so a later call that folds nothing new still reports it; a checkpoint written before
    the count was kept (format 1) is not trusted, so the count is never silently 0."""
    bad = (
        json.dumps(
            {
                "ts": "2026-01-01T00:00:00Z",
                "operator": "x",
                "kind": "market.probe",
                "payload": {"verdict": ["pass"]},
            }
        )
        + "\n"
    )
    log, store = tmp_path / "events.jsonl", MemoryStore()
    log.write_text(bad + bad)
    assert machine_counts(log, store).skipped == 2
    assert machine_counts(log, store).skipped == 2  # from the checkpoint: nothing new folded

    old = index.encode(index.Checkpoint(log.stat().st_size, index._head(log, 99), MachineCounts()))
    store.put(
        index_key(log), old.replace(b'"format":2', b'"format":1'), store.get(index_key(log)).version
    )  # type: ignore[union-attr]
    assert machine_counts(log, store).skipped == 2


@pytest.mark.parametrize(
    "data",
    [
        b'{"format":2,"offset":0,"head":"h","passes":{"1":Infinity},"trials":{},"gpu":{},'
        b'"race_gpu":{},"skipped":0}',
        b'{"format":2,"offset":0,"head":"h","passes":{},"trials":{},"gpu":{},"race_gpu":{},'
        b'"skipped":-Infinity}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["infinity", "minus-infinity", "deep"],
)
def test_a_checkpoint_holding_infinity_or_nested_too_deep_is_unreadable_not_a_crash(data):
    """Bad input: int(Infinity) raised OverflowError and deep nesting RecursionError out of
    decode; both are an unreadable checkpoint (rebuilt from the log)."""
    assert index.decode(data) is None


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_event_log_that_is_a_device_has_no_tallies_and_is_never_read():
    """Bad input: GPUOPS_EVENTS=/dev/full hung `offers` reading zeros forever; a log that is
    not a regular file has nothing to rank by. In a child with a time limit: the old fold
    never returned."""
    import subprocess
    import sys

    code = (
        "from pathlib import Path\n"
        "from gpuops.analysis.index import machine_counts\n"
        "from gpuops.store.memory import MemoryStore\n"
        "c = machine_counts(Path('/dev/full'), MemoryStore())\n"
        "print(c.trials, c.skipped)\n"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=30,
        preexec_fn=_bounded_memory,  # the old read grew without bound: fail, not swap
    )

    assert done.stdout == "{} 0\n"


def _bounded_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
