"""Tables across cells: the summary (one row per model, task, level) and the comparison with published
numbers. Built from the per-cell metrics files, so they can be rebuilt without a server."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from anyjev.numbers.metrics import METRICS

TABLE_METRICS = ("acc", "macro_f1", "nll", "brier", "ece", "flip", "cov@5", "aurc")
METRIC_TITLES = {"acc": "acc", "macro_f1": "macro-F1", "nll": "NLL", "brier": "Brier", "ece": "ECE", "flip": "flip",
                 "cov@5": "cov@5%", "aurc": "AURC"}


def cell_of(path: str | os.PathLike) -> tuple[str, str]:
    """(model, task) from ``results/cells/{model}/{task}/metrics.json``."""
    p = Path(path)
    return p.parent.parent.name, p.parent.name


def summary_frame(metrics_files: Sequence[str | os.PathLike], levels: Sequence[str]) -> pd.DataFrame:
    rows = []
    for path in metrics_files:
        model, task = cell_of(path)
        data = json.loads(Path(path).read_text())
        for level in levels:
            if level not in data["metrics"]:
                continue
            row = {"model": model, "task": task, "level": level, "n": data["n"], "K": data["k"]}
            for m in TABLE_METRICS:
                v = data["metrics"][level][m]
                row[m], row[f"{m}_lo"], row[f"{m}_hi"] = v["value"], v["lo"], v["hi"]
            rows.append(row)
    assert set(TABLE_METRICS) <= set(METRICS)
    return pd.DataFrame(rows)


def _fmt(v: float, lo: float, hi: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def summary_markdown(df: pd.DataFrame) -> str:
    head = ["model", "task", "level", "n", "K"] + [METRIC_TITLES[m] for m in TABLE_METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in df.iterrows():
        cells = [r["model"], r["task"], r["level"], str(r["n"]), str(r["K"])]
        cells += [_fmt(r[m], r[f"{m}_lo"], r[f"{m}_hi"]) for m in TABLE_METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\nValues with their seeded bootstrap 95% interval (1,000+ resamples over test items). flip: share of "
            "items whose answer changes when the option order is reversed (Yes/No: the phrasing swapped).\n")
    return "\n".join(lines) + "\n" + note


def write_summary(metrics_files: Sequence[str], levels: Sequence[str], csv_out: str, md_out: str) -> pd.DataFrame:
    df = summary_frame(metrics_files, levels)
    Path(csv_out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv_out, index=False, float_format="%.6f")
    Path(md_out).write_text(summary_markdown(df))
    return df


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


def vs_published_markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return "No cell of this run has a published counterpart.\n"
    lines = ["| model | task | level | metric | ours [95% CI] | published | diff | inside CI |", "|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['model']} | {r['task']} | {r['level']} | {METRIC_TITLES[r['metric']]} | "
                     f"{_fmt(r['ours'], r['lo'], r['hi'])} | {r['published']:.3f} | {r['diff']:+.3f} | "
                     f"{'yes' if r['published_in_interval'] else 'no'} |")
    return "\n".join(lines) + "\n"
