"""The evaluate job: a scored cell read back (:mod:`anyjev.rundata.scores`, into arrays by :mod:`anyjev.run.records`),
evaluated offline (:mod:`anyjev.numbers.evaluation`), and written as ``metrics.json`` and ``predictions.csv`` (their
formats: :mod:`anyjev.rundata.cellfiles`); and two cells of one task compared (:func:`compare_cells`). No server
needed."""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from anyjev.data.split import fewer_than_asked
from anyjev.data.taskfile import item_splits
from anyjev.decision.layouts import GROUPS
from anyjev.errors import TaskDataError
from anyjev.files import file_sha256, write_json_atomic, write_text_atomic
from anyjev.jobs import Job
from anyjev.numbers.compare import models_minus_models
from anyjev.numbers.evaluation import RESAMPLED, Evaluation, ItemLevels, evaluate
from anyjev.numbers.evaluation import item_levels as point_item_levels
from anyjev.numbers.metrics import METRICS, top_choice
from anyjev.numbers.options import EvaluationOptions
from anyjev.paths import SCORES, STAGED
from anyjev.run.audit import audit_summary
from anyjev.run.records import cell_groups
from anyjev.run.replicates import write_replicates
from anyjev.rundata.cellfiles import PREDICTION_COLUMNS
from anyjev.rundata.replicates import replicates_for
from anyjev.rundata.scores import read_scores
from anyjev.schema import setting

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class EvaluateJob(Job):
    """What the evaluate step needs (built by ``Settings.evaluate_job``): the config's ``evaluation.*``; for the cell's
    reliability diagram, drawn by the same step from the evaluation it holds, the cell its title names and the levels
    it shows."""

    evaluation: EvaluationOptions = field(default_factory=EvaluationOptions)
    model: str | None = None
    task: str | None = None
    levels: list[str] = setting("levels")

    @property
    def title(self) -> str:
        """The reliability diagram's title: the cell, ``model / task``."""
        return f"{self.model} / {self.task}" if self.model and self.task else ""


def evaluate_records(records: list[dict], options: EvaluationOptions | None = None, *, extras: dict[str, dict] | None = None,
                     source: str = "<records>", level: float = 0.95) -> Evaluation:
    """Levels and metrics of a cell's item records (and its other records: content-free probes add ``L0-cf``)."""
    options = options or EvaluationOptions()
    cell = cell_groups(records, extras, options.prior_mode, source)
    return evaluate(cell.groups, options, ids=cell.ids, n_calib_items=cell.n_calib, answer_masses=cell.answer_mass,
                    level=level, source=source)


def item_levels(records: list[dict], options: EvaluationOptions | None = None, *, extras: dict[str, dict] | None = None,
                source: str = "<records>") -> ItemLevels:
    """Every level of every test item of a cell's records at the point, with the priors and T that made them; the
    same levels :func:`evaluate_records` computes its metrics and ``predictions.csv`` from."""
    options = options or EvaluationOptions()
    cell = cell_groups(records, extras, options.prior_mode, source)
    return point_item_levels(cell.groups, options, cell.ids)


def write_predictions(path: str | os.PathLike, evaluation: Evaluation) -> None:
    """One row per (test item, level, group): gold, predicted option, confidence, p(gold), tied top labels.

    ``pred`` is the lowest-index top option; ``n_top`` > 1 says it is tied and the metrics count each tied
    option with weight 1/n_top.
    """
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(list(PREDICTION_COLUMNS))
    for level in evaluation.levels:
        for group in GROUPS:
            lp = evaluation.point[level].get(group)
            if lp is None:
                continue
            pred, conf, p_gold, n_top = top_choice(lp, evaluation.gold)
            for i, item in enumerate(evaluation.ids):
                w.writerow([item, level, group, int(evaluation.gold[i]), int(pred[i]), repr(float(conf[i])),
                            repr(float(p_gold[i])), int(n_top[i])])
    write_text_atomic(path, buf.getvalue())


def scored_items_problem(records: list[dict], task_file: str, splits: dict[str, str | None]) -> str | None:
    """How the item records of a cell's scores differ from the items of its task file TASK_FILE, each item's split by
    id (SPLITS: every item of the task's test and calibration splits once, with its split, nothing else); None when
    they do not."""
    seen: dict[str, str | None] = {}
    for rec in records:
        rid = str(rec["id"])
        if rid not in splits:
            return f"item {rid!r} is not in {task_file}"
        if rid in seen:
            return f"item {rid!r} is scored twice"
        if (rec.get("split") or "test") != (splits[rid] or "test"):
            return f"item {rid!r} is scored as {rec.get('split')!r} where {task_file} has it as {splits[rid]!r}"
        seen[rid] = rec.get("split")
    missing = [rid for rid in splits if rid not in seen]
    if not missing:
        return None
    n_calib = sum(split == "calib" for split in splits.values())
    return (f"{len(records)} items where {task_file} has {len(splits)} ({len(splits) - n_calib} test + {n_calib} "
            f"calibration); the first missing is {missing[0]!r} ({splits[missing[0]] or 'test'})")


def check_scored_items(scores: str, records: list[dict], task_file: str, splits: dict[str, str | None]) -> None:
    """Refuse a cell's scores SCORES (its item RECORDS) that do not hold every item of its task file TASK_FILE (each
    item's split by id: SPLITS) once (:func:`scored_items_problem`), naming the way back: the staged copy a model's job
    (``score_jobs: model``) keeps when it holds them all, else a rescore."""
    problem = scored_items_problem(records, task_file, splits)
    if problem is None:
        return
    staged = os.path.join(os.path.dirname(scores), STAGED, SCORES)
    whole = False
    if os.path.isfile(staged):
        try:
            whole = scored_items_problem(read_scores(staged).items, task_file, splits) is None
        except TaskDataError:
            whole = False
    way = (f"its staged copy holds them all: cp {staged} {scores}, then run again" if whole else
           f"rescore the cell: delete {scores} and run again (under score_jobs: model, delete {staged} and the "
           f"model's record in allocations/ beside cells/ too)")
    raise TaskDataError(scores, "items", f"{problem}: the scores were cut or made from another task file; {way}")


def evaluate_cell(job: EvaluateJob, scores: str, metrics_out: str, predictions_out: str | None = None,
                  replicates_out: str | None = None, *, task_file: str | None = None,
                  figure: Callable[[Evaluation], object] | None = None) -> dict:
    """Evaluate the scores file SCORES; write ``metrics.json`` (with the batch audit's numbers when the cell holds an
    audit: :func:`anyjev.run.audit.audit_summary`; and the predictions CSV, and the bootstrap replicates for the
    differences table: :mod:`anyjev.run.replicates`) atomically, ``metrics.json`` last: it marks the cell finished. With
    the cell's TASK_FILE (the workflow gives it), the scores are first checked to hold every item of the task once
    (:func:`check_scored_items`), and a split holding fewer items than the config asked is noted. FIGURE, when given,
    draws from the evaluation before ``metrics.json`` is written (the cell's reliability diagram:
    :func:`anyjev.reports.draw.evaluation_reliability`)."""
    cell = read_scores(scores)
    identity, records, extras = cell.identity, cell.items, cell.extras
    header: dict = {}
    if task_file:
        header, splits = item_splits(task_file)
        check_scored_items(scores, records, task_file, splits)
    asked = (header.get("origin") or {}).get("split") or {}
    evaluation = evaluate_records(records, job.evaluation, source=scores, extras=extras)
    if "n_test" in asked and "n_calib" in asked:
        n_calib = sum(r.get("split") == "calib" for r in records)
        fewer = fewer_than_asked(header["task"], len(records) - n_calib, n_calib, asked["n_test"], asked["n_calib"])
        if fewer:
            log.warning("%s: %s", scores, fewer)
            evaluation.notes.insert(0, {"level": None, "text": fewer})
    out = evaluation.to_json() | {"identity": identity, "metric_names": list(METRICS)}
    audit = audit_summary(records, extras, job.evaluation, scores)
    if audit is not None:
        out["audit"] = audit
    if replicates_out:
        write_replicates(replicates_out, evaluation.replicates, file_sha256(scores), job.evaluation)
    if predictions_out:
        write_predictions(predictions_out, evaluation)
    if figure is not None:
        figure(evaluation)
    write_json_atomic(metrics_out, out)
    acc = {lv: round(out["metrics"][lv]["acc"]["value"], 3) for lv in out["levels"]}
    log.info("evaluated %s: n=%d K=%s acc %s", scores, out["n"], out["k"], acc)
    return out


ITEM_FIELDS = ("id", "split", "gold", "k")  # what two cells compared item by item must share


def _items(records: list[dict]) -> list[tuple[Any, ...]]:
    return [(r["id"], r.get("split") or "test", int(r["gold"]), int(r["k"])) for r in records]


def compare_cells(scores_a: str, scores_b: str, options: EvaluationOptions | None = None, *,
                  level: float = 0.95) -> dict[str, Any]:
    """The cell scored in SCORES_A minus the cell scored in SCORES_B (two models on one task), under OPTIONS (the
    evaluate job's ``evaluation``): every metric of every level both have, A's value minus B's with the BCa interval of
    the paired difference, both cells resampled on the same items (:func:`anyjev.numbers.compare.model_minus_model`).

    The cells must hold the same items, in the same order, with the same split, gold and K; a TaskDataError names the
    first item of SCORES_B that differs, before anything is computed."""
    return compare_many([scores_a, scores_b], options, level=level)[(0, 1)]


def compare_many(scores: Sequence[str], options: EvaluationOptions | None = None, *, level: float = 0.95,
                 replicates: Sequence[str | None] = ()) -> dict[tuple[int, int], dict[str, Any]]:
    """:func:`compare_cells` for each earlier file of SCORES (models on one task) and each later one, keyed by their
    positions: each file is read, checked against the first and resampled once, however many pairs it is in
    (:func:`anyjev.numbers.compare.models_minus_models`). REPLICATES: each cell's replicates file as its evaluate job
    wrote it (None: none), used where it was made from that scores file under OPTIONS instead of resampling the cell
    (:func:`anyjev.rundata.replicates.replicates_for`)."""
    options = options or EvaluationOptions()
    cells = [read_scores(path) for path in scores]
    first = scores[0]
    mine = _items(cells[0].items)
    for path, cell in zip(scores[1:], cells[1:], strict=True):
        theirs = _items(cell.items)
        for i, (x, y) in enumerate(zip(mine, theirs, strict=False)):
            differ = [f"{name} {yv!r} where {first} has {xv!r}" for name, xv, yv in zip(ITEM_FIELDS, x, y, strict=True)
                      if xv != yv]
            if differ:
                raise TaskDataError(path, f"item {i + 1} ({y[0]})", f"{'; '.join(differ)} (two cells are compared on "
                                    f"the same items, in the same order)")
        if len(mine) != len(theirs):
            raise TaskDataError(path, "items", f"{len(theirs)} items where {first} has {len(mine)} (two cells are "
                                f"compared on the same items)")
    grouped = [cell_groups(cell.items, cell.extras, options.prior_mode, path) for path, cell in zip(scores, cells, strict=True)]
    known = [None if path is None else replicates_for(path, scores_path, options)
             for path, scores_path in zip(replicates, scores, strict=True)] if replicates else []
    differences = models_minus_models([g.groups for g in grouped], options, level, known=known)
    kept = sum(r is not None for r in known)
    log.info("compared %d cells of %s's task: %d paired as their evaluation resampled them, %d resampled here",
             len(scores), scores[0], kept, len(scores) - kept)
    settings = {**dataclasses.asdict(options), "interval": f"BCa {level:.0%}", "interval_level": level,
                "resampled": f"{RESAMPLED}; the same items drawn for both cells"}
    return {(i, j): {"a": scores[i], "b": scores[j], "n": len(grouped[i].ids), "n_calib": grouped[i].n_calib,
                     "levels": list(pair), "model_minus_model": pair, "settings": settings}
            for (i, j), pair in differences.items()}
