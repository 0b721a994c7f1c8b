"""A cell's bootstrap replicates (``replicates.npz``, beside ``metrics.json``): the format and its reader. The evaluate
step writes them (:mod:`anyjev.run.replicates`), so that the differences table and ``anyjev compare`` pair two cells' own
replicates instead of resampling every cell again (:func:`anyjev.numbers.compare.models_minus_models`).

The file is a NumPy ``.npz`` of five arrays (deflated): ``point`` ``(L, M)``, ``boot`` ``(L, M, n_boot)``, ``jack``
``(L, M, R)`` (the jackknife rows of every stratum side by side, ``jack_rows`` long each), ``jack_rows`` and ``about``, a
JSON text naming the levels (L) and metrics (M) and what the replicates were made from: the scores file's SHA-256, the
evaluation options, the resampled calibration marks. A reader uses them only for the scores and options they were made
from (:func:`replicates_for`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from anyjev.errors import FileFormatError
from anyjev.files import file_sha256
from anyjev.numbers.evaluation import MetricReplicates
from anyjev.numbers.options import EvaluationOptions
from anyjev.rundata.checked import check_keys, missing

log = logging.getLogger(__name__)

FORMAT = "anyjev.replicates/1"
ARRAYS = ("point", "boot", "jack", "jack_rows", "about")
ABOUT_KEYS = {"levels": list, "metrics": list, "calib": list}  # beside the format, what a reader relies on


def made_from(scores_sha256: str, options: EvaluationOptions) -> dict[str, Any]:
    """What replicates are made from, as the file records it: the scores file's bytes and the evaluation options."""
    return {"scores_sha256": scores_sha256, "evaluation": dataclasses.asdict(options)}


def read_replicates(path: str | os.PathLike) -> tuple[dict[str, Any], MetricReplicates]:
    """The replicates in PATH, with what they were made from (``about``); a FileFormatError names a file that is not
    one."""
    path = Path(path)
    if not path.is_file():
        raise missing(path)
    if path.stat().st_size == 0:
        raise FileFormatError(str(path), "file", "empty file")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("one array, not an archive of arrays")
        with data:
            arrays = {name: data[name] for name in ARRAYS}
        about = json.loads(str(arrays["about"]))
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise FileFormatError(str(path), "file", f"not a replicates file ({type(exc).__name__}: {exc})") from None
    if not isinstance(about, dict) or about.get("format") != FORMAT:
        found = about.get("format") if isinstance(about, dict) else about
        raise FileFormatError(str(path), "about", f"format {found!r:.60}, not {FORMAT!r}")
    check_keys(path, "about", about, ABOUT_KEYS, "about")
    levels, metrics = about["levels"], about["metrics"]
    shape = (len(levels), len(metrics))
    point, boot, jack, rows = arrays["point"], arrays["boot"], arrays["jack"], arrays["jack_rows"]
    if point.shape != shape or boot.shape[:2] != shape or jack.shape != (*shape, int(rows.sum())):
        raise FileFormatError(str(path), "arrays", f"shapes {point.shape}, {boot.shape}, {jack.shape} do not fit "
                              f"{len(levels)} levels x {len(metrics)} metrics and jackknife rows {rows.tolist()}")
    bounds = np.concatenate([[0], np.cumsum(rows)])
    replicates = MetricReplicates(
        point={lv: {m: float(point[i, j]) for j, m in enumerate(metrics)} for i, lv in enumerate(levels)},
        boot={lv: {m: boot[i, j] for j, m in enumerate(metrics)} for i, lv in enumerate(levels)},
        jack=[{lv: {m: jack[i, j, lo:hi] for j, m in enumerate(metrics)} for i, lv in enumerate(levels)}
              for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)],
        calib=tuple(bool(c) for c in about["calib"]))
    return about, replicates


def replicates_for(path: str | os.PathLike, scores: str | os.PathLike,
                   options: EvaluationOptions) -> MetricReplicates | None:
    """The replicates in PATH if they were made from the scores file SCORES as it is now, under OPTIONS; None (logged)
    when PATH is missing or was made from other scores or options, so the caller resamples the cell itself."""
    if not Path(path).is_file():
        log.info("%s: no replicates file; the cell is resampled again", path)
        return None
    about, replicates = read_replicates(path)
    wanted = json.loads(json.dumps(made_from(file_sha256(scores), options)))  # as the file's JSON holds it
    stale = [key for key, value in wanted.items() if about.get(key) != value]
    if stale:
        log.warning("%s was made from another %s than %s's now; the cell is resampled again", path,
                    " and ".join({"scores_sha256": "scores file", "evaluation": "evaluation"}[k] for k in stale), scores)
        return None
    return replicates
