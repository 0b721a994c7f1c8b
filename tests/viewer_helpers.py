"""What the viewer's tests share: the committed reference run's task files rebuilt offline, its viewer job, and
a run built from real cells in which one cell failed (its scores, no metrics, a log naming the error) and one
never ran."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from anyjev.rundata import CellLayout
from tests.conftest import REPO

RESULTS = REPO / "results"
MODEL = "smollm2-135m"
TASKS = ("mmlu", "socialiqa", "rotten_tomatoes")
# The failed cell's log ends the way anyjev's CLI ends a failed score job.
FAILED_LOG = ("2026-11-30 16:00:01 INFO anyjev.run.cell: scoring 160 items\n"
              "anyjev score: LabelTokenError: prompt 3: the server's top_logprobs do not hold exactly the label ids "
              "[49, 50, 51, 52]. Missing label ids: 52 ('D').\n"
              "  the fix: start the server with --logprobs-mode processed_logprobs\n")
FAILED_ERROR = FAILED_LOG.splitlines()[1]


def reference_tasks(dest: Path) -> dict[str, str]:
    """The reference run's task files, rebuilt offline from config/config.yaml (as `prepare-task` builds them)."""
    from anyjev.data.prepare import prepare_task
    from anyjev.settings import Settings

    settings = Settings.load(REPO / "config" / "config.yaml", workdir=REPO)
    out = {}
    for task in TASKS:
        path = dest / f"{task}.jsonl"
        if not path.is_file():
            prepare_task(settings.prepare_job(task, hub_cache="resources/hub"), str(path))
        out[task] = str(path)
    return out


def layout(results: Path, logs: Path) -> CellLayout:
    """The workflow's cell layout (workflow/rules/common.smk) under RESULTS and LOGS."""
    return CellLayout(f"{results}/cells/{{model}}/{{task}}", f"{logs}/score/{{model}}/{{task}}.log",
                      f"{logs}/evaluate/{{model}}/{{task}}.log")


def reference_job(tasks: dict[str, str], results: Path = RESULTS, logs: Path | None = None,
                  cells: list[tuple[str, str]] | None = None):
    """The viewer job of the committed reference run (config/config.yaml's cells and levels)."""
    from anyjev.settings import Settings

    job = Settings.load(REPO / "config" / "config.yaml", workdir=REPO).viewer_job(
        models_dir=str(REPO / "resources" / "models"), task_file="{task}", layout=layout(results, logs or results.parent / "logs"))
    job = dataclasses.replace(job, tasks=tasks)
    if cells is not None:
        job = dataclasses.replace(job, cells=list(cells), tokenizers=job.tokenizers | {m: job.tokenizers[MODEL] for m, _ in cells})
    return job


def failed_run(root: Path, tasks: dict[str, str]) -> dict:
    """A run of four cells under ROOT: socialiqa and rotten_tomatoes copied from the reference run, mmlu scored
    but failed (no metrics.json, a score log ending in an error), and a model `never-ran` whose mmlu cell has no
    file and no log. Returns the viewer job."""
    results, logs = root / "results", root / "logs"
    for task in ("socialiqa", "rotten_tomatoes"):
        shutil.copytree(RESULTS / "cells" / MODEL / task, results / "cells" / MODEL / task)
    failed = results / "cells" / MODEL / "mmlu"
    failed.mkdir(parents=True)
    (failed / "scores.jsonl.partial").write_text((RESULTS / "cells" / MODEL / "mmlu" / "scores.jsonl").read_text()[:2000])
    (logs / "score" / MODEL).mkdir(parents=True)
    (logs / "score" / MODEL / "mmlu.log").write_text(FAILED_LOG)
    cells = [(MODEL, "mmlu"), (MODEL, "socialiqa"), (MODEL, "rotten_tomatoes"), ("never-ran", "mmlu")]
    return reference_job(tasks, results, logs, cells)


def run_data(index_html: Path) -> dict:
    """The run-level data inline in a viewer's index.html."""
    text = index_html.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="anyjev-run">') + len('<script type="application/json" id="anyjev-run">')
    return json.loads(text[start: text.index("</script>", start)].replace("<\\/", "</"))
