"""A cell's bootstrap replicates written as its evaluate job computed them (``replicates.npz``, beside ``metrics.json``):
the format and its reader are :mod:`anyjev.rundata.replicates`. Written with fixed member dates, so that the same
evaluation gives the same bytes.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from anyjev.files import replaced_atomically
from anyjev.numbers.evaluation import MetricReplicates
from anyjev.numbers.options import EvaluationOptions
from anyjev.rundata.replicates import FORMAT, made_from


def write_replicates(path: str | os.PathLike, replicates: MetricReplicates, scores_sha256: str,
                     options: EvaluationOptions) -> Path:
    """Write REPLICATES (made from the scores file whose SHA-256 is SCORES_SHA256, under OPTIONS) to PATH atomically."""
    levels = list(replicates.point)
    metrics = list(next(iter(replicates.point.values()))) if levels else []
    about = {"format": FORMAT, "levels": levels, "metrics": metrics, "calib": list(replicates.calib),
             **made_from(scores_sha256, options)}
    strata = [np.array([[s[lv][m] for m in metrics] for lv in levels], dtype=np.float64).reshape(
        len(levels), len(metrics), -1) for s in replicates.jack]
    arrays = {
        "point": np.array([[replicates.point[lv][m] for m in metrics] for lv in levels], dtype=np.float64),
        "boot": np.array([[replicates.boot[lv][m] for m in metrics] for lv in levels], dtype=np.float64),
        "jack": np.concatenate(strata, axis=2) if strata else np.zeros((len(levels), len(metrics), 0)),
        "jack_rows": np.array([s.shape[2] for s in strata], dtype=np.int64),
        "about": np.array(json.dumps(about, sort_keys=True)),
    }
    with replaced_atomically(path) as tmp, zipfile.ZipFile(tmp, "w") as archive:
        for name, array in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, array, allow_pickle=False)
    return Path(path)
