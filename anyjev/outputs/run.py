"""A run's cross-cell outputs from the cells that finished, with the failed ones listed: what a run whose cells partly
failed leaves to look at.

When every cell finishes, the workflow's rules write the tables, figures, the comparison with published numbers,
the provenance report and the viewer, one rule each. A failed cell stops every rule that needs all cells (Snakemake
does not run a job whose inputs are missing, even with ``--keep-going``), so at the end of such a run
(``onerror``, in ``workflow/rules/common.smk``) :func:`write_run_outputs` writes the same files with the same
functions from the cells that finished, lists each failed cell (model, task, the first line of its error, its log)
in the tables and the provenance report, and puts a figure naming the failure where the failed cell's reliability
diagram goes, so that ``snakemake --report`` has every file it shows. A later run that completes the failed cells
rewrites them through the rules, whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.errors import FileFormatError
from anyjev.files import write_text_atomic
from anyjev.outputs.plots import plot_failed_cell, plot_flip, plot_metrics_by_level, plot_reliability, plot_vs_published
from anyjev.outputs.provenance import write_provenance
from anyjev.outputs.tables import (
    published_overlap,
    read_published,
    read_summary,
    vs_published_frame,
    vs_published_markdown,
    write_summary,
)
from anyjev.outputs.viewer import ViewerJob, write_viewer
from anyjev.results import CellLayout, read_layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Figure:
    """One figure's files (``png`` shown in the report, ``pdf`` for a paper); patterns may hold ``{model}``/``{task}``."""

    png: str
    pdf: str

    def of(self, model: str, task: str) -> Figure:
        return Figure(self.png.format(model=model, task=task), self.pdf.format(model=model, task=task))


@dataclass(frozen=True)
class RunOutputs:
    """Every cross-cell output of a run, where the workflow writes it (the rules' paths), and what it is made from."""

    cells: list[tuple[str, str]]
    levels: list[str]
    layout: CellLayout
    config: dict[str, Any]  # the config as run (validated, defaults filled in)
    published: str | None
    summary: dict[str, str]  # csv, md, tex
    provenance: dict[str, str]  # md, html
    metrics_by_level: Figure
    flip_by_level: Figure
    reliability: Figure  # a pattern per cell
    vs_published: dict[str, str]  # csv, md
    vs_published_plot: Figure
    viewer: ViewerJob
    viewer_out: str


def kept_as_they_are(job: RunOutputs) -> str | None:
    """Why the cross-cell outputs already at JOB's paths must not be replaced by this run's partial ones, or None.

    No cell of this run finished: its tables would show nothing, in place of whatever they show now. The summary there
    shows cells this run does not have: it was made by a run of another config, whose files are not this run's to
    rewrite (a study of its own runs in its own folder: ``snakemake --directory``)."""
    if not job.layout.finished(job.cells):
        return "no cell of this run finished, so there is nothing to write in place of the outputs already there"
    shown = summary_cells(job.summary["csv"])
    others = sorted(shown - set(job.cells))
    if others:
        listed = ", ".join(f"{m}/{t}" for m, t in others[:4]) + (", ..." if len(others) > 4 else "")
        return (f"{job.summary['csv']} shows cells this run does not have ({listed}): it was made by a run of another "
                f"config, and its outputs are left as they are")
    return None


def summary_cells(path: str | Path) -> set[tuple[str, str]]:
    """The (model, task) cells a summary table shows; none when there is no table, or none that reads."""
    if not Path(path).is_file():
        return set()
    try:
        table = read_summary(path)
    except FileFormatError:
        return set()
    return set(zip(table["model"], table["task"], strict=True))


def write_run_outputs(job: RunOutputs) -> dict[tuple[str, str], dict[str, str | None]]:
    """Write JOB's outputs from the cells that finished, listing the others; returns the failed cells."""
    run = read_layout(job.layout, job.cells)
    failed = run.failures
    summary = write_summary(run, job.levels, job.summary["csv"], job.summary["md"], job.summary["tex"])
    write_provenance(job.config, run, job.provenance["md"], job.provenance["html"])
    for (m, t), why in failed.items():
        fig = job.reliability.of(m, t)
        plot_failed_cell(f"{m} / {t}", why["error"], why["log"], fig.png, fig.pdf)
    if run.finished:
        plot_metrics_by_level(summary, job.metrics_by_level.png, job.metrics_by_level.pdf)
        plot_flip(summary, job.flip_by_level.png, job.flip_by_level.pdf)
        for cell in run.finished:
            fig = job.reliability.of(cell.model, cell.task)
            plot_reliability(cell.predictions, job.levels, fig.png, fig.pdf, k=cell.metrics["k"], title=f"{cell.model} / {cell.task}",
                             ece_intervals={lv: (cell.metrics["metrics"].get(lv) or {}).get("ece") for lv in job.levels})
    if run.finished and job.published and Path(job.published).is_file():
        table = vs_published_frame(summary, read_published(job.published))
        write_text_atomic(job.vs_published["csv"], table.to_csv(index=False, float_format="%.6f"))
        write_text_atomic(job.vs_published["md"], vs_published_markdown(table))
        if len(published_overlap(read_published(job.published), job.cells, job.levels)):
            plot_vs_published(table, job.vs_published_plot.png, job.vs_published_plot.pdf)
    write_viewer(job.viewer, job.viewer_out, run=run)
    return failed
