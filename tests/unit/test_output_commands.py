"""The workflow's output steps as their rules run them: `python -m anyjev <step> --job <job file> <the files it
writes>`. Each writes its files from the committed reference run and logs what it wrote; given a job whose source is
missing, each says so in one line naming the file (exit 2, no traceback). The job travels as a file named by its
content: the same job is the same file, a changed setting a new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyjev.cli import main
from anyjev.jobs import from_data
from anyjev.numbers.options import EvaluationOptions
from anyjev.paths import CONFIG
from anyjev.reports.differences import DifferencesJob
from anyjev.reports.plots import ReliabilityJob, SummaryPlotsJob, VsPublishedPlotJob
from anyjev.reports.provenance import ProvenanceJob
from anyjev.reports.tables import SummaryJob, VsPublishedJob
from anyjev.rundata import CellLayout
from anyjev.settings import Settings
from tests.conftest import REPO

RESULTS = REPO / "results"
CELLS = [("smollm2-135m", t) for t in ("mmlu", "socialiqa", "rotten_tomatoes")]
LEVELS = ["raw", "L0-perm", "L0-bc", "L0", "L1"]


def steps(sources: Path, out: Path) -> dict[str, tuple[object, list[str], list[Path]]]:
    """Each output step: its job (reading the run or tables under SOURCES), its output flags, the files it writes."""
    layout = CellLayout.of_run(sources / "results", sources / "logs")
    tables = sources / "results" / "tables"
    files = {name: out / name for name in ("s.csv", "s.md", "s.tex", "d.csv", "d.md", "p.md", "p.html", "v.csv", "v.md", "r.png", "r.pdf",
                                            "b.png", "b.pdf", "f.png", "f.pdf", "vp.png", "vp.pdf")}

    def flags(**named: str) -> tuple[list[str], list[Path]]:
        return [a for flag, name in named.items() for a in (f"--{flag.replace('_', '-')}", str(files[name]))], \
            [files[name] for name in named.values()]

    return {
        "summary-table": (SummaryJob(CELLS, LEVELS, layout), *flags(csv="s.csv", md="s.md", tex="s.tex")),
        "differences-table": (DifferencesJob(CELLS, LEVELS, layout, EvaluationOptions()), *flags(csv="d.csv", md="d.md")),
        "provenance-table": (ProvenanceJob(CELLS, layout, {"levels": LEVELS}), *flags(md="p.md", html="p.html")),
        "vs-published": (VsPublishedJob(str(tables / "summary.csv"), str(REPO / "results/published/anyjev-2026.csv")),
                         *flags(csv="v.csv", md="v.md")),
        "reliability-plot": (ReliabilityJob(*CELLS[0], LEVELS, layout), *flags(png="r.png", pdf="r.pdf")),
        "summary-plots": (SummaryPlotsJob(str(tables / "summary.csv")),
                          *flags(by_level_png="b.png", by_level_pdf="b.pdf", flip_png="f.png", flip_pdf="f.pdf")),
        "vs-published-plot": (VsPublishedPlotJob(str(tables / "vs_published.csv")), *flags(png="vp.png", pdf="vp.pdf")),
    }


def fake_vs_published(tmp_path: Path) -> Path:
    """The reference run's tables, with a comparison that overlaps it (the committed one holds other models)."""
    tables = tmp_path / "src" / "results" / "tables"
    tables.mkdir(parents=True)
    (tables / "summary.csv").write_bytes((RESULTS / "tables" / "summary.csv").read_bytes())
    (tables / "vs_published.csv").write_text("model,task,level,metric,ours,lo,hi,published,diff,published_in_interval,source\n"
                                             "smollm2-135m,mmlu,raw,acc,0.26,0.19,0.367,0.25,0.01,True,test\n")
    (tmp_path / "src" / "results" / "cells").symlink_to(RESULTS / "cells")
    return tmp_path / "src"


@pytest.mark.parametrize("step", sorted(steps(REPO, REPO)))
def test_a_step_writes_its_files_from_its_job_file_and_logs_them(step, tmp_path, caplog) -> None:
    job, flags, written = steps(fake_vs_published(tmp_path), tmp_path / "out")[step]
    path = job.to_file(tmp_path / "jobs")
    assert Path(path).name.startswith(f"{type(job).__name__}-") and len(Path(path).name) < 60
    with caplog.at_level("INFO", logger="anyjev"):
        assert main([step, "--job", path, *flags]) == 0
    assert all(f.is_file() and f.stat().st_size > 0 for f in written), [f for f in written if not f.is_file()]
    assert str(written[0]) in caplog.text or "rows" in caplog.text or "sections" in caplog.text, caplog.text


@pytest.mark.parametrize("step", ["summary-plots", "vs-published", "vs-published-plot"])
def test_a_step_whose_table_is_missing_says_which_in_one_line(step, tmp_path, capsys) -> None:
    missing = tmp_path / "nowhere"
    job, flags, written = steps(missing, tmp_path / "out")[step]
    if step == "vs-published":  # its summary table is missing; the published one ships with the workflow
        job = VsPublishedJob(str(missing / "summary.csv"), job.published)
    assert main([step, "--job", job.to_file(tmp_path / "jobs"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"anyjev {step}: ") and str(missing) in err[0], err
    assert not any(f.exists() for f in written)


@pytest.mark.parametrize("step", ["summary-table", "provenance-table", "reliability-plot"])
def test_a_step_that_reads_the_run_shows_a_cell_that_has_not_run(step, tmp_path) -> None:
    """What the end of a run with failed cells writes too (anyjev/reports/run.py): a cell without files is listed as not
    run, with the log it would have, rather than left out."""
    job, flags, written = steps(tmp_path / "nowhere", tmp_path / "out")[step]
    assert main([step, "--job", job.to_file(tmp_path / "jobs"), *flags]) == 0
    assert all(f.stat().st_size > 0 for f in written)
    if step != "reliability-plot":
        shown = next(f for f in written if f.suffix == ".md").read_text()
        assert "the cell has not run" in shown and "score/smollm2-135m/mmlu.log" in shown, shown


def test_a_job_file_is_named_by_its_content(tmp_path) -> None:
    """The same job is the same file (written once); a changed setting is another file, so the rule's params (the
    path) change and Snakemake reruns the job; the file reads back into the same job."""
    settings = Settings.load(REPO / CONFIG)
    layout = CellLayout.of_run("results", "logs")
    job = settings.summary_job(layout=layout)
    first = job.to_file(tmp_path)
    mtime = Path(first).stat().st_mtime_ns
    assert settings.summary_job(layout=layout).to_file(tmp_path) == first and Path(first).stat().st_mtime_ns == mtime
    fewer = SummaryJob(job.cells, job.levels[:2], layout)
    assert fewer.to_file(tmp_path) != first
    assert from_data(SummaryJob, json.loads(Path(first).read_text()), complete=True) == job
    assert SummaryJob.from_json(first) == job


def test_a_missing_job_file_is_one_line(tmp_path, capsys) -> None:
    assert main(["summary-plots", "--job", str(tmp_path / "SummaryPlotsJob-0.json"), "--by-level-png", "a", "--by-level-pdf",
                 "b", "--flip-png", "c", "--flip-pdf", "d"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SummaryPlotsJob-0.json" in err[0] and "--job" in err[0], err


def test_the_workflow_parse_imports_no_drawing_library() -> None:
    """Every `snakemake` call (a dry run, a rerun with nothing to do, each run's start) imports what common.smk
    imports from anyjev; matplotlib (0.7 s a process) is imported by the steps that draw, not there."""
    import re
    import subprocess
    import sys

    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    modules = sorted(set(re.findall(r"^from (anyjev[\w.]*) import", common, flags=re.M)))
    assert "anyjev.reports.plots" in modules and "anyjev.reports.run" in modules, modules
    probe = "; ".join(f"import {m}" for m in modules) + "; import sys; print(sorted(m for m in ('matplotlib',) if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"common.smk's imports load {out.stdout.strip()}"
