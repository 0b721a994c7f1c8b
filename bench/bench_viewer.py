#!/usr/bin/env python
"""The viewer at the paper's size, in headless Chromium: 9 cells x 300 test items (+ 200 calibration items), K = 20
with 40 layouts per item (banking20- and newsgroups-shaped) and K = 2 Yes/No with 4 (injection-shaped).

The run is built offline in a scratch folder: three task files shaped like the paper's (the states are real Rotten
Tomatoes review snippets, :mod:`anyjev.data.synthetic`; question and options as the hub tasks ask them), every
layout's prompt rendered by the scoring code with the SmolLM2 tokenizer (so the prompt hashes are real), synthetic
label log-probs (gold signal, a position bias, noise), evaluated by ``anyjev evaluate``'s library call (n_boot 1000),
then one cell per task copied under the three models of config/paper.yaml. ``anyjev viewer``'s library call writes
the viewer (timed), and Chromium opens it from disk: the run page's first render (and first contentful paint) in
a fresh page, a cell's load (its data file, parsed and rendered) and an item's load (the cell's item file) after
the run page, a filter and a sort on the opened cell. Each measure is repeated in a fresh browser context; medians,
all in one run, side by side. Sizes on disk per cell come from the files.

    .venv/bin/python bench/bench_viewer.py --out results/bench/viewer.json      # the benchmark (~10 min on 2 cores)
    .venv/bin/python bench/bench_viewer.py --screenshots docs                   # the docs' screenshots of results/viewer
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.jobs import from_data  # noqa: E402
from anyjev.reports.viewer import ViewerJob  # noqa: E402
from anyjev.rundata import CellLayout, read_run  # noqa: E402
from bench.common import machine_of, measured_on, run_record, run_under_limit, write_json  # noqa: E402

CHROMIUM = Path(os.environ.get("ANYJEV_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
MODELS = ("Qwen3-8B", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct-2507")  # config/paper.yaml's grid
TASKS = ("banking20", "newsgroups", "injection")
# 20 intents of banking77 (the hub task keeps the 20 most frequent; their names shape the options)
INTENTS = ("card payment fee charged", "direct debit payment not recognised", "balance not updated after cheque or cash deposit",
           "wrong amount of cash received", "cash withdrawal charge", "transaction charged twice", "declined cash withdrawal",
           "transfer fee charged", "transfer not received by recipient", "balance not updated after bank transfer",
           "request refund", "card payment not recognised", "card payment wrong exchange rate", "extra charge on statement",
           "wrong exchange rate for cash withdrawal", "Refund not showing up", "reverted card payment?", "pending card payment",
           "top up reverted", "cash withdrawal not recognised")
VIEWPORT = {"width": 1400, "height": 900}


# ------------------------------------------------------------------------------------------------ the run
def snippets(n: int, lo: int, hi: int, seed: int) -> list[str]:
    """N texts of LO..HI characters made of consecutive Rotten Tomatoes review snippets."""
    from anyjev.data.synthetic import long_state_task

    return [it.state for it in long_state_task(n, min_chars=lo, max_chars=hi, seed=seed).items]


def build_tasks(n_test: int, n_calib: int) -> dict:
    """The three paper-shaped tasks (split assigned: the first N_TEST items test, the rest calibration)."""
    from anyjev.data.hub import published
    from anyjev.data.tasks import Item, Task
    from anyjev.decision.questions import choice, noul

    n = n_test + n_calib
    rng = np.random.default_rng(0)
    hub = published()  # the published tasks' questions and the newsgroups' readable topic names
    newsgroups = hub["newsgroups"]
    topics = [newsgroups.option_names[name] for name in newsgroups.label_names]
    specs = {"banking20": (choice(hub["banking20"].question, list(INTENTS)), snippets(n, 40, 160, 1)),
             "newsgroups": (choice(newsgroups.question, topics), snippets(n, 600, 2000, 2)),
             "injection": (noul(hub["injection"].question), snippets(n, 80, 600, 3))}
    tasks = {}
    for name, (q, states) in specs.items():
        items = [Item(f"{name}-{i:04d}", s, q, int(rng.integers(q.k)), "test" if i < n_test else "calib")
                 for i, s in enumerate(states)]
        tasks[name] = Task(name, items, prior_group="question", source={"synthetic": "bench_viewer"})
    return tasks


def score_synthetic(task, tokenizer, rng: np.random.Generator) -> list[dict]:
    """Records as the scorer writes them (real prompts and hashes), with synthetic label log-probs: a signal on
    the gold option, a bias toward position A, noise per layout; an answer mass per item."""
    from anyjev.decision.labels import LabelChecker
    from anyjev.decision.options import PromptOptions
    from anyjev.numbers.logprobs import log_softmax
    from anyjev.run.prepared import prepare_item
    from anyjev.run.records import item_record

    checker = LabelChecker(tokenizer)
    groups = task.prior_groups()
    out = []
    for it, group in zip(task.items, groups, strict=True):
        p = prepare_item(tokenizer, checker, it, group, PromptOptions())
        k = len(p.labels)
        z = rng.normal(size=k)
        z[it.gold] += 1.2
        bias = np.zeros(k)
        bias[0] = 0.8
        values = {}
        for layout, _ in p.layouts:
            order = list(layout.order)
            flip = -0.4 if layout.swapped else 0.0
            values[layout.name] = log_softmax(z[order] + bias + flip * (np.arange(k) == 0) + 0.3 * rng.normal(size=k)).tolist()
        out.append(item_record(p, values, float(rng.beta(8, 4))))
    return out


def build_run(root: Path, tokenizer, n_test: int, n_calib: int) -> dict:
    """Task files, one scored and evaluated cell per task, copied under every model; returns the viewer job and
    what building it took."""
    from anyjev.data.taskfile import load_task_file, write_task_file
    from anyjev.files import file_sha256
    from anyjev.run.evaluate import EvaluateJob, evaluate_cell
    from anyjev.run.identity import ScoringOptions, scoring_identity
    from anyjev.run.store import write_scores

    rng = np.random.default_rng(7)
    timing = {}
    tasks = {}
    for name, task in build_tasks(n_test, n_calib).items():
        path = write_task_file(task, root / "resources" / "tasks" / f"{name}.jsonl")
        tasks[name] = str(path)
        t0 = time.perf_counter()
        records = score_synthetic(load_task_file(path), tokenizer, rng)
        identity = {"task": name, "task_sha256": file_sha256(path), "model": {"backend": "synthetic (bench_viewer)"},
                    **scoring_identity(ScoringOptions())}
        first = root / "results" / "cells" / MODELS[0] / name
        write_scores(first / "scores.jsonl", identity, records)
        (first / "provenance.json").write_text(json.dumps({"finished": "synthetic", "cell": {"task": name}}))
        t1 = time.perf_counter()
        evaluate_cell(EvaluateJob(), str(first / "scores.jsonl"), str(first / "metrics.json"), str(first / "predictions.csv"))
        timing[name] = {"score_s": round(t1 - t0, 1), "evaluate_s": round(time.perf_counter() - t1, 1)}
        print(f"[bench_viewer] {name}: {len(records)} records scored in {timing[name]['score_s']} s, "
              f"evaluated in {timing[name]['evaluate_s']} s", flush=True)
        for model in MODELS[1:]:
            shutil.copytree(first, root / "results" / "cells" / model / name)
    job = ViewerJob(cells=[(m, t) for m in MODELS for t in TASKS], levels=["raw", "L0-perm", "L0-bc", "L0", "L1"],
                    tokenizers=dict.fromkeys(MODELS, str(REPO / "resources" / "models" / "smollm2-135m")), tasks=tasks,
                    layout=CellLayout(f"{root}/results/cells/{{model}}/{{task}}", f"{root}/logs/score/{{model}}/{{task}}.log",
                                      f"{root}/logs/evaluate/{{model}}/{{task}}.log"))
    return {"job": json.loads(job.to_json()), "timing": timing}


# ------------------------------------------------------------------------------------------------ browser
def launch(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


# Each timed step ends when the page says it rendered, or fails at once with the page's own message when it shows an
# error ("Cannot show this page": a cell the viewer lacks), or after STEP_LIMIT_MS: no wait is open-ended.
STEP_LIMIT_MS = 60_000
TIMED_HASH = """route => new Promise((done, fail) => {
  const t0 = performance.now();
  const stop = (why) => { observer.disconnect(); clearTimeout(timer); fail(new Error(why)); };
  const observer = new MutationObserver(() => {
    if (document.body.dataset.state === 'error') stop(route + ': ' + document.getElementById('app').innerText);
  });
  const timer = setTimeout(() => stop(route + ': not rendered in LIMIT ms'), LIMIT);
  document.addEventListener('anyjev:rendered', () => {
    observer.disconnect(); clearTimeout(timer);
    requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));
  }, {once: true});
  observer.observe(document.body, {attributes: true, attributeFilter: ['data-state']});
  location.hash = route;
})""".replace("LIMIT", str(STEP_LIMIT_MS))
TIMED_INPUT = """([selector, action]) => new Promise(done => {
  const el = document.querySelector(selector);
  const t0 = performance.now();
  if (action === 'click') el.click(); else { el.checked = !el.checked; el.dispatchEvent(new Event('change', {bubbles: true})); }
  requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));
})"""


def open_run_page(page, index: Path) -> dict:
    """Open INDEX's run page in PAGE (a fresh one): its first render and first contentful paint (ms after navigation
    start). A page that shows an error instead raises naming it; one that shows neither within STEP_LIMIT_MS raises."""
    page.goto(index.as_uri())
    page.wait_for_selector("body[data-state=ready][data-route=run], body[data-state=error]", timeout=STEP_LIMIT_MS)
    if page.get_attribute("body", "data-state") == "error":
        raise RuntimeError(f"{index}: the run page shows an error: {page.inner_text('#app')}")
    page.wait_for_timeout(50)
    first = page.evaluate("""() => ({render: anyjevViewer.renders[0].ms,
        fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime})""")
    return {"run_render_ms": first["render"], "run_fcp_ms": first["fcp"]}


def measure(browser, index: Path, cell: str, item: str, reps: int) -> dict:
    """Medians over REPS fresh contexts: run page render/FCP, then the cell, an item, a filter and a sort."""
    samples: dict[str, list[float]] = {}
    errors: list[str] = []
    away: list[str] = []
    for _ in range(reps):
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        ctx.on("request", lambda r: away.append(r.url) if not r.url.startswith("file://") else None)
        got = open_run_page(page, index) | {
               "cell_load_ms": page.evaluate(TIMED_HASH, f"#/cell/{cell}"),
               "filter_ms": page.evaluate(TIMED_INPUT, ["input[name=wrong]", "toggle"]),
               "rows_after_filter": int(page.inner_text("#count").split()[0]),
               "sort_ms": page.evaluate(TIMED_INPUT, ["#items th[data-sort=L0]", "click"]),
               "item_load_ms": page.evaluate(TIMED_HASH, f"#/item/{cell}/{item}"),
               "next_item_ms": page.evaluate(TIMED_HASH, page.get_attribute("#next", "href"))}
        got["heap_mb"] = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize / 1e6 : null")
        for k, v in got.items():
            if v is not None:
                samples.setdefault(k, []).append(float(v))
        ctx.close()
    out = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    out["console_errors"] = len(errors)
    out["requests_off_disk"] = len(away)
    return out


def sizes(viewer: Path, cells: list[tuple[str, str]]) -> dict:
    """Bytes on disk of the viewer in VIEWER: its index.html, each of CELLS' data files, all of it."""
    per_cell = {}
    for model, task in cells:
        base = viewer / "cells" / model
        per_cell[f"{model}/{task}"] = {"cell_kb": round((base / f"{task}.js").stat().st_size / 1e3, 1),
                                        "items_kb": round((base / f"{task}.items.js").stat().st_size / 1e3, 1)}
    total = sum(p.stat().st_size for p in viewer.rglob("*") if p.is_file())
    return {"index_kb": round((viewer / "index.html").stat().st_size / 1e3, 1), "per_cell": per_cell,
            "total_mb": round(total / 1e6, 2)}


def run_benchmark(args) -> dict:
    from importlib.metadata import version

    from playwright.sync_api import sync_playwright

    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.reports.viewer import write_viewer

    record = run_record()
    tokenizer = load_tokenizer(REPO / "resources" / "models" / "smollm2-135m")
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    saved = root / "built.json"
    try:
        if saved.is_file():  # a run built by an earlier call with the same --workdir (building is not what is measured)
            built = json.loads(saved.read_text())
            print(f"[bench_viewer] reusing the run built in {root}", flush=True)
        else:
            built = build_run(root, tokenizer, args.n_test, args.n_calib)
            saved.write_text(json.dumps(built))
        job = from_data(ViewerJob, built["job"])
        t0 = time.perf_counter()
        index = write_viewer(job, root / "results" / "viewer", tokenizers=dict.fromkeys(MODELS, tokenizer))
        generate_s = time.perf_counter() - t0
        print(f"[bench_viewer] viewer of {len(job.cells)} cells written in {generate_s:.1f} s", flush=True)
        ref = REPO / "results" / "viewer" / "index.html"
        ref_run = read_run(REPO / "results", REPO / "logs")  # the committed run: the cell and item opened in its viewer
        ref_cell = ref_run.finished[0]
        items = ref_run.items
        ref_item = str(items[(items.model == ref_cell.model) & (items.task == ref_cell.task) & (items.split == "test")]
                       .item_id.iloc[0])
        browser_rows = {}
        load_before = round(os.getloadavg()[0], 2)
        with sync_playwright() as p:
            browser = launch(p)
            chromium = browser.version
            for task in TASKS:
                cell = f"{MODELS[0]}/{task}"
                browser_rows[cell] = measure(browser, index, cell, f"{task}-0000", args.reps)
                print(f"[bench_viewer] {cell}: {browser_rows[cell]}", flush=True)
            browser_rows[f"reference: {ref_cell.key}"] = measure(browser, ref, ref_cell.key, ref_item, args.reps)
            browser.close()
        load_after = round(os.getloadavg()[0], 2)
        report = {
            **record,
            "command": " ".join(record["command"]),
            "machine": record["machine"] | {"chromium": chromium, "playwright": version("playwright"),
                                            "load_1min_browser": [load_before, load_after]},
            "grid": {"models": list(MODELS), "tasks": list(TASKS), "n_test": args.n_test, "n_calib": args.n_calib,
                     "layouts": {"banking20": 40, "newsgroups": 40, "injection": 4},
                     "k": {"banking20": 20, "newsgroups": 20, "injection": 2}},
            "build": built["timing"],
            "generate_s": round(generate_s, 1),
            "sizes": sizes(index.parent, job.cells),
            "reference_sizes": sizes(ref.parent, ref_run.order),
            "reps": args.reps,
            "browser": browser_rows,
        }
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return report


# ------------------------------------------------------------------------------------------------ report
def markdown(report: dict) -> str:
    """docs/viewer.md's figures, from the JSON."""
    m, g = machine_of(report), report["grid"]
    cells = [c for c in report["browser"] if not c.startswith("reference")]
    load = m.get("load_1min_browser", [m["loadavg_start"]] * 2)
    lines = [f"Measured ({measured_on(report)}, {m['memory_gb']} GB; a machine shared with other "
             f"work: load {load[0]} to {load[1]} while the browser measured), Chromium {m['chromium']} headless (software "
             f"rendering), Playwright {m['playwright']}; "
             f"{len(g['models'])} x {len(g['tasks'])} cells, {g['n_test']} test items each, medians of {report['reps']} "
             f"fresh browser contexts (`{report['command']}`).", "",
             "| page (opened from disk) | " + " | ".join(c.split("/")[1] for c in cells) + " | reference mmlu |",
             "|---|" + "---:|" * (len(cells) + 1)]
    rows = (("run page: first render (ms after navigation start)", "run_render_ms"),
            ("run page: first contentful paint (ms)", "run_fcp_ms"),
            ("open a cell: load its data, render 300 rows (ms)", "cell_load_ms"),
            ("filter \"wrong at L0\": rows kept", "rows_after_filter"),
            ("filter \"wrong at L0\" (ms, re-rendering the rows kept)", "filter_ms"),
            ("sort them by L0 confidence (ms)", "sort_ms"),
            ("open an item: load the cell's item data, render (ms)", "item_load_ms"),
            ("next item, data loaded (ms)", "next_item_ms"), ("JS heap after these (MB)", "heap_mb"))
    keys = [*cells, next(c for c in report["browser"] if c.startswith("reference"))]
    for title, key in rows:
        lines.append(f"| {title} | " + " | ".join(f"{report['browser'][c].get(key, float('nan')):.0f}" if key != "heap_mb"
                                                  else f"{report['browser'][c].get(key, float('nan')):.1f}" for c in keys) + " |")
    size = report["sizes"]["per_cell"]
    lines += ["", "| size on disk | " + " | ".join(c.split("/")[1] for c in cells) + " |", "|---|" + "---:|" * len(cells)]
    lines.append("| cell data, loaded when the cell opens (kB) | " + " | ".join(f"{size[c]['cell_kb']:.0f}" for c in cells) + " |")
    lines.append("| item data, loaded when an item opens (kB) | " + " | ".join(f"{size[c]['items_kb']:.0f}" for c in cells) + " |")
    errors = sum(r["console_errors"] for r in report["browser"].values())
    off = sum(r["requests_off_disk"] for r in report["browser"].values())
    lines += ["", f"`index.html` (the run page with its data, CSS and JavaScript): {report['sizes']['index_kb']:.0f} kB; the whole "
              f"viewer of {len(g['models']) * len(g['tasks'])} cells: {report['sizes']['total_mb']:.1f} MB; written in "
              f"{report['generate_s']:.0f} s (every prompt rebuilt and checked against its hash). "
              f"The committed reference run's viewer: {report['reference_sizes']['total_mb']:.2f} MB. "
              f"Console errors: {errors}; requests off disk: {off}."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ screenshots
def screenshots(out: Path) -> list[Path]:
    """The run, cell and item pages of the committed reference viewer, as a person sees them."""
    from playwright.sync_api import sync_playwright

    index = REPO / "results" / "viewer" / "index.html"
    shots = [("viewer-run.png", "", {"width": 1400, "height": 900}, False),
             ("viewer-cell.png", "#/cell/smollm2-135m/mmlu?wrong=L0", {"width": 1400, "height": 1000}, False),
             ("viewer-item.png", "#/item/smollm2-135m/socialiqa/socialiqa-0791", {"width": 1400, "height": 1350}, False)]
    written = []
    with sync_playwright() as p:
        browser = launch(p)
        for name, route, viewport, full in shots:
            page = browser.new_page(viewport=viewport)
            page.goto(index.as_uri() + route)
            page.wait_for_selector("body[data-state=ready]")
            path = out / name
            page.screenshot(path=str(path), full_page=full)
            written.append(path)
            page.close()
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/bench/viewer.json", help="the benchmark's JSON")
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--n-calib", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7, help="fresh browser contexts per measure (medians)")
    ap.add_argument("--workdir", help="build the run here and keep it; a later call with it measures again without rebuilding")
    ap.add_argument("--screenshots", metavar="DIR", help="only write the screenshots of results/viewer into DIR")
    args = ap.parse_args(argv)
    if args.screenshots:
        for path in screenshots(Path(args.screenshots)):
            print(path)
        return 0
    report = run_benchmark(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(args.out), report)
    print(markdown(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=3600))
