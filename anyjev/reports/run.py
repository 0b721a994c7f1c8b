"""A run's cross-cell outputs from the cells that finished, with the failed ones listed: what a run whose cells partly
failed leaves to look at.

When every cell finishes, the workflow's rules write the tables, figures, the comparison with published numbers,
the provenance report and the viewer, one rule each, each rule calling one function with its job. A failed cell stops
every rule that needs all cells (Snakemake does not run a job whose inputs are missing, even with ``--keep-going``),
so at the end of such a run (``onerror``, in ``workflow/rules/common.smk``) :func:`write_run_outputs` calls the same
functions with the same jobs, into the same files, from the cells that finished: the tables and the provenance report
list each failed cell (model, task, the first line of its error, its log), and a figure naming the failure stands
where the failed cell's reliability diagram goes, so that ``snakemake --report`` has every file it shows. A later run
that completes the failed cells rewrites them through the rules, whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from anyjev.errors import FileFormatError
from anyjev.paths import RunPaths
from anyjev.reports.differences import DifferencesJob, differences_table
from anyjev.reports.plots import (
    ReliabilityJob,
    SummaryPlotsJob,
    VsPublishedPlotJob,
    reliability_plot,
    summary_plots,
    vs_published_plot,
)
from anyjev.reports.provenance import ProvenanceJob, provenance_table
from anyjev.reports.tables import SummaryJob, VsPublishedJob, summary_table, vs_published
from anyjev.reports.viewer import ViewerJob, write_viewer
from anyjev.rundata import read_layout
from anyjev.rundata.run import Failure
from anyjev.rundata.summary import read_summary


@dataclass(frozen=True)
class RunOutputs:
    """Every cross-cell output of a run: the job each rule hands its command (the same objects), and where the rules
    write (PATHS)."""

    summary_table: SummaryJob
    differences_table: DifferencesJob
    provenance_table: ProvenanceJob
    reliability_plots: list[ReliabilityJob]  # one per cell
    summary_plots: SummaryPlotsJob
    vs_published: VsPublishedJob | None  # None: no published table configured
    vs_published_plot: VsPublishedPlotJob | None  # None: nothing of the run has a published counterpart
    viewer: ViewerJob
    paths: RunPaths


def kept_as_they_are(jobs: RunOutputs, made_by: list[str] | None = None, config: str | None = None) -> str | None:
    """Why the cross-cell outputs already at JOBS' paths must not be replaced by this run's partial ones, or None.

    The summary there was made by runs of other configs (MADE_BY, as claimed: :mod:`anyjev.claims`), not this run's
    CONFIG: its files are not this run's to rewrite (a study of its own runs in its own folder: ``snakemake
    --directory``). No cell of this run finished and a summary is there: this run's tables would show nothing, in
    place of whatever that one shows (where there is none, the tables that list the failed cells and their errors are
    written). The summary there shows cells this run does not have: it was made by a run of another config."""
    cells = jobs.summary_table.cells
    csv = jobs.paths.summary["csv"]
    if made_by and config not in made_by and Path(csv).is_file():
        return (f"{csv} was made by a run of {' and '.join(made_by)}, another config, and its outputs are left as they "
                "are")
    if not jobs.summary_table.layout.finished(cells):
        if Path(csv).is_file():
            return "no cell of this run finished, so there is nothing to write in place of the outputs already there"
        return None
    others = sorted(summary_cells(csv) - set(cells))
    if others:
        listed = ", ".join(f"{m}/{t}" for m, t in others[:4]) + (", ..." if len(others) > 4 else "")
        return (f"{csv} shows cells this run does not have ({listed}): it was made by a run of another config, and its "
                f"outputs are left as they are")
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


def write_run_outputs(jobs: RunOutputs) -> dict[tuple[str, str], Failure]:
    """Write every output of JOBS from the cells that finished, listing the others; returns the failed cells."""
    paths = jobs.paths
    run = read_layout(jobs.summary_table.layout, jobs.summary_table.cells)
    summary = paths.summary
    summary_table(jobs.summary_table, summary["csv"], summary["md"], summary["tex"], run=run)
    provenance_table(jobs.provenance_table, paths.provenance_report["md"], paths.provenance_report["html"], run=run)
    for job in jobs.reliability_plots:
        figure = paths.reliability.of(job.model, job.task)
        reliability_plot(job, figure.png, figure.pdf, run=run)
    if run.finished:
        differences_table(jobs.differences_table, paths.differences["csv"], paths.differences["md"], run=run)
        summary_plots(jobs.summary_plots, paths.metrics_by_level.png, paths.metrics_by_level.pdf, paths.flip_by_level.png,
                      paths.flip_by_level.pdf)
        if jobs.vs_published is not None:
            vs_published(jobs.vs_published, paths.vs_published["csv"], paths.vs_published["md"])
            if jobs.vs_published_plot is not None:
                vs_published_plot(jobs.vs_published_plot, paths.vs_published_plot.png, paths.vs_published_plot.pdf)
    write_viewer(jobs.viewer, paths.viewer, run=run)
    return run.failures
