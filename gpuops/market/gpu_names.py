"""How a GPU name is compared: one fold for `rent`'s spelling of the market's names (select.py)
and for a rerun of `rent NAME` against what its rental was rented with (rentals.py, M8).
Imports nothing, so `boxes` may load it."""

from __future__ import annotations


def fold_gpu_name(name: str) -> str:
    """A GPU name as compared: casing and spacing aside (`rtx  4090` is `RTX 4090`)."""
    return " ".join(name.split()).casefold()
