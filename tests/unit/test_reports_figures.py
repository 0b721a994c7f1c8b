"""Every figure the report lists is produced, as PNG and PDF, and is not blank: drawn from the committed
reference run (results/tables/summary.csv, results/cells/*/predictions.csv) into tmp_path by the functions the
workflow's figure commands call, with their jobs. The list of figures is read from the rules as Snakemake reads them,
so a new report figure without a producer here fails this test."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from anyjev.paths import Figure, RunPaths
from anyjev.reports import draw, plots
from anyjev.reports.tables import VsPublishedJob, summary_frame, vs_published, vs_published_frame, vs_published_markdown
from anyjev.rundata import CellLayout, read_cells
from anyjev.rundata.summary import read_summary
from tests.conftest import REPO
from tests.workflow_rules import workflow_rules

SUMMARY = REPO / "results" / "tables" / "summary.csv"
CELLS = sorted((p.parent.parent.name, p.parent.name) for p in (REPO / "results" / "cells").glob("*/*/predictions.csv"))


def report_figures() -> list[tuple[str, str]]:
    """(png, pdf) output patterns of every rule output Snakemake puts in the report that is a PNG; the PDF must be
    an output of the same rule with the same stem."""
    out = []
    for name, rule in workflow_rules().items():
        outputs = {re.sub(r"\{(\w+),[^{}]*\}", r"{\1}", o["path"]): o["report"] for o in rule["output"]}
        for png in (p for p, in_report in outputs.items() if in_report and p.endswith(".png")):
            pdf = png[:-4] + ".pdf"
            assert pdf in outputs, f"rule {name}: {png} is in the report but its PDF {pdf} is not an output"
            out.append((png, pdf))
    return out


def blank(png: Path) -> bool:
    """Blank, or a placeholder: too small, too little ink (< 2% non-white pixels), or no coloured pixels
    at all (every data mark is coloured; a text-only "nothing to show" figure is grey)."""
    img = mpimg.imread(png)[..., :3]
    ink = float((img.mean(axis=-1) < 0.95).mean())
    coloured = float(((img.max(axis=-1) - img.min(axis=-1)) > 0.3).mean())
    return img.shape[0] < 200 or img.shape[1] < 200 or float(np.std(img)) < 0.05 or ink < 0.02 or coloured < 0.001


def test_blank_detects_a_placeholder(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4))
    ax.text(0.5, 0.5, "no cell with a published counterpart", ha="center", va="center")
    ax.axis("off")
    fig.savefig(tmp_path / "placeholder.png", dpi=110)
    plt.close(fig)
    assert blank(tmp_path / "placeholder.png")


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> Path:
    """All figures of the committed run, written under tmp/<the rule's output path>."""
    root = tmp_path_factory.mktemp("figures")
    paths = RunPaths()
    by_level, flip = (Figure(str(root / f.png), str(root / f.pdf)) for f in (paths.metrics_by_level, paths.flip_by_level))
    plots.summary_plots(plots.SummaryPlotsJob(str(SUMMARY)), by_level.png, by_level.pdf, flip.png, flip.pdf)
    layout = CellLayout.of_run(REPO / "results", REPO / "logs")
    for model, task in CELLS:
        levels = json.loads((REPO / "results" / "cells" / model / task / "metrics.json").read_text())["levels"]
        figure = paths.reliability.of(model, task)
        plots.reliability_plot(plots.ReliabilityJob(model, task, levels, layout), str(root / figure.png), str(root / figure.pdf))
    # a published table that overlaps the run: two of our own values, shifted
    pub = pd.DataFrame([{"model": m, "task": t, "level": "raw", "metric": "acc", "value": 0.25, "source": "test"}
                        for m, t in CELLS[:2]])
    pub.to_csv(root / "published.csv", index=False)
    vs_published(VsPublishedJob(str(SUMMARY), str(root / "published.csv")), str(root / "vs.csv"), str(root / "vs.md"))
    plots.vs_published_plot(plots.VsPublishedPlotJob(str(root / "vs.csv")), str(root / paths.vs_published_plot.png),
                            str(root / paths.vs_published_plot.pdf))
    return root


def test_the_reference_run_has_cells() -> None:
    assert len(CELLS) >= 3 and SUMMARY.is_file()


def test_every_report_figure_exists_as_png_and_pdf_and_is_not_blank(produced: Path) -> None:
    figures = report_figures()
    assert {p for p, _ in figures} >= {"results/plots/metrics_by_level.png", "results/plots/flip_by_level.png",
                                       "results/plots/reliability/{model}/{task}.png", "results/plots/vs_published.png"}
    for png_pat, pdf_pat in figures:
        for model, task in CELLS if "{model}" in png_pat else [("", "")]:
            png = produced / png_pat.format(model=model, task=task)
            pdf = produced / pdf_pat.format(model=model, task=task)
            assert png.is_file(), f"{png_pat}: no producer wrote it"
            assert pdf.is_file() and pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 5000, pdf
            assert not blank(png), f"{png} is blank"
            img = mpimg.imread(png)
            assert img.shape[1] >= 900, f"{png}: {img.shape[1]} px wide; 300 dpi at >= 3 in expected"


def test_empty_published_comparison_is_a_note_not_a_figure(tmp_path: Path) -> None:
    summary = read_summary(SUMMARY)
    pub = pd.DataFrame([{"model": "Qwen3-8B", "task": "banking20", "level": "raw", "metric": "flip", "value": 0.23}])
    df = vs_published_frame(summary, pub)
    assert df.empty
    assert vs_published_markdown(df).startswith("No overlap")
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_vs_published(df, tmp_path / "v.png")
    assert not (tmp_path / "v.png").exists()


def test_reliability_bins_and_wilson() -> None:
    assert [draw.reliability_bin_count(n) for n in (10, 45, 100, 225, 1000)] == [3, 3, 6, 15, 15]
    lo, hi = draw.wilson_interval(np.array([0, 10, 5]), np.array([10, 10, 10]))
    assert lo[0] == pytest.approx(0.0, abs=1e-12) and hi[0] == pytest.approx(0.2775, abs=1e-4)
    assert hi[1] == pytest.approx(1.0) and lo[1] == pytest.approx(1 - 0.2775, abs=1e-4)
    assert lo[2] == pytest.approx(0.2366, abs=1e-4) and hi[2] == pytest.approx(0.7634, abs=1e-4)


def test_chance_references() -> None:
    assert plots.chance("acc", 4) == 0.25 and plots.chance("nll", 3) == pytest.approx(math.log(3))
    assert plots.chance("brier", 2) == 0.5 and plots.chance("ece", 4) is None


def test_future_metrics_fields_are_tolerated(tmp_path: Path) -> None:
    """metrics.json may gain per-level tie_rate, temperatures with at_bound flags and a K such as
    "mixed (2-5)": the summary keeps them, and the figures still draw (no chance line for mixed K)."""
    src = json.loads((REPO / "results/cells" / CELLS[0][0] / CELLS[0][1] / "metrics.json").read_text())
    src["k"] = "mixed (2-5)"
    src["temperature"] = {"fwd": {"value": 20.1, "at_bound": True}, "rev": {"value": 0.5, "at_bound": False}}
    for i, lv in enumerate(src["levels"]):
        src["metrics"][lv]["tie_rate"] = {"value": 0.01 * i, "lo": 0.0, "hi": 0.1} if i % 2 else 0.01 * i
    path = tmp_path / "results/cells/m/t/metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(src))
    df = summary_frame(read_cells([path.parent]), src["levels"])
    assert list(df["tie_rate"]) == pytest.approx([0.01 * i for i in range(len(src["levels"]))])
    assert set(df["K"]) == {"mixed (2-5)"}
    plots.plot_metrics_by_level(df, tmp_path / "m.png")
    assert not blank(tmp_path / "m.png")
    cell = REPO / "results/cells" / CELLS[0][0] / CELLS[0][1]
    plots.plot_reliability(pd.read_csv(cell / "predictions.csv"), src["levels"], tmp_path / "r.png", k=src["k"])
    assert not blank(tmp_path / "r.png")
