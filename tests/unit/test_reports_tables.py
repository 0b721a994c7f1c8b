"""Tables from the committed reference run: direction markers, the LaTeX tabular (parsed, and compiled
when pdflatex is installed), the README's table equal to the one generated from summary.csv, and the
provenance report built from the cells' files."""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from anyjev.reports.provenance import sections_html, sections_markdown, write_provenance
from anyjev.reports.tables import HIGHER_IS_BETTER, main, readme_markdown, summary_latex, summary_markdown
from anyjev.rundata import read_cells
from anyjev.rundata.summary import TABLE_METRICS, read_summary
from tests.conftest import REPO, require
from tests.readme_table import README_END, README_START, readme_block
from tests.waiting import HANG_GUARD

SUMMARY = REPO / "results" / "tables" / "summary.csv"


@pytest.fixture(scope="module")
def summary():
    return read_summary(SUMMARY)


def test_markdown_headers_carry_the_direction(summary) -> None:
    head = summary_markdown(summary).splitlines()[0]
    assert "| acc ↑ |" in head and "| NLL ↓ |" in head and "| cov@5% ↑ |" in head and "| flip ↓ |" in head
    assert head.count("↑") == sum(HIGHER_IS_BETTER.values()) and head.count("↓") == len(TABLE_METRICS) - sum(HIGHER_IS_BETTER.values())
    row = summary_markdown(summary).splitlines()[2]
    first = summary.iloc[0]  # the committed first cell's raw accuracy, with its interval
    assert f"| {first['acc']:.3f} [{first['acc_lo']:.3f}, {first['acc_hi']:.3f}] |" in row


def _tabular_rows(tex: str) -> tuple[str, list[list[str]]]:
    m = re.search(r"\\begin\{tabular\}\{([^}]*)\}(.*)\\end\{tabular\}", tex, re.S)
    assert m, "no tabular environment"
    spec, body = m.group(1), m.group(2)
    rows = [r.strip() for r in body.split("\\\\")]
    cells = [[c.strip() for c in re.sub(r"\\hline", "", r).split("&")] for r in rows if re.sub(r"\\hline", "", r).strip()]
    return spec, cells


def test_latex_table_has_the_summary_rows(summary) -> None:
    tex = summary_latex(summary)
    spec, rows = _tabular_rows(tex)
    head, body = rows[0], rows[1:]
    assert len(spec) == len(head) == 5 + len(TABLE_METRICS)
    assert all(len(r) == len(head) for r in body)
    assert head[5] == r"acc $\uparrow$" and head[7] == r"NLL $\downarrow$" and r"cov@5\%" in head[11]
    assert len(body) == len(summary)
    for r, (_, s) in zip(body, summary.iterrows(), strict=True):
        assert r[0] == s["model"] and r[1] == s["task"].replace("_", r"\_") and r[2] == s["level"]
        assert r[5] == f"{s['acc']:.3f} {{\\scriptsize [{s['acc_lo']:.3f}, {s['acc_hi']:.3f}]}}"


def test_latex_table_compiles(summary, tmp_path: Path) -> None:
    require("latex", shutil.which("pdflatex") is not None, "pdflatex is not installed (apt-get install texlive-latex-base)")
    (tmp_path / "summary.tex").write_text(summary_latex(summary))
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage[landscape,margin=1cm]{geometry}\n"
                                      "\\begin{document}\n\\tiny\n\\input{summary.tex}\n\\end{document}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "doc.pdf").read_bytes().startswith(b"%PDF")


def test_readme_table_is_the_generated_one(summary) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme_block(text)
    assert block is not None, f"README.md has no {README_START} ... {README_END} markers around its results table"
    assert block.strip() == readme_markdown(summary).strip(), (
        "README's results table differs from `python -m anyjev.reports.tables readme results/tables/summary.csv`")


def test_readme_command_prints_the_table(summary, capsys) -> None:
    assert main(["readme", str(SUMMARY)]) == 0
    out = capsys.readouterr().out
    assert out == readme_markdown(summary)
    assert out.splitlines()[0].startswith("| task | K | level | acc ↑ |")  # one model: no model column
    assert readme_block(f"x\n{README_START}\n{out}{README_END}\n") == out.rstrip("\n")


def test_provenance_report_from_the_committed_cells(tmp_path: Path) -> None:
    folders = sorted(glob.glob(str(REPO / "results/cells/*/*")))
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    write_provenance(config, read_cells(folders), tmp_path / "p.md", tmp_path / "p.html")
    md, html = (tmp_path / "p.md").read_text(), (tmp_path / "p.html").read_text()
    p0 = json.loads((Path(folders[0]) / "provenance.json").read_text())
    for text in (md, html):
        assert p0["model_source"]["file_sha256"][:12] in text and p0["task_file"]["sha256"][:12] in text
        assert p0["vllm_version"] in text and p0["server"]["system_fingerprint"][0] in text
        assert "--logprobs-mode processed_logprobs" in text and "rotten_tomatoes" in text
    assert "levels:" in md  # the config as run, as YAML


def test_provenance_shows_tie_rates_and_bound_temperatures(tmp_path: Path) -> None:
    m = json.loads((REPO / "results/cells/smollm2-135m/mmlu/metrics.json").read_text())
    m["temperature"] = {"fwd": {"T": 20.09, "at_bound": True}, "rev": {"T": 0.5, "at_bound": False}}
    m["metrics"]["L0"]["tie_rate"] = 0.125
    path = tmp_path / "cells/mdl/tsk/metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(m))
    sections = write_provenance({"levels": ["L0"]}, read_cells([path.parent]), tmp_path / "p.md")  # no provenance.json
    md = sections_markdown(sections)
    assert "fwd: 20.1 (at the fit's bound); rev: 0.5" in md and "L0 0.125" in md
    assert "<td>mdl</td>" in sections_html(sections)
