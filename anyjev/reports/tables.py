"""Tables across cells: the summary (one row per model, task, level) as CSV, Markdown and LaTeX, the
README's excerpt of it, and the comparison with published numbers. Built from a run's frames
(:mod:`anyjev.rundata`), so they can be rebuilt without a server. The workflow's two table steps:
:func:`summary_table` (a :class:`SummaryJob`) and :func:`vs_published` (a :class:`VsPublishedJob`).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from anyjev.decision.layouts import GROUPS
from anyjev.files import write_text_atomic
from anyjev.jobs import Job
from anyjev.numbers.metrics import METRICS
from anyjev.rundata import CellLayout, Run, read_layout
from anyjev.rundata.summary import TABLE_METRICS, read_published, read_summary

METRIC_TITLES = {"acc": "acc", "macro_f1": "macro-F1", "nll": "NLL", "brier": "Brier", "ece": "ECE", "flip": "flip",
                 "cov@5": "cov@5%", "aurc": "AURC"}
# Which way is better: True = higher. cov@5 is the share answerable at <= 5% error; flip is order sensitivity.
HIGHER_IS_BETTER = {"acc": True, "macro_f1": True, "nll": False, "brier": False, "ece": False, "flip": False,
                    "cov@5": True, "aurc": False}
README_METRICS = ("acc", "macro_f1", "nll", "brier", "ece", "flip")
INTERVAL_NOTE = "bootstrap 95% intervals (see metrics.json settings)"  # a table of no finished cell


@dataclass(frozen=True)
class SummaryJob(Job):
    """What the summary table is made from (built by ``Settings.summary_job``): the run's cells, in the config's order,
    where their files and logs are, and the levels it shows."""

    cells: list[tuple[str, str]]
    levels: list[str]
    layout: CellLayout


@dataclass(frozen=True)
class VsPublishedJob(Job):
    """What the comparison with published numbers is made from (built by ``Settings.vs_published_job``): the summary
    table and the table of published numbers (the config's ``published``)."""

    summary: str
    published: str


def interval_note(cell: Mapping | None) -> str:
    """How the cells' intervals were computed and which label prior they used: from a row of a run's cells frame."""
    if cell is None:
        return INTERVAL_NOTE
    return (f"{cell['interval']} bootstrap intervals ({cell['n_boot']} resamples of the {cell['resampled']}); "
            f"label prior: {cell['prior_mode']}")
assert set(TABLE_METRICS) <= set(METRICS) and set(HIGHER_IS_BETTER) == set(TABLE_METRICS)


def arrow(metric: str) -> str:
    """The direction marker shown next to a metric's name: ↑ higher is better, ↓ lower is better."""
    return "↑" if HIGHER_IS_BETTER[metric] else "↓"


def metric_header(metric: str) -> str:
    return f"{METRIC_TITLES[metric]} {arrow(metric)}"


def k_range(k: object) -> tuple[int, int] | None:
    """(smallest, largest) K from metrics.json's ``k``: an int, or a string such as ``"mixed (2-5)"``."""
    if isinstance(k, bool):
        return None
    if isinstance(k, int | float) and not (isinstance(k, float) and math.isnan(k)):
        return int(k), int(k)
    nums = [int(x) for x in re.findall(r"\d+", str(k))]
    return (min(nums), max(nums)) if nums else None


def cell_notes(cell: Mapping, levels: Sequence[str]) -> list[str]:
    """What a reader of a finished cell (its row of the run's cells frame) must know for a table of LEVELS: each note
    of its evaluation about the cell, or about a level the table shows (metrics.json's ``notes``)."""
    return [n["text"] for n in cell.get("notes") or () if n["level"] is None or n["level"] in levels]


def run_notes(run: Run, levels: Sequence[str]) -> list[tuple[str, str, str]]:
    """(model, task, note) for each note of RUN's finished cells for a table of LEVELS (:func:`cell_notes`)."""
    return [(c["model"], c["task"], note) for c in finished_cells(run) for note in cell_notes(c, levels)]


def notes_markdown(rows: Sequence[tuple[str, str, str]]) -> str:
    """ROWS of :func:`run_notes` as a Markdown table; empty without any."""
    if not rows:
        return ""
    return ("\n**Read with these notes** (each cell's metrics.json):\n\n| model | task | note |\n|---|---|---|\n"
            + "".join(f"| {m} | {t} | {_md_escape(note)} |\n" for m, t, note in rows))


def finished_cells(run: Run) -> list[dict]:
    """The run's finished cells as rows of its cells frame, in the run's order."""
    return run.cells[run.cells["status"] == "done"].to_dict("records")


def summary_frame(run: Run, levels: Sequence[str]) -> pd.DataFrame:
    """One row per (model, task, level) of the run's finished cells, for each of LEVELS the cell has: each table
    metric's value and interval, the tie rate, the cell's answer mass, the batch audit's (the cell's audited items, its
    largest log-prob change, the level's audited decisions that change), and on L1's row its fitted temperatures."""
    entries = {(r["model"], r["task"], r["level"], r["metric"]): r for r in run.metrics.to_dict("records")}
    rows = []
    for cell in finished_cells(run):
        key = (cell["model"], cell["task"])
        for level in levels:
            if (*key, level, TABLE_METRICS[0]) not in entries:
                continue
            row = {"model": key[0], "task": key[1], "level": level, "n": cell["n"], "K": cell["K"]}
            for m in TABLE_METRICS:
                e = entries[(*key, level, m)]
                row[m], row[f"{m}_lo"], row[f"{m}_hi"] = e["value"], e.get("lo"), e.get("hi")
            tie = entries.get((*key, level, "tie_rate"))
            if tie is not None and not _missing(tie["value"]):
                row["tie_rate"] = tie["value"]
            if not _missing(cell.get("answer_mass")):  # the cell's answer mass (scoring.answer_mass), on every row
                row["answer_mass"], row["answer_mass_lo"], row["answer_mass_hi"] = (
                    cell["answer_mass"], cell["answer_mass_lo"], cell["answer_mass_hi"])
            if not _missing(cell.get("audit_items")):  # the batch audit: the cell's, and the level's changed decisions
                row |= {"audit_items": cell["audit_items"], "audit_max_abs_logprob_diff": cell["audit_max_abs_logprob_diff"],
                        "audit_changed": cell.get(f"audit_changed_{level}"), "audit_prompts": cell["audit_cost_prompts"],
                        "audit_seconds": cell["audit_cost_seconds"]}
            if level == "L1":  # L1's fitted temperature per layout group, flagged at the search bound
                for group in GROUPS:
                    if not _missing(cell.get(f"T_{group}")):
                        row[f"T_{group}"] = cell[f"T_{group}"]
                        row[f"T_{group}_at_bound"] = bool(cell[f"T_{group}_at_bound"])
            rows.append(row)
    return pd.DataFrame(rows)


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _fmt(v: float, lo: float, hi: float) -> str:
    if _missing(v):
        return "–"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def _markdown(df: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> list[str]:
    head = list(keys) + [metric_header(m) for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in df.iterrows():
        cells = [str(r[k]) for k in keys] + [_fmt(r[m], r[f"{m}_lo"], r[f"{m}_hi"]) for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# A cell that failed, as every cross-cell output lists it: (model, task) -> {"error": first line, "log": path}.
Failures = Mapping[tuple[str, str], Mapping[str, str | None]]


def failed_markdown(failed: Failures) -> str:
    """The failed cells, for a table's reader: the cell, the first line of its error, its log."""
    if not failed:
        return ""
    rows = "".join(f"| {m} | {t} | {_md_escape(f['error'])} | {_log_text(f['log'])} |\n" for (m, t), f in failed.items())
    return (f"\n**{len(failed)} cell(s) failed** and are not in the table above (a later run that completes them makes it "
            "whole):\n\n| model | task | error | log |\n|---|---|---|---|\n" + rows)


def _log_text(log: str | None) -> str:
    return f"`{log}`" if log else "–"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_markdown(df: pd.DataFrame, cell: Mapping | None = None, failed: Failures | None = None, notes: str = "") -> str:
    """summary.md: the table, the NOTES its cells' evaluations made for a reader (:func:`notes_markdown`), how its
    intervals were made (CELL: a row of the run's cells frame), the tie rates, temperatures and answer masses, and the
    FAILED cells."""
    lines = _markdown(df, ["model", "task", "level", "n", "K"], TABLE_METRICS)
    if notes:
        lines.append(notes.rstrip("\n"))
    note = (f"\nValues with their {interval_note(cell)}. ↑: higher is better, ↓: lower is better. "
            "flip: share of items whose answer changes when the option order is reversed (Yes/No: the phrasing "
            "swapped). cov@5%: share of items answerable at <= 5% error, most confident first.\n")
    if "tie_rate" in df.columns and df["tie_rate"].notna().any():
        note += "\n" + tie_rate_markdown(df)
    if "T_fwd" in df.columns and df["T_fwd"].notna().any():
        note += "\n" + temperature_markdown(df)
    if "answer_mass" in df.columns and df["answer_mass"].notna().any():
        cells = df.drop_duplicates(["model", "task"])
        note += ("\nAnswer mass (mean probability on the label tokens at all, before renormalising over them):\n\n"
                 "| model | task | answer mass |\n|---|---|---|\n")
        note += "".join(f"| {r['model']} | {r['task']} | {_fmt(r['answer_mass'], r['answer_mass_lo'], r['answer_mass_hi'])} |\n"
                        for _, r in cells.iterrows())
    if "audit_items" in df.columns and df["audit_items"].notna().any():
        note += "\n" + audit_markdown(df)
    return "\n".join(lines) + "\n" + note + failed_markdown(failed or {})


def audit_changes(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, int]]:
    """The cells whose audited decisions change under another batch: (model, task) -> {level: changed decisions}."""
    changed = df[df["audit_changed"].fillna(0) > 0] if "audit_changed" in df.columns else df.iloc[:0]
    out: dict[tuple[str, str], dict[str, int]] = {}
    for r in changed.itertuples():
        out.setdefault((r.model, r.task), {})[r.level] = int(r.audit_changed)
    return out


def audit_markdown(df: pd.DataFrame) -> str:
    """The batch audit per cell (scoring.audit), and a flag naming each cell whose audited decisions change."""
    cells = df[df["audit_items"].notna()]
    lines = ["Batch audit (scoring.audit; docs/metrics.md): each cell's audited test items read again one prompt per "
             "request, one request in flight, in reverse order, without the prefix cache's blocks:", "",
             "| model | task | items | largest \\|Δ log-prob\\| | audited decisions changed | cost |", "|---|---|---|---|---|---|"]
    for (model, task), d in cells.groupby(["model", "task"], sort=False):
        changed = {r.level: int(r.audit_changed) for r in d.itertuples() if not _missing(r.audit_changed)}
        said = ", ".join(f"{level} {n}" for level, n in changed.items() if n) or "none"
        lines.append(f"| {model} | {task} | {int(d['audit_items'].iloc[0])} | "
                     f"{float(d['audit_max_abs_logprob_diff'].iloc[0]):.2g} | {said} | "
                     f"{int(d['audit_prompts'].iloc[0])} prompts, {float(d['audit_seconds'].iloc[0]):.1f} s |")
    flagged = audit_changes(df)
    if flagged:
        lines += ["", f"**Decisions change under another batch** in {len(flagged)} cell(s): " + "; ".join(
            f"{m}/{t} ({', '.join(f'{lv} {n}' for lv, n in by_level.items())})" for (m, t), by_level in flagged.items())
            + ". These cells' numbers depend on what shared the server's batch (docs/metrics.md, \"The batch audit\")."]
    return "\n".join(lines) + "\n"


def _temperature_text(r: pd.Series, group: str) -> str:
    v = r.get(f"T_{group}")
    if _missing(v):
        return "–"
    return f"{v:.3g}" + (" (at bound)" if bool(r.get(f"T_{group}_at_bound")) else "")


def temperature_markdown(df: pd.DataFrame) -> str:
    """L1's fitted temperature per cell and layout group; a fit at the search bound (log T = ±3) is marked:
    there the L1 probabilities are as flat (or as sharp) as the search allows, not a true optimum."""
    l1 = df[df["level"] == "L1"]
    lines = ["L1 temperature T (fitted on the calibration items; 'at bound': log T hit the search bound ±3):", "",
             "| model | task | T (fwd) | T (rev) |", "|---|---|---|---|"]
    for _, r in l1.iterrows():
        lines.append(f"| {r['model']} | {r['task']} | {_temperature_text(r, 'fwd')} | {_temperature_text(r, 'rev')} |")
    return "\n".join(lines) + "\n"


def tie_rate_markdown(df: pd.DataFrame) -> str:
    """Per-level tie rates (share of items whose top probability is shared), one row per cell."""
    levels = list(dict.fromkeys(df["level"]))
    lines = ["Tie rate (share of items with a tied top label) by level:", "",
             "| model | task | " + " | ".join(levels) + " |", "|---|---|" + "---|" * len(levels)]
    for (model, task), d in df.groupby(["model", "task"], sort=False):
        vals = d.set_index("level")["tie_rate"].reindex(levels)
        lines.append(f"| {model} | {task} | " + " | ".join("–" if _missing(v) else f"{v:.3f}" for v in vals) + " |")
    return "\n".join(lines) + "\n"


def readme_markdown(df: pd.DataFrame) -> str:
    """The README's results table: model (when there are several), task, K, level and the main metrics
    with their intervals. Generated from summary.csv so the README never drifts from the results."""
    keys = (["model"] if df["model"].nunique() > 1 else []) + ["task", "K", "level"]
    lines = _markdown(df, keys, README_METRICS)
    extra = []  # tie rate per level, and L1's temperature (marked at the search bound), where recorded
    if "tie_rate" in df.columns:
        extra.append(("ties", lambda r: "–" if _missing(r.get("tie_rate")) else f"{r['tie_rate']:.2f}"))
    if "T_fwd" in df.columns:
        extra.append(("T (L1)", lambda r: _temperature_text(r, "fwd") if r["level"] == "L1" else ""))
    if "answer_mass" in df.columns:
        extra.append(("answer mass", lambda r: _fmt(r["answer_mass"], r["answer_mass_lo"], r["answer_mass_hi"])
                      if r["level"] == "raw" else ""))
    if extra:
        lines[0] = lines[0] + " " + " | ".join(name for name, _ in extra) + " |"
        lines[1] = lines[1] + "---|" * len(extra)
        for i, (_, r) in enumerate(df.iterrows(), start=2):
            lines[i] = lines[i] + " " + " | ".join(f(r) for _, f in extra) + " |"
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ LaTeX
_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(s: object) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(s))


def _tex_value(v: float, lo: float, hi: float) -> str:
    if _missing(v):
        return "--"
    return f"{v:.3f} {{\\scriptsize [{lo:.3f}, {hi:.3f}]}}"


def summary_latex(df: pd.DataFrame, cell: Mapping | None = None, failed: Failures | None = None,
                  notes: Sequence[tuple[str, str, str]] = ()) -> str:
    """A plain ``tabular`` (no packages beyond LaTeX itself) with the same rows as summary.md, for
    ``\\input`` in a paper; wrap it in ``\\resizebox`` or a ``table*`` where it is too wide. NOTES: (model, task,
    note) that a reader must know, as comments after the table."""
    keys = ["model", "task", "level", "n", "K"]
    tex_arrow = {True: r"$\uparrow$", False: r"$\downarrow$"}
    heads = [tex_escape(k) for k in keys] + [f"{tex_escape(METRIC_TITLES[m])} {tex_arrow[HIGHER_IS_BETTER[m]]}" for m in TABLE_METRICS]
    lines = [f"% anyjev summary: values with their {interval_note(cell)}; generated from summary.csv, do not edit.",
             "\\begin{tabular}{lllrr" + "l" * len(TABLE_METRICS) + "}", "\\hline", " & ".join(heads) + " \\\\", "\\hline"]
    previous = None
    for _, r in df.iterrows():
        cell = (r["model"], r["task"])
        if previous is not None and cell != previous:
            lines.append("\\hline")
        previous = cell
        vals = [tex_escape(r[k]) for k in keys] + [_tex_value(r[m], r[f"{m}_lo"], r[f"{m}_hi"]) for m in TABLE_METRICS]
        lines.append(" & ".join(vals) + " \\\\")
    lines += ["\\hline", "\\end{tabular}"]
    lines += [f"% {tex_escape(m)}/{tex_escape(t)}: {note}" for m, t, note in notes]  # a comment: the note as it is
    if failed:
        cells = ", ".join(f"{tex_escape(m)}/{tex_escape(t)}" for m, t in failed)
        lines.append(f"% {len(failed)} cell(s) failed and are not in this table: {cells}")
    return "\n".join(lines) + "\n"


def summary_table(job: SummaryJob, csv_out: str, md_out: str, tex_out: str, *, run: Run | None = None) -> pd.DataFrame:
    """The workflow's summary table of JOB's run (RUN: the run already read by JOB's layout): its finished cells, its
    failed ones listed beside them."""
    return write_summary(run or read_layout(job.layout, job.cells), job.levels, csv_out, md_out, tex_out)


def write_summary(run: Run, levels: Sequence[str], csv_out: str, md_out: str, tex_out: str | None = None) -> pd.DataFrame:
    """The summary table of RUN's finished cells (CSV, Markdown, LaTeX); its failed cells are listed beside it."""
    df = summary_frame(run, levels)
    cells = finished_cells(run)
    first = cells[0] if cells else None
    notes = run_notes(run, levels)
    write_text_atomic(csv_out, df.to_csv(index=False, float_format="%.6f"))
    write_text_atomic(md_out, summary_markdown(df, first, run.failures, notes_markdown(notes)))
    if tex_out:
        write_text_atomic(tex_out, summary_latex(df, first, run.failures, notes))
    return df


# -------------------------------------------------------------------------------------------- published
def published_overlap(published: pd.DataFrame, cells: Iterable[tuple[str, str]], levels: Sequence[str]) -> pd.DataFrame:
    """The published rows this run can be compared with (known before any job runs: keys only)."""
    keys = {(m, t) for m, t in cells}
    mask = [(p.model, p.task) in keys and p.level in levels and p.metric in TABLE_METRICS for p in published.itertuples()]
    return published[mask]


def vs_published_frame(summary: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Our value with its interval beside the published one, for the cells and metrics both have.

    ``published`` is long-form: model, task, level, metric, value (and source)."""
    rows = []
    index = summary.set_index(["model", "task", "level"])
    for _, p in published.iterrows():
        key = (p["model"], p["task"], p["level"])
        if key not in index.index or p["metric"] not in TABLE_METRICS:
            continue
        ours = index.loc[key]
        v, lo, hi = float(ours[p["metric"]]), float(ours[f"{p['metric']}_lo"]), float(ours[f"{p['metric']}_hi"])
        pub = float(p["value"])
        rows.append({"model": key[0], "task": key[1], "level": key[2], "metric": p["metric"], "ours": v, "lo": lo,
                     "hi": hi, "published": pub, "diff": v - pub, "published_in_interval": bool(lo <= pub <= hi),
                     "source": p.get("source", "")})
    return pd.DataFrame(rows, columns=["model", "task", "level", "metric", "ours", "lo", "hi", "published", "diff",
                                       "published_in_interval", "source"])


def vs_published(job: VsPublishedJob, csv_out: str, md_out: str) -> pd.DataFrame:
    """The workflow's comparison with published numbers: JOB's summary table beside its published table, only the
    cells both have (CSV, and Markdown that says so when there are none)."""
    table = vs_published_frame(read_summary(job.summary), read_published(job.published))
    write_text_atomic(csv_out, table.to_csv(index=False, float_format="%.6f"))
    write_text_atomic(md_out, vs_published_markdown(table))
    return table


NO_OVERLAP = ("No overlap: no (model, task, level, metric) of this run has a published counterpart, so there is "
              "nothing to compare and no comparison figure is made.\n")


def vs_published_markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return NO_OVERLAP
    lines = ["| model | task | level | metric | ours [95% CI] | published | diff | inside CI |", "|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['model']} | {r['task']} | {r['level']} | {metric_header(r['metric'])} | "
                     f"{_fmt(r['ours'], r['lo'], r['hi'])} | {r['published']:.3f} | {r['diff']:+.3f} | "
                     f"{'yes' if r['published_in_interval'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m anyjev.reports.tables readme results/tables/summary.csv``: print the README's table."""
    p = argparse.ArgumentParser(prog="python -m anyjev.reports.tables")
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("readme", help="the README's results table (Markdown) from summary.csv")
    s.add_argument("summary_csv")
    args = p.parse_args(argv)
    sys.stdout.write(readme_markdown(read_summary(args.summary_csv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
