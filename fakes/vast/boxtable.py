"""The fake ssh box table FakeVast keeps: each box's two ssh endpoints and their fate.

fakes/ssh/ssh reads the table named by GPUOPS_FAKE_SSH_BOXES on every call (its README has the
format). FakeVast writes the table once, empty, then one entry file per endpoint beside it
(``<table>.d/``) each time that box changes: never the whole table, so creating or destroying
one box of 5,000 costs the same as one of 5. A box is ``unreachable`` while it boots, once it
died and after it was destroyed; while running it has its offer's fate, and its GPU as
nvidia-smi would list it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from fakes.ssh.boxes import entries_dir, entry_path

if TYPE_CHECKING:
    from fakes.vast.model import InstanceState

# A low-vram box lists this much per GPU unless the scenario says (box_gpu): under the default
# VRAM floor of gpuops.market.select (8192 MB), whatever the offer advertised.
LOW_VRAM_MB = 4096
# Fates whose probe never gets to list GPUs, so no ``gpu`` option is written.
_NO_GPU_LISTING = frozenset({"no-gpu", "ssh-auth", "unreachable", "host-key-changed"})


def box_entries(
    boxes: Iterable[InstanceState],
    status: Callable[[InstanceState], str | None],
    host_key: Callable[[InstanceState], dict[str, object]] = lambda box: {},
) -> dict[str, object]:
    """``host:port`` -> box spec, for the proxy and the direct endpoint of every box.
    ``host_key``: options that change a running box's host key (``host_key``, ``rekey``)."""
    entries: dict[str, object] = {}
    for box in sorted(boxes, key=lambda b: b.id):
        running = box.destroyed_at is None and status(box) == "running"
        seed = sandbox_seed(box)
        spec: dict[str, object] = {
            "fate": "unreachable",
            "host_key": seed,
            "sandbox": seed,
            "authorized_keys": list(box.authorized_keys),
        }
        if running:
            spec.update(host_key(box))
            spec["fate"] = box.fate.box_fate
            gpu = box_gpu(box)
            if gpu is not None:
                spec["gpu"] = gpu
        entries[f"{box.ssh_host}:{box.ssh_port}"] = spec
        entries[f"{box.offer_row['public_ipaddr']}:{box.direct_port}"] = dict(spec)
    return entries


def sandbox_seed(box: InstanceState) -> str:
    """The box's own name in the table: its first host key's seed and its sandbox's."""
    return f"vast-{box.id}"


def box_gpu(box: InstanceState) -> dict[str, object] | None:
    """What the running box's nvidia-smi lists: the scenario's box_gpu, else the offer's GPUs."""
    if box.box_gpu is not None:
        return dict(box.box_gpu)
    if box.fate.kind in _NO_GPU_LISTING:
        return None
    row = box.offer_row
    return {
        "name": nvidia_name(str(row["gpu_name"])),
        "vram_mb": LOW_VRAM_MB if box.fate.kind == "low-vram" else int(row["gpu_ram"]),
        "count": int(row["num_gpus"]),
    }


def nvidia_name(vast_name: str) -> str:
    """How nvidia-smi names a GPU Vast calls ``vast_name`` (GeForce cards carry the brand)."""
    if re.fullmatch(r"(RTX|GTX) [0-9]{4}( Ti)?", vast_name):
        return f"NVIDIA GeForce {vast_name}"
    return f"NVIDIA {vast_name}"


def write_table(path: Path, entries: dict[str, object]) -> None:
    """Replace the table atomically, so the fake ssh never reads half of one, and drop every
    entry file beside it (a new world: no box of an earlier one is left)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.rmtree(entries_dir(path), ignore_errors=True)
    _replace(path, json.dumps({"boxes": entries}, sort_keys=True))


def write_entry(table: Path, key: str, spec: object) -> None:
    """Replace one box's entry file atomically (fakes/ssh/boxes.py reads it over the table):
    a change to one box costs one small file, whatever the number of boxes."""
    path = entry_path(table, key)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    _replace(path, json.dumps(spec, sort_keys=True))


def _replace(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
