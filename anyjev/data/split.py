"""The seeded test / calibration split: every model of a run is scored on the same items."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from anyjev.data.tasks import Item
from anyjev.errors import TaskDataError


def split_items(
    items: Sequence[Item],
    n_test: int,
    n_calib: int,
    *,
    seed: int,
    allow_fewer: bool,
    label: str = "<items>",
    task: str | None = None,
) -> list[Item]:
    """Deterministic test / calibration split, so every model is scored on the same items.

    Procedure: ``perm = numpy.random.default_rng(seed).permutation(len(items))``; the items are visited in
    the order ``items[perm[0]], items[perm[1]], ...``.

    * No item carries a split: the first ``n_test`` visited items become ``"test"``, the next ``n_calib``
      ``"calib"``; the rest are dropped. With fewer than ``n_test + n_calib`` items a TaskDataError is
      raised, unless ``allow_fewer``: then all n items are used, keeping the test:calib proportion,
      ``n_test' = n * n_test // (n_test + n_calib)`` and ``n_calib' = n - n_test'`` (each must stay >= 1
      where the request was >= 1).
    * Every item carries a split (given in the file): the assignment is kept; the first ``n_test``
      visited "test" items and the first ``n_calib`` visited "calib" items are returned. A group with
      fewer items than requested raises, unless ``allow_fewer`` (then the whole group is kept).
    * Some items carry a split and others do not: TaskDataError (ambiguous; naming the first such item).

    Returns the test items first, then the calibration items, each in visiting order. ``label`` names the
    item source in error messages (a file, a dataset), TASK the configured task whose keys asked for the counts.
    """
    keys = f"tasks.{task}." if task else ""
    if n_test < 0 or n_calib < 0:
        raise ValueError(f"n_test and n_calib must be >= 0, got {n_test}, {n_calib}")
    items = list(items)
    n = len(items)
    perm = np.random.default_rng(seed).permutation(n)
    visited = [items[int(i)] for i in perm]
    given = [it.split is not None for it in items]
    if any(given):
        if not all(given):
            bad = next(it for it in items if it.split is None)
            raise TaskDataError(
                label, f"item {bad.id}", "some items carry a split and this one does not: give every item a split or none"
            )
        out: list[Item] = []
        for split, want in (("test", n_test), ("calib", n_calib)):
            group = [it for it in visited if it.split == split]
            if len(group) < want and not allow_fewer:
                raise TaskDataError(
                    label, "split", f"only {len(group)} items are marked {split!r}, fewer than "
                    f"{keys}{'n_test' if split == 'test' else 'n_calib'} = {want}"
                    + (f" (tasks.{task}.allow_fewer: true keeps them)" if task else "")
                )
            out += group[:want]
        return out
    want = n_test + n_calib
    if n < want:
        if not allow_fewer:
            raise TaskDataError(
                label, "split", f"{n} items, fewer than {keys}n_test + n_calib = {n_test} + {n_calib} "
                f"({keys}allow_fewer: true keeps them all, in that proportion)"
            )
        t = n * n_test // want
        c = n - t
        if (n_test > 0 and t == 0) or (n_calib > 0 and c == 0):
            raise TaskDataError(label, "split", f"{n} items are too few for a test and a calibration split")
        n_test, n_calib = t, c
    test = [dataclasses.replace(it, split="test") for it in visited[:n_test]]
    calib = [dataclasses.replace(it, split="calib") for it in visited[n_test : n_test + n_calib]]
    return test + calib


def missing_split(splits: Sequence[str | None], *, fits_temperature: bool) -> str | None:
    """The split a task needs but its items leave empty: ``"test"`` (nothing to score) or, when levels lists L1
    (FITS_TEMPERATURE), ``"calib"`` (nothing to fit its temperature on). None when neither is empty, or when an item
    carries no split (the seeded split then draws both)."""
    if not splits or any(s is None for s in splits):
        return None
    if "test" not in splits:
        return "test"
    return "calib" if fits_temperature and "calib" not in splits else None


def fewer_than_asked(task: str, n_test: int, n_calib: int, asked_test: int, asked_calib: int) -> str | None:
    """What a reader of a cell must know when its split holds fewer items than the config asks (``allow_fewer``): the
    counts, and the keys that asked for more. None when it holds what was asked."""
    if n_test >= asked_test and n_calib >= asked_calib:
        return None
    return (f"{n_test} test and {n_calib} calibration items, fewer than the {asked_test} and {asked_calib} the config "
            f"asks (tasks.{task}.n_test and n_calib; tasks.{task}.allow_fewer kept what there is)")
