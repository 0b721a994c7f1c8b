"""The run's provenance for the report: the config as run, and per cell what was read (model and task
hashes), how (vLLM version, argv, system fingerprints, git commit) and what the evaluation fitted (tie
rates, temperatures, interval settings), from each cell's provenance.json and metrics.json.

Written as Markdown (readable on GitHub) and HTML (shown inside the Snakemake report), from a run read by
:mod:`anyjev.rundata`. A provenance field is shown when the cell recorded it (a cell scored outside the workflow has
no provenance.json). The workflow's step: :func:`provenance_table` (a :class:`ProvenanceJob`).
"""

from __future__ import annotations

import html
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from anyjev.files import write_text_atomic
from anyjev.jobs import Job
from anyjev.rundata import CellLayout, Run, read_layout

Section = tuple[str, list[str], list[list[str]]]  # title, table header, rows (or a preformatted block)


@dataclass(frozen=True)
class ProvenanceJob(Job):
    """What the provenance report is made from (built by ``Settings.provenance_job``): the run's cells, where their
    files and logs are, and the config as run (validated, defaults filled in)."""

    cells: list[tuple[str, str]]
    layout: CellLayout
    config: dict[str, Any]


def scalar(entry: object) -> float | None:
    """A number from a metrics.json entry: a bare number, or an object's ``value``."""
    if isinstance(entry, dict):
        entry = entry.get("value")
    if isinstance(entry, bool) or not isinstance(entry, int | float):
        return None
    return float(entry)


def _short(h: object, n: int = 12) -> str:
    return str(h)[:n] if h else "–"


def _model_source(prov: dict) -> str:
    src = prov.get("model_source") or prov.get("identity", {}).get("model_source") or {}
    if not src:
        return (prov.get("identity", {}).get("model") or {}).get("model", "–")
    where = src.get("repo") or src.get("file") or src.get("source", "?")
    rev = src.get("revision") or src.get("resolved_revision") or src.get("package_version")
    sha = src.get("file_sha256") or src.get("sha256")
    parts = [str(src.get("source", "")), str(where)]
    if rev:
        parts.append(f"@{rev}")
    if sha:
        parts.append(f"sha256 {_short(sha)}")
    return " ".join(p for p in parts if p)


def _temperature(entry: object) -> str:
    """Fitted temperature(s): {"fwd": {"T": ..., "at_bound": ...}, "rev": ...} as metrics.json records them."""
    if entry is None:
        return "–"
    items = entry.items() if isinstance(entry, dict) and "T" not in entry else [("", entry)]
    out = []
    for name, v in items:
        num = scalar(v.get("T") if isinstance(v, dict) else v)
        text = f"{num:.3g}" if num is not None else json.dumps(v)
        if isinstance(v, dict) and v.get("at_bound"):
            text += " (at the fit's bound)"
        out.append(f"{name}: {text}" if name else text)
    return "; ".join(out)


def _tie_rates(metrics: dict) -> str:
    levels = metrics.get("levels") or list(metrics.get("metrics", {}))
    top = metrics.get("tie_rate") or {}
    vals = []
    for lv in levels:
        v = scalar((metrics.get("metrics", {}).get(lv) or {}).get("tie_rate", top.get(lv) if isinstance(top, dict) else None))
        if v is not None:
            vals.append(f"{lv} {v:.3f}")
    return ", ".join(vals) or "–"


def _settings(metrics: dict) -> str:
    s = metrics.get("settings") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items())) or "–"


def provenance_sections(config: dict, run: Run) -> list[Section]:
    """Sections from the config as run and each finished cell of RUN (its provenance.json and metrics.json)."""
    sections: list[Section] = [("Config as run (validated, defaults filled in)", [], [[yaml.safe_dump(config, sort_keys=False)]])]
    prov_rows, eval_rows, argv_rows = [], [], []
    argvs: dict[str, str] = {}
    for cell in run.finished:
        model, task, prov, metrics = cell.model, cell.task, cell.provenance, cell.metrics
        server = prov.get("server") or {}
        git = prov.get("git") or {}
        task_file = prov.get("task_file") or {}
        task_sha = task_file.get("sha256") or metrics.get("identity", {}).get("task_sha256")
        fingerprints = server.get("system_fingerprint") or (prov.get("backend") or {}).get("system_fingerprint") or []
        prov_rows.append([model, task, _model_source(prov),
                          f"{task_file.get('path', '–')} (sha256 {_short(task_sha)})",
                          str(prov.get("vllm_version") or server.get("vllm_version") or "–"),
                          ", ".join(map(str, fingerprints)) or "–",
                          f"{_short(git.get('commit'), 10)}{' (dirty)' if git.get('dirty') else ''}",
                          _short(prov.get("config_sha256")),
                          f"{prov.get('started', '–')} ({prov.get('seconds', '–')} s)"])
        eval_rows.append([model, task, str(metrics.get("n", "–")), str(metrics.get("n_calib", "–")), str(metrics.get("k", "–")),
                          _tie_rates(metrics), _temperature(metrics.get("temperature")), _settings(metrics)])
        if server.get("argv"):
            argvs.setdefault(model, shlex.join(map(str, server["argv"])))
    sections.append(("Cells: what was read and how", ["model", "task", "model source", "task file", "vLLM",
                                                       "system fingerprint", "git", "config sha256", "started"], prov_rows))
    sections.append(("Cells: evaluation", ["model", "task", "n test", "n calib", "K", "tie rate by level",
                                           "fitted temperature (L1)", "settings"], eval_rows))
    for model, argv in argvs.items():
        argv_rows.append([f"{model}:\n{argv}"])
    if argv_rows:
        sections.append(("vLLM server argv (per model)", [], argv_rows))
    return sections


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def sections_markdown(sections: Sequence[Section]) -> str:
    out = ["# Provenance of this run", ""]
    for title, head, rows in sections:
        out += [f"## {title}", ""]
        if head:
            out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        else:
            for (block,) in rows:
                out += ["```", block.rstrip("\n"), "```"]
        out.append("")
    return "\n".join(out)


def sections_html(sections: Sequence[Section]) -> str:
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>Provenance</title><style>",
           "body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse} "
           "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top} "
           "pre{background:#f6f6f6;padding:6px;white-space:pre-wrap}</style></head><body>",
           "<h1>Provenance of this run</h1>"]
    for title, head, rows in sections:
        out.append(f"<h2>{html.escape(title)}</h2>")
        if head:
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows]
            out.append("</table>")
        else:
            out += [f"<pre>{html.escape(block)}</pre>" for (block,) in rows]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def provenance_table(job: ProvenanceJob, md_out: str, html_out: str, *, run: Run | None = None) -> list[Section]:
    """The workflow's provenance report of JOB's run (RUN: the run already read by JOB's layout)."""
    return write_provenance(job.config, run or read_layout(job.layout, job.cells), md_out, html_out)


def write_provenance(config: dict, run: Run, md_out: str, html_out: str | None = None) -> list[Section]:
    """results/tables/provenance.md (and .html for the report) from RUN's finished cells; its failed cells get a
    section of their own."""
    sections = provenance_sections(config, run)
    if run.failures:
        sections.insert(1, (f"Failed cells ({len(run.failures)}): not in the tables until a run completes them",
                            ["model", "task", "error (first line)", "log"],
                            [[m, t, f["error"], f["log"] or "–"] for (m, t), f in run.failures.items()]))
    write_text_atomic(md_out, sections_markdown(sections))
    if html_out:
        write_text_atomic(html_out, sections_html(sections))
    return sections
