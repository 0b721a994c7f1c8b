"""A static, offline item-level viewer of a run: ``results/viewer/index.html`` opens from disk (``file://``),
fetches nothing from a network and needs no server (docs/viewer.md).

Three pages (hash routes of one HTML file) and two data files per cell:

* ``index.html``: the page, its CSS and JavaScript (``viewer_assets/``, this project's own) and the run-level
  data inline: every configured cell with its summary-table numbers per level (from ``metrics.json``, through
  :func:`anyjev.outputs.tables.summary_frame`, as ``summary.csv``), or why it has none (:mod:`anyjev.outputs.cells`);
* ``cells/<model>/<task>.js``: the cell page (every test item's decision at each level from
  ``predictions.csv``, correct / flipped / tied, answer mass, the reliability diagram's bins), loaded with a
  ``<script>`` tag when the cell is opened (browsers refuse ``fetch()`` of ``file://``);
* ``cells/<model>/<task>.items.js``: the item pages (state, question, options; label probabilities by layout
  from ``scores.jsonl``; each level's distribution, the priors divided out and L1's temperature from
  :func:`anyjev.run.evaluate.item_levels`; every layout's exact prompt text and token count, rebuilt with
  the scoring code and checked against the stored prompt hash), loaded when an item of the cell is opened.

The level code is the library's: the generator refuses a cell whose ``predictions.csv`` does not follow from
its ``scores.jsonl`` under its ``metrics.json`` settings.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anyjev.data.taskfile import load_task_file
from anyjev.data.tasks import Task
from anyjev.decision.labels import LabelChecker
from anyjev.decision.layouts import GROUPS
from anyjev.decision.options import PromptOptions
from anyjev.errors import TaskDataError
from anyjev.files import current_umask, write_text_atomic
from anyjev.jobs import Job
from anyjev.numbers.evaluation import EvaluationOptions, ItemLevels
from anyjev.numbers.levels import to_option_space
from anyjev.numbers.metrics import tie_weights
from anyjev.outputs import cells as cellstate
from anyjev.outputs.tables import METRIC_TITLES, TABLE_METRICS, arrow, interval_note, summary_frame
from anyjev.run.evaluate import item_levels
from anyjev.run.inspect import render_prepared
from anyjev.run.prepared import prepare_item
from anyjev.run.store import read_cell

VIEWER_FORMAT = "anyjev.viewer/1"
ASSETS = Path(__file__).with_name("viewer_assets")
CHECK_TOL = 1e-6  # predictions.csv against the library's levels (float noise across machines is ~1e-10)
DIGITS = 5  # significant digits of the probabilities in the data files (3 decimals are shown)


@dataclass(frozen=True)
class ViewerJob(Job):
    """What the viewer is built from (built by ``Settings.viewer_job`` with the rule's paths): the configured cells,
    the levels to show, each model's tokenizer folder, each task's prepared file, and where the cells and logs are."""

    cells: list[tuple[str, str]]
    levels: list[str]
    tokenizers: dict[str, str]
    tasks: dict[str, str]
    layout: cellstate.CellLayout


# -------------------------------------------------------------------------------------------- helpers
def _sig(x: float, digits: int = DIGITS) -> float:
    """A probability rounded to DIGITS significant digits (what the data files hold)."""
    return float(f"{x:.{digits}g}")


def _probs(lp: np.ndarray, k: int) -> list[float]:
    """Option-space log-probs to rounded probabilities of the item's own K options (padding dropped)."""
    return [_sig(p) for p in np.exp(np.asarray(lp, dtype=np.float64)[:k]).tolist()]


def _num(v: object) -> float | None:
    """A float for JSON, None for a missing value (NaN in a pandas frame)."""
    if v is None or isinstance(v, bool):
        return None
    f = float(v)  # type: ignore[arg-type]
    return None if math.isnan(f) else f


class Lines:
    """Prompt texts stored as lists of indices into one table of distinct lines: a cell's prompts share most of
    their lines (the system turn, the question, every option line of every rotation when items share a question),
    so a cell of 300 items x 40 layouts stores each once. ``"\\n".join`` of the lines gives the text back exactly."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str) -> list[int]:
        ids = []
        for line in text.split("\n"):
            if line not in self.index:
                self.index[line] = len(self.rows)
                self.rows.append(line)
            ids.append(self.index[line])
        return ids

    def text(self, ids: list[int]) -> str:
        return "\n".join(self.rows[i] for i in ids)


def js_data(kind: str, key: str, data: dict) -> str:
    """A data file: one call that hands DATA to the page (a ``<script>`` works from ``file://``)."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"anyjevViewer.load({json.dumps(kind)},{json.dumps(key)},{body});\n"


def _safe_json(data: dict) -> str:
    """JSON to sit inside ``<script type="application/json">``: no ``</`` can end the element."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


# ---------------------------------------------------------------------------------------------- cells
@dataclass
class CellFiles:
    """One finished cell as the workflow wrote it."""

    model: str
    task: str
    path: Path
    metrics: dict
    predictions: list[dict]
    identity: dict
    records: list[dict]
    extras: dict[str, dict]
    provenance: dict

    @property
    def key(self) -> str:
        return f"{self.model}/{self.task}"

    @property
    def test(self) -> list[dict]:
        return [r for r in self.records if r.get("split") in (None, "test")]


def read_cell_files(model: str, task: str, layout: cellstate.CellLayout) -> CellFiles:
    """A finished cell's ``metrics.json``, ``predictions.csv``, ``scores.jsonl`` and ``provenance.json``."""
    path = layout.dir(model, task)
    identity, records, extras = read_cell(path / "scores.jsonl")
    with open(path / "predictions.csv", newline="", encoding="utf-8") as fh:
        predictions = list(csv.DictReader(fh))
    prov = path / "provenance.json"
    return CellFiles(model, task, path, json.loads((path / "metrics.json").read_text()), predictions, identity, records,
                     extras, json.loads(prov.read_text()) if prov.is_file() else {})


def evaluation_settings(metrics: dict) -> EvaluationOptions:
    """The evaluation options a ``metrics.json`` was made with (the schema's defaults for keys it lacks)."""
    fields = {f.name for f in dataclasses.fields(EvaluationOptions)}
    return EvaluationOptions(**{k: v for k, v in (metrics.get("settings") or {}).items() if k in fields})


def cell_levels(cell: CellFiles) -> ItemLevels:
    """The cell's levels per test item by the library's level code, under its ``metrics.json`` settings."""
    return item_levels(cell.records, evaluation_settings(cell.metrics), source=str(cell.path / "scores.jsonl"),
                       extras=cell.extras)


def check_predictions(cell: CellFiles, levels: ItemLevels) -> None:
    """Refuse a ``predictions.csv`` that does not follow from the scores under the cell's settings."""
    index = {item: i for i, item in enumerate(levels.ids)}
    where = str(cell.path / "predictions.csv")
    for n, row in enumerate(cell.predictions, start=2):
        i = index.get(row["item_id"])
        lv = levels.levels.get(row["level"], {}).get(row["group"])
        if i is None or lv is None:
            raise TaskDataError(where, f"line {n}", f"item {row['item_id']!r} level {row['level']} {row['group']} is not a "
                                f"test item and level of {cell.path / 'scores.jsonl'}")
        lp = lv[i]
        p = np.exp(lp)
        pred = int(np.argmax(p))
        ours = (pred, float(p[pred]), float(p[int(row["gold"])]), int(tie_weights(lp[None])[0].astype(bool).sum()))
        theirs = (int(row["pred"]), float(row["conf"]), float(row["p_gold"]), int(row["n_top"]))
        if (ours[0], ours[3]) != (theirs[0], theirs[3]) or max(abs(ours[1] - theirs[1]), abs(ours[2] - theirs[2])) > CHECK_TOL:
            raise TaskDataError(where, f"line {n}", f"item {row['item_id']!r} {row['level']} {row['group']}: predictions.csv "
                                f"says (pred, conf, p_gold, n_top) = {theirs}, the scores under the settings of metrics.json "
                                f"give {ours}: predictions.csv was not made from these scores; evaluate the cell again")


def _decision(lv: np.ndarray, i: int, gold: int, rev: np.ndarray | None, row: dict, row_rev: dict | None) -> dict:
    """One item's decision at one level: predictions.csv's fields, and the expected correctness and flip
    under uniform tie-breaking (the metrics' definitions)."""
    w = tie_weights(lv[i][None])[0]
    out = {"p": int(row["pred"]), "c": round(float(row["conf"]), 6), "g": round(float(row["p_gold"]), 6),
           "t": int(row["n_top"]), "ok": round(float(w[gold]), 6)}
    if rev is not None and row_rev is not None:
        out |= {"f": round(float(1.0 - np.sum(w * tie_weights(rev[i][None])[0])), 6), "pr": int(row_rev["pred"]),
                "tr": int(row_rev["n_top"])}
    return out


def option_names(rec: dict) -> list[str]:
    """How the page names an item's options: the label each had in its first layout (fwd/r0), i.e. in the raw
    prompt (A, B, ... for choice questions; Yes / No)."""
    first = rec["layouts"].get("fwd/r0") or next(iter(rec["layouts"].values()))
    names = [""] * int(rec["k"])
    for pos, opt in enumerate(first["order"]):
        names[opt] = rec["labels"][pos]
    return names


def reliability(cell: CellFiles, levels: list[str]) -> dict:
    """Per level, the reliability diagram's bins exactly as results/plots/reliability draws them (forward
    group, equal-mass bins, Wilson intervals) and the table's ECE with its interval."""
    from anyjev.numbers.metrics import reliability_bins
    from anyjev.outputs.plots import reliability_bin_count, wilson_interval

    out = {}
    for level in levels:
        rows = [r for r in cell.predictions if r["level"] == level and r["group"] == "fwd"]
        if not rows:
            continue
        conf = np.array([float(r["conf"]) for r in rows])
        correct = np.array([float(r["pred"] == r["gold"]) for r in rows])
        x, y, size = reliability_bins(conf, correct, reliability_bin_count(len(conf)))
        lo, hi = wilson_interval(np.round(y * size), size)
        ece = cell.metrics["metrics"][level]["ece"]
        out[level] = {"bins": [[round(float(a), 6), round(float(b), 6), int(c), round(float(d), 6), round(float(e), 6)]
                               for a, b, c, d, e in zip(x, y, size, lo, hi, strict=True)],
                      "ece": [ece["value"], ece["lo"], ece["hi"]], "acc": round(float(correct.mean()), 6), "n": len(rows)}
    return out


def cell_page(cell: CellFiles, levels: ItemLevels, shown: list[str]) -> dict:
    """The cell page's data: every test item's decision at each level, answer mass, and the reliability bins."""
    rows: dict[tuple[str, str, str], dict] = {(r["item_id"], r["level"], r["group"]): r for r in cell.predictions}
    present = [lv for lv in shown if lv in levels.levels]
    by_id = {r["id"]: r for r in cell.test}
    items = []
    for i, item_id in enumerate(levels.ids):
        rec = by_id[item_id]
        gold = int(levels.gold[i])
        decisions = {}
        for level in present:
            lv = levels.levels[level]
            decisions[level] = _decision(lv["fwd"], i, gold, lv.get("rev"), rows[(item_id, level, "fwd")],
                                         rows.get((item_id, level, "rev")))
        mass = rec.get("answer_mass")
        items.append({"id": item_id, "gold": gold, "k": int(rec["k"]), "o": option_names(rec), "d": decisions,
                      "m": None if mass is None else round(float(mass), 6)})
    return {"key": cell.key, "model": cell.model, "task": cell.task, "levels": present,
            "groups": [g for g in GROUPS if g in levels.levels[present[0]]], "items": items,
            "reliability": reliability(cell, present)}


# ------------------------------------------------------------------------------------------------ items
def checked_prompts(cell: CellFiles, task: Task, tokenizer) -> dict[str, dict]:
    """Every test item's layouts rendered by the scoring code (as :func:`anyjev.run.inspect.export_scores_with_prompts`
    does), ``{item id: {layout: RenderedPrompt}}``, each checked against the prompt hash stored when it was scored."""
    options = PromptOptions.from_identity(cell.identity)  # the prompts as this cell made them
    checker = LabelChecker(tokenizer)
    index = {it.id: i for i, it in enumerate(task.items)}
    groups = task.prior_groups()
    scores = cell.path / "scores.jsonl"
    out: dict[str, dict] = {}
    for rec in cell.test:
        if rec["id"] not in index:
            raise TaskDataError(str(scores), f"item {rec['id']!r}", f"not in the task file {task.source.get('path', task.name)}")
        i = index[rec["id"]]
        prepared = prepare_item(tokenizer, checker, task.items[i], groups[i], options)
        rendered = {r.layout: r for r in render_prepared(tokenizer, prepared, options)}
        for name, lay in rec["layouts"].items():
            r = rendered.get(name)
            if r is None or r.prompt_sha != lay["prompt_sha"]:
                got = r.prompt_sha if r else "no such layout"
                raise TaskDataError(str(scores), f"item {rec['id']!r}", f"layout {name}: stored prompt hash {lay['prompt_sha']} "
                                    f"but the prompt rebuilt from the task file with this tokenizer hashes to {got}: not the "
                                    f"prompt that was scored; refusing to show it")
        out[rec["id"]] = {name: rendered[name] for name in sorted(rec["layouts"], key=_layout_key)}
    return out


def _layout_key(name: str) -> tuple[int, int]:
    """fwd before rev, then by rotation (fwd/r2 before fwd/r10)."""
    group, _, rot = name.partition("/r")
    return (GROUPS.index(group) if group in GROUPS else len(GROUPS), int(rot) if rot.isdigit() else 0)


def _layout_names(rec: dict, group: str) -> list[str]:
    """A group's layouts in rotation order, including those an adaptive item did not read (from its r0 order)."""
    k = int(rec["k"])
    names = sorted((n for n in rec["layouts"] if n.startswith(group + "/")), key=lambda n: int(n.split("/r")[1]))
    if rec.get("adaptive") and names and len(names) < k and not any(lay.get("swapped") for lay in rec["layouts"].values()):
        names = [f"{group}/r{s}" for s in range(k)]
    return names


def _matrix(rec: dict, group: str, names: list[str]) -> tuple[list, dict]:
    """Label probabilities by layout in option space (rows: layouts, columns: options; None: not read), and the
    layouts' shape: names, orders (position -> option) and phrasing."""
    k = int(rec["k"])
    r0 = rec["layouts"][f"{group}/r0"]["order"]
    rows, orders, swapped = [], [], []
    for s, name in enumerate(names):
        lay = rec["layouts"].get(name)
        order = lay["order"] if lay else [int(o) for o in np.roll(r0, -s)]
        orders.append(order)
        swapped.append(bool(lay and lay.get("swapped")))
        if lay is None:
            rows.append(None)
            continue
        opt = to_option_space(np.array([[lay["lp"]]]), np.array([[order]]))[0, 0]
        rows.append([_sig(p) for p in np.exp(opt[:k]).tolist()])
    return rows, {"layouts": names, "order": orders, "swapped": swapped}


def _prior(prior: np.ndarray | None, k: int) -> list | None:
    return None if prior is None else [[_sig(p) for p in row[:k]] for row in np.asarray(prior).tolist()]


class _Table:
    """Identical values stored once: a batch prior is the same for every item of a prior group, and items of one
    question share their layouts' shape."""

    def __init__(self) -> None:
        self.rows: list = []
        self.index: dict[str, int] = {}

    def add(self, value: object) -> int | None:
        if value is None:
            return None
        key = json.dumps(value)
        if key not in self.index:
            self.index[key] = len(self.rows)
            self.rows.append(value)
        return self.index[key]


def items_page(cell: CellFiles, levels: ItemLevels, task: Task, prompts: dict[str, dict]) -> dict:
    """The item pages' data: texts, probabilities by layout, level distributions, priors, T and prompts."""
    by_task = {it.id: it for it in task.items}
    by_id = {r["id"]: r for r in cell.test}
    priors, shapes = _Table(), _Table()
    lines = Lines()
    items = {}
    for i, item_id in enumerate(levels.ids):
        rec, it = by_id[item_id], by_task[item_id]
        k = int(rec["k"])
        groups = {}
        for g in GROUPS:
            names = _layout_names(rec, g)
            if not names:
                continue
            rows, shape = _matrix(rec, g, names)
            groups[g] = {"rows": rows, "shape": shapes.add(shape), "prior": priors.add(_prior(levels.test_prior[g][i], k)),
                         "l1prior": priors.add(_prior(levels.l1_prior[g][i], k)) if g in levels.l1_prior else None}
        dist = {name: {g: _probs(v[i], k) for g, v in lv.items()} for name, lv in levels.levels.items()}
        texts = [{"layout": name, "n": r.n_tokens, "sha": r.prompt_sha, "l": lines.add(r.text)}
                 for name, r in prompts[item_id].items()]
        items[item_id] = {"state": it.state, "question": it.question.text, "kind": it.question.kind,
                          "options": list(it.question.options), "labels": rec["labels"], "group": rec["group"],
                          "split": rec.get("split"), "groups": groups, "dist": dist, "prompts": texts}
        if rec.get("adaptive"):
            items[item_id]["adaptive"] = rec["adaptive"]
    settings = evaluation_settings(cell.metrics)
    return {"key": cell.key, "strength": settings.prior_strength, "prior_mode": settings.prior_mode,
            "prior_source": levels.prior_source,
            # 6 digits: the fit's last bits differ between BLAS builds, and the page shows 3
            "T": {g: _sig(t, 6) for g, t in levels.temperature.items()}, "priors": priors.rows, "shapes": shapes.rows,
            "lines": lines.rows, "items": items}


# -------------------------------------------------------------------------------------------------- run
def _cell_summary(cell: CellFiles, levels: list[str]) -> dict:
    """The summary table's rows of one cell (the numbers of summary.csv) and its header facts."""
    frame = summary_frame([cell.path / "metrics.json"], levels)
    metrics = {}
    for _, row in frame.iterrows():
        metrics[row["level"]] = {m: [_num(row[m]), _num(row[f"{m}_lo"]), _num(row[f"{m}_hi"])] for m in TABLE_METRICS}
        metrics[row["level"]]["tie_rate"] = _num(row.get("tie_rate"))
    temperature = {g: {"T": fit["T"], "at_bound": bool(fit.get("at_bound"))}
                   for g, fit in (cell.metrics.get("temperature") or {}).items()}
    mass = cell.metrics.get("answer_mass")
    prov = cell.provenance
    settings = cell.metrics.get("settings") or {}
    return {"model": cell.model, "task": cell.task, "key": cell.key, "status": "done", "n": cell.metrics["n"],
            "n_calib": cell.metrics.get("n_calib"), "k": cell.metrics["k"], "levels": list(metrics), "metrics": metrics,
            "temperature": temperature, "answer_mass": [mass["value"], mass["lo"], mass["hi"]] if mass else None,
            "prior": f"{settings.get('prior_mode', 'batch')} ({settings.get('prior_source', 'items')})",
            "interval": interval_note(settings), "finished": prov.get("finished"),
            "prompt_profile": (cell.identity.get("prompt_profile") or {}).get("name"),
            "files": {"cell": f"cells/{cell.model}/{cell.task}.js", "items": f"cells/{cell.model}/{cell.task}.items.js"}}


def run_page(job: ViewerJob, done: dict[tuple[str, str], dict]) -> dict:
    """The run page's data: every configured cell, finished (its summary numbers) or failed (why)."""
    cells = []
    for model, task in job.cells:
        if (model, task) in done:
            cells.append(done[(model, task)])
        else:
            cells.append({"model": model, "task": task, "key": f"{model}/{task}", "status": "failed",
                          **job.layout.failure(model, task)})
    return {"format": VIEWER_FORMAT, "levels": list(job.levels),
            "metrics": [{"key": m, "title": METRIC_TITLES[m], "arrow": arrow(m)} for m in TABLE_METRICS],
            "models": list(dict.fromkeys(m for m, _ in job.cells)), "tasks": list(dict.fromkeys(t for _, t in job.cells)),
            "cells": cells}


def index_html(run: dict) -> str:
    """The page: the template with its CSS, JavaScript and the run's data inline."""
    page = (ASSETS / "index.html").read_text(encoding="utf-8")
    for marker, text in (("/*CSS*/", (ASSETS / "viewer.css").read_text(encoding="utf-8")),
                         ("/*JS*/", (ASSETS / "viewer.js").read_text(encoding="utf-8")),
                         ("/*RUN*/", _safe_json(run))):
        if page.count(marker) != 1:
            raise AssertionError(f"viewer template: marker {marker} must occur once")
        head, tail = page.split(marker)
        page = head + text + tail
    return page


# ---------------------------------------------------------------------------------------------- writing
def _write_cell(cell: CellFiles, job: ViewerJob, out: Path, tokenizer) -> dict:
    levels = cell_levels(cell)
    check_predictions(cell, levels)
    task = load_task_file(job.tasks[cell.task])
    prompts = checked_prompts(cell, task, tokenizer)
    write_text_atomic(out / "cells" / cell.model / f"{cell.task}.js", js_data("cell", cell.key, cell_page(cell, levels, job.levels)))
    write_text_atomic(out / "cells" / cell.model / f"{cell.task}.items.js",
                      js_data("items", cell.key, items_page(cell, levels, task, prompts)))
    return _cell_summary(cell, job.levels)


def write_viewer(job: ViewerJob, out: str | os.PathLike, *, tokenizers: dict | None = None) -> Path:
    """Write the viewer of JOB's run into OUT (replaced as a whole): ``index.html`` and the data of every finished
    cell; returns the path of ``index.html``. TOKENIZERS may hand over loaded tokenizers by model."""
    from anyjev.run.cell import load_tokenizer

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    loaded = dict(tokenizers or {})
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        done = {}
        for model, task in job.layout.finished(job.cells):
            if model not in loaded:
                loaded[model] = load_tokenizer(job.tokenizers[model])
            done[(model, task)] = _write_cell(read_cell_files(model, task, job.layout), job, tmp, loaded[model])
        write_text_atomic(tmp / "index.html", index_html(run_page(job, done)))
        _readable(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out / "index.html"


def _readable(root: Path) -> None:
    """The modes a plain ``mkdir``/``open`` would give under the umask (the temporary folder is created private)."""
    mask = current_umask()
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)

