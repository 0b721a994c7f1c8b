#!/usr/bin/env python
"""The two label-prior modes on the committed reference scores, and what one cell's evaluation costs.

Every cell under results/cells/ is evaluated in both ``evaluation.prior_mode``s, ``batch`` (the default: the whole
test split) and ``streaming`` (the published library's "scored so far"), with the config's other evaluation settings
(the committed run's); each evaluation is timed (the whole of it: levels of every resample, the jackknife, the
intervals). Written to results/bench/prior_modes.json; docs/metrics.md's "Prior modes" table is generated from it
(``python -m bench.report``).

    .venv/bin/python bench/bench_prior_modes.py
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.run.evaluate import evaluate_records  # noqa: E402
from anyjev.rundata import read_run  # noqa: E402
from bench.common import run_record, run_under_limit, write_json  # noqa: E402

OUT = REPO / "results" / "bench" / "prior_modes.json"
MODES = ("batch", "streaming")
LEVELS = ("L0", "L0-bc")
METRICS = ("acc", "nll", "brier", "ece", "flip")


def main() -> int:
    report = run_record() | {"cells": [], "seconds": []}
    run = read_run(REPO / "results", REPO / "logs")
    for cell in run.finished:
        options = cell.evaluation_options
        for mode in MODES:
            t0 = time.perf_counter()
            evaluation = evaluate_records(cell.scores.items, dataclasses.replace(options, prior_mode=mode),
                                          extras=cell.scores.extras, source=str(cell.file("scores.jsonl")))
            seconds = time.perf_counter() - t0
            out = evaluation.to_json()
            report["seconds"].append(seconds)
            report["cells"].append({
                "model": cell.model, "task": cell.task, "mode": mode, "n": out["n"], "n_calib": out["n_calib"],
                "n_boot": options.n_boot, "seconds": seconds,
                "metrics": {lv: {m: {k: out["metrics"][lv][m][k] for k in ("value", "lo", "hi")} for m in METRICS}
                            for lv in LEVELS}})
            print(f"{cell.key} {mode}: {seconds:.1f} s", flush=True)
    report["median_seconds"] = statistics.median(report["seconds"])
    report["mean_over_cells"] = {mode: {m: statistics.fmean(c["metrics"]["L0"][m]["value"] for c in report["cells"]
                                                            if c["mode"] == mode) for m in METRICS} for mode in MODES}
    write_json(OUT, report)
    print(f"-> {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1800))
