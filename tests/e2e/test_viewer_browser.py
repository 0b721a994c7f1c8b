"""The viewer in a real browser: Debian's headless Chromium driven by Playwright, the page opened from disk
(file://), on the committed reference run (results/viewer) and on a run with a failed cell built from real cells.

What a person sees is read from the DOM and compared with the files the workflow wrote: the run page's numbers
with metrics.json, every cell row with predictions.csv and scores.jsonl, an item's probabilities by rotation with
scores.jsonl, its prompts with `anyjev export-prompts`' text and token counts; filters and sorting change the
rows as they should; no request leaves file:// and the console shows no error. Without Chromium or Playwright
the tests skip, except under ANYJEV_REQUIRE_BROWSER=1 (set by .ci/run), where that is a failure."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from anyjev.rundata.summary import TABLE_METRICS
from tests.conftest import require
from tests.viewer_helpers import FAILED_ERROR, MODEL, RESULTS, TASKS, failed_run, reference_tasks, run_data

CHROMIUM = Path(os.environ.get("ANYJEV_CHROMIUM", "/usr/bin/chromium"))
# Headless, and nothing that would reach out to Google's services (Chromium tries, and is refused, otherwise).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
REFERENCE = RESULTS / "viewer" / "index.html"


def require_browser() -> None:
    problems = []
    if not CHROMIUM.is_file():
        problems.append(f"{CHROMIUM} is missing (Debian: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("playwright is missing (pip install -r requirements/client.txt)")
    require("browser", not problems, "; ".join(problems))


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


class View:
    """A page with everything it requested and every console error it showed."""

    def __init__(self, browser) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.problems: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

    def open(self, index: Path, route: str = "", want: str | None = None) -> None:
        """Load INDEX from disk at ROUTE and wait until the page says it is ready."""
        self.page.goto("about:blank")
        self.page.goto(index.as_uri() + route)
        self.wait(want)

    def wait(self, route: str | None = None) -> None:
        sel = "body[data-state=ready]" + (f"[data-route={route}]" if route else "")
        self.page.wait_for_selector(f"{sel}, body[data-state=error]")
        assert self.page.get_attribute("body", "data-state") == "ready", self.page.inner_text("#app")

    def all(self, selector: str, script: str) -> list:
        return self.page.eval_on_selector_all(selector, script)

    def clean(self) -> None:
        """Nothing was requested but files from disk, and nothing went wrong in the console."""
        away = [u for u in self.requests if not u.startswith("file://") and u != "about:blank"]
        assert not away, f"requests that left file://: {away}"
        assert not self.problems, self.problems


@pytest.fixture
def view(browser):
    v = View(browser)
    yield v
    v.context.close()


# ---------------------------------------------------------------------------------------- the files
def read_cell(cell_dir: Path) -> dict:
    """What the workflow wrote for a cell, read here without the viewer's code."""
    lines = [json.loads(line) for line in (cell_dir / "scores.jsonl").read_text().splitlines() if line.strip()]
    test = [r for r in lines[1:] if r.get("type") == "item" and r.get("split") in (None, "test")]
    with open(cell_dir / "predictions.csv", newline="") as fh:
        preds = {(r["item_id"], r["level"], r["group"]): r for r in csv.DictReader(fh)}
    return {"metrics": json.loads((cell_dir / "metrics.json").read_text()), "test": test, "preds": preds}


def names(rec: dict) -> list[str]:
    """An option's name on the page: the label it had in the raw prompt (fwd/r0)."""
    order = rec["layouts"]["fwd/r0"]["order"]
    return [rec["labels"][order.index(j)] for j in range(int(rec["k"]))]


def f3(v: float) -> str:
    return f"{v:.3f}"


def held3(v: float) -> str:
    """How the page shows a probability of predictions.csv: the 6 decimals its data holds, to 3 (0.3954998 is held
    as 0.395500 and shown as 0.396, not 0.395)."""
    return f3(round(v, 6))


SUMMARY_JS = """rows => rows.map(r => ({cell: r.dataset.cell, level: r.dataset.level, m: Object.fromEntries(
  [...r.querySelectorAll('td[data-metric]')].map(td => [td.dataset.metric, [
    (td.querySelector('.v') || td).textContent, td.querySelector('.ci') ? td.querySelector('.ci').textContent : null]])),
  t: [...r.querySelectorAll('td[data-metric=T] .t')].map(s => s.textContent)}))"""
CARD_JS = """rows => rows.map(r => ({cell: r.closest('.card').dataset.cell, level: r.dataset.level, m: Object.fromEntries(
  [...r.querySelectorAll('td[data-metric]')].map(td => [td.dataset.metric, td.textContent]))}))"""
ROWS_JS = """rows => rows.filter(r => r.dataset.id).map(r => ({id: r.dataset.id, gold: r.querySelector('.gold').textContent,
  mass: r.querySelector('.mass').textContent, d: Object.fromEntries([...r.querySelectorAll('td.dec')].map(td => [td.dataset.level, {
    pred: td.querySelector('.pred').textContent, conf: td.querySelector('.conf').textContent,
    ok: td.querySelector('.ok').textContent, flip: td.querySelector('.fl') ? td.querySelector('.fl').textContent : '',
    tie: td.querySelector('.tie') ? td.querySelector('.tie').textContent : ''}]))}))"""
CELLS_JS = """rows => rows.map(r => ({head: r.querySelector('th').textContent,
  top: [...r.querySelectorAll('td.v')].findIndex(td => td.classList.contains('top')),
  v: [...r.querySelectorAll('td.v')].map(td => td.firstChild.textContent),
  pos: [...r.querySelectorAll('td.v')].map(td => td.querySelector('sub') ? td.querySelector('sub').textContent : null),
  layout: r.dataset.layout || null, level: r.dataset.level || null, group: r.dataset.group || null,
  decision: r.querySelector('td.pred') ? r.querySelector('td.pred').textContent : null}))"""


def check_run_numbers(v: View, results: Path, cells: list[str]) -> None:
    """The run page's summary table and cards show each cell's metrics.json."""
    rows = v.all("#summary tbody tr", SUMMARY_JS)
    cards = {(r["cell"], r["level"]): r["m"] for r in v.all(".card tr[data-level]", CARD_JS)}
    seen = []
    for row in rows:
        m = json.loads((results / "cells" / row["cell"] / "metrics.json").read_text())
        lv = m["metrics"][row["level"]]
        seen.append(row["cell"])
        for metric in TABLE_METRICS:
            assert row["m"][metric] == [f3(lv[metric]["value"]), f"[{f3(lv[metric]['lo'])}, {f3(lv[metric]['hi'])}]"], (row, metric)
        assert row["m"]["tie_rate"][0] == f"{lv['tie_rate']['value']:.2f}"
        if row["level"] == "L1":
            assert row["t"] == [f"{g} {t['T']:.3g}" + (" (at bound)" if t["at_bound"] else "") for g, t in m["temperature"].items()]
        if row["level"] == m["levels"][0]:
            mass = m["answer_mass"]
            assert row["m"]["answer_mass"] == [f3(mass["value"]), f"[{f3(mass['lo'])}, {f3(mass['hi'])}]"]
        card = cards[(row["cell"], row["level"])]
        assert card == {k: f3(lv[k]["value"]) for k in ("acc", "nll", "ece", "flip")}
    assert sorted(set(seen)) == sorted(cells)
    assert len(rows) == sum(len(json.loads((results / "cells" / c / "metrics.json").read_text())["levels"]) for c in cells)


def cell_rows(v: View) -> list[dict]:
    return v.all("#items tbody tr", ROWS_JS)


def shown_ids(v: View) -> list[str]:
    return [r["id"] for r in cell_rows(v)]


def count_text(v: View) -> str:
    return v.page.inner_text("#count")


# ---------------------------------------------------------------------------------------- reference run
def test_the_run_page_shows_every_cells_summary_numbers(view) -> None:
    view.open(REFERENCE, want="run")
    check_run_numbers(view, RESULTS, [f"{MODEL}/{t}" for t in TASKS])
    assert view.page.inner_text("h1") == "Run: 3 cells"
    # the run page holds the run's data only: no cell data file was loaded
    assert [u for u in view.requests if u.startswith("file://")] == [REFERENCE.as_uri()]
    view.clean()


@pytest.mark.parametrize("task", TASKS)
def test_a_cell_page_shows_every_item_as_the_files_say(view, task) -> None:
    files = read_cell(RESULTS / "cells" / MODEL / task)
    view.open(REFERENCE, f"#/cell/{MODEL}/{task}", want="cell")
    rows = cell_rows(view)
    levels = files["metrics"]["levels"]
    assert [r["id"] for r in rows] == [rec["id"] for rec in files["test"]]
    assert count_text(view) == f"{len(rows)} of {len(rows)} items"
    correct = dict.fromkeys(levels, 0)
    for row, rec in zip(rows, files["test"], strict=True):
        opt = names(rec)
        assert row["gold"] == opt[rec["gold"]]
        assert row["mass"] == f3(rec["answer_mass"])
        assert list(row["d"]) == levels
        for level in levels:
            p = files["preds"][(rec["id"], level, "fwd")]
            rev = files["preds"][(rec["id"], level, "rev")]
            assert int(p["n_top"]) == 1 and int(rev["n_top"]) == 1  # the reference run has no tie (README)
            shown = row["d"][level]
            assert shown["pred"] == opt[int(p["pred"])] and shown["conf"] == held3(float(p["conf"])), (rec["id"], level)
            assert shown["ok"] == ("✓" if p["pred"] == p["gold"] else "✗")
            assert shown["flip"] == ("⇄" if p["pred"] != rev["pred"] else "")
            assert shown["tie"] == ""
            correct[level] += shown["ok"] == "✓"
    for level in levels:  # what a person counts on the page is the table's accuracy
        assert correct[level] / len(rows) == pytest.approx(files["metrics"]["metrics"][level]["acc"]["value"], abs=1e-12)
    assert [s.get_attribute("data-level") for s in view.page.query_selector_all(".rel svg")] == levels
    assert f"ECE {f3(files['metrics']['metrics']['L0']['ece']['value'])}" in view.page.text_content(".rel svg[data-level=L0]")
    view.clean()


def test_filters_and_sorting_change_the_rows_as_they_should(view) -> None:
    files = read_cell(RESULTS / "cells" / MODEL / "mmlu")
    view.open(REFERENCE, f"#/cell/{MODEL}/mmlu", want="cell")
    test, preds = files["test"], files["preds"]

    def pred(item, level, group="fwd"):
        return preds[(item["id"], level, group)]

    def ids(keep):
        return [r["id"] for r in test if keep(r)]

    page = view.page
    page.check("input[name=wrong]")
    wrong_l0 = ids(lambda r: pred(r, "L0")["pred"] != pred(r, "L0")["gold"])
    assert shown_ids(view) == wrong_l0 and count_text(view) == f"{len(wrong_l0)} of 100 items"
    page.select_option("select[name=wrongLevel]", "raw")
    assert shown_ids(view) == ids(lambda r: pred(r, "raw")["pred"] != pred(r, "raw")["gold"])
    page.uncheck("input[name=wrong]")
    assert len(shown_ids(view)) == 100

    def flips(r, level):
        return pred(r, level)["pred"] != pred(r, level, "rev")["pred"]

    page.check("input[name=flip]")  # by default: flipped at raw but not at L0
    flipped = ids(lambda r: flips(r, "raw") and not flips(r, "L0"))
    assert 0 < len(flipped) < 100 and shown_ids(view) == flipped
    page.select_option("select[name=flipAt]", "L0")  # the user picks the levels compared
    page.select_option("select[name=flipNot]", "raw")
    flipped = ids(lambda r: flips(r, "L0") and not flips(r, "raw"))
    assert 0 < len(flipped) < 100 and shown_ids(view) == flipped
    assert "flip=L0&stable=raw" in page.url
    page.select_option("select[name=flipNot]", "")
    assert shown_ids(view) == ids(lambda r: flips(r, "L0"))
    page.uncheck("input[name=flip]")

    page.check("input[name=tied]")
    assert shown_ids(view) == [] and "No item matches these filters." in page.inner_text("#items tbody")
    page.uncheck("input[name=tied]")

    page.fill("input[name=mass]", "0.6")
    page.check("input[name=massOn]")
    low = ids(lambda r: r["answer_mass"] < 0.6)
    assert 0 < len(low) < 100 and shown_ids(view) == low
    page.uncheck("input[name=massOn]")

    page.fill("input[name=cmin]", "0.3")
    confident = ids(lambda r: float(pred(r, "L0")["conf"]) >= 0.3)
    assert all(abs(float(pred(r, "L0")["conf"]) - 0.3) > 1e-5 for r in test)
    assert 0 < len(confident) < 100 and shown_ids(view) == confident
    page.select_option("select[name=clevel]", "raw")
    page.fill("input[name=cmax]", "0.4")
    band = ids(lambda r: 0.3 <= float(pred(r, "raw")["conf"]) <= 0.4)
    assert shown_ids(view) == band
    page.check("input[name=wrong]")
    page.select_option("select[name=wrongLevel]", "L0")
    both = [i for i in band if i in wrong_l0]
    assert shown_ids(view) == both

    # the filters live in the address: a reload shows the same rows
    page.reload()
    view.wait("cell")
    assert shown_ids(view) == both
    page.click("#reset")
    view.wait("cell")
    assert len(shown_ids(view)) == 100

    page.click("#items th[data-sort=L0]")
    confs = [float(r["d"]["L0"]["conf"]) for r in cell_rows(view)]
    assert confs == sorted(confs) and sorted(shown_ids(view)) == sorted(r["id"] for r in test)
    page.click("#items th[data-sort=L0]")
    assert [float(r["d"]["L0"]["conf"]) for r in cell_rows(view)] == sorted(confs, reverse=True)
    page.click("#items th[data-sort=mass]")
    masses = [float(r["mass"]) for r in cell_rows(view)]
    assert masses == sorted(masses)
    view.clean()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, str]:
    return reference_tasks(tmp_path_factory.mktemp("tasks"))


@pytest.fixture(scope="module")
def exported(tasks, smollm2_tokenizer, tmp_path_factory) -> dict[str, dict]:
    """Every reference cell's scores with their prompt text, as `anyjev export-prompts` writes them."""
    from anyjev.run.inspect import export_scores_with_prompts

    out = {}
    for task in TASKS:
        path = export_scores_with_prompts(RESULTS / "cells" / MODEL / task / "scores.jsonl", tasks[task], smollm2_tokenizer,
                                          out=tmp_path_factory.mktemp("export") / f"{task}.jsonl")
        out[task] = {r["id"]: r for r in map(json.loads, path.read_text().splitlines()[1:])}
    return out


@pytest.mark.parametrize("task", TASKS)
def test_an_item_page_shows_its_scores_priors_levels_and_prompts(view, task, tasks, exported) -> None:
    from anyjev.data.taskfile import load_task_file
    from anyjev.numbers.priors import batch_prior

    files = read_cell(RESULTS / "cells" / MODEL / task)
    metrics = files["metrics"]
    items = {it.id: it for it in load_task_file(tasks[task]).items}
    for i in (0, len(files["test"]) - 1):
        rec = files["test"][i]
        opt = names(rec)
        view.open(REFERENCE, f"#/item/{MODEL}/{task}/{rec['id']}", want="item")
        page = view.page
        assert page.inner_text(".goldname") == opt[rec["gold"]]
        assert page.inner_text(".itemmass") == f3(rec["answer_mass"])
        it = items[rec["id"]]
        assert page.inner_text(".state") == (it.state or "(empty)")
        # the prior group as a person reads it: these tasks pool their whole task (or share one question)
        assert page.inner_text(".prior-group") == task and rec["group"] in page.get_attribute(".prior-group", "title")
        assert page.eval_on_selector_all("ol.options li", "ls => ls.map(l => l.textContent)") == [
            (opt[j] if opt[j] != o else "") + o + ("gold" if j == rec["gold"] else "") for j, o in enumerate(it.question.options)]
        noul = it.question.kind == "noul"  # Yes/No: the label is the option, a phrasing does not move it
        for g in ("fwd", "rev"):
            rows = view.all(f"table.matrix[data-group={g}] tr[data-layout]", CELLS_JS)
            layouts = sorted((n for n in rec["layouts"] if n.startswith(g)), key=lambda n: int(n.split("/r")[1]))
            assert [r["layout"] for r in rows] == layouts
            for row in rows:
                lay = rec["layouts"][row["layout"]]
                probs = np.exp(np.array(lay["lp"]))
                want = [probs[lay["order"].index(j)] for j in range(len(opt))]
                assert all(abs(float(s) - w) <= 5e-4 + 1e-5 for s, w in zip(row["v"], want, strict=True)), (row, want)
                assert row["pos"] == ([None] * len(opt) if noul else [rec["labels"][lay["order"].index(j)] for j in range(len(opt))])
                assert row["top"] == int(np.argmax(want))
            # the prior L0 divided out: the batch prior of the test items (the library's primitive, per rotation)
            lp = np.array([[r["layouts"][n]["lp"] for n in layouts] for r in files["test"]])
            prior = batch_prior(lp, [r["group"] for r in files["test"]], prior_min_items=metrics["settings"]["prior_min_items"])[i]
            shown = view.all(f"table.prior[data-group={g}]", "ts => ts.map(t => [...t.querySelectorAll('tbody tr')].map("
                             "r => [...r.querySelectorAll('td.v')].map(td => td.textContent)))")[0]
            assert np.allclose(np.array(shown, dtype=float), prior, atol=5e-4 + 1e-5)
            t = metrics["temperature"][g]["T"]
            assert page.inner_text(f".temp[data-group={g}]") == f"{t:.3g}"
        decide = view.all("#decide tbody tr", CELLS_JS)
        assert [(r["level"], r["group"]) for r in decide] == [(lv, g) for lv in metrics["levels"] for g in ("fwd", "rev")]
        for row in decide:
            p = files["preds"][(rec["id"], row["level"], row["group"])]
            assert row["decision"] == opt[int(p["pred"])] and row["top"] == int(p["pred"])
            assert row["v"][int(p["pred"])] == held3(float(p["conf"])) and row["v"][rec["gold"]] == held3(float(p["p_gold"]))
        prompts = view.all("details.prompt", "ds => ds.map(d => [d.dataset.layout, d.querySelector('.ntok').textContent, "
                           "d.querySelector('pre').textContent])")
        want = exported[task][rec["id"]]["layouts"]
        assert [p[0] for p in prompts] == list(want)
        for layout, ntok, text in prompts:
            assert (int(ntok), text) == (want[layout]["n_tokens"], want[layout]["text"]), layout
    view.clean()


def test_the_page_fetches_a_cells_data_only_when_it_is_opened(view) -> None:
    view.open(REFERENCE, want="run")
    base = REFERENCE.parent.as_uri()
    view.page.click(f".card[data-cell='{MODEL}/socialiqa'] h3 a")
    view.wait("cell")
    assert view.requests[-1] == f"{base}/cells/{MODEL}/socialiqa.js"
    first = view.page.query_selector("#items tbody tr a")
    item = first.inner_text()
    first.click()
    view.wait("item")
    assert view.requests[-1] == f"{base}/cells/{MODEL}/socialiqa.items.js"
    view.page.click("#next")
    view.wait("item")
    assert view.page.inner_text("h1") != item
    assert len([u for u in view.requests if u.endswith(".items.js")]) == 1  # loaded once per cell
    view.page.go_back()
    view.wait("item")
    assert view.page.inner_text("h1") == item
    view.clean()


# ---------------------------------------------------------------------------------------- a failed cell
@pytest.fixture(scope="module")
def failed(tasks, smollm2_tokenizer, tmp_path_factory) -> dict:
    from anyjev.reports.viewer import write_viewer

    root = tmp_path_factory.mktemp("failed-run")
    job = failed_run(root, tasks)
    index = write_viewer(job, root / "results" / "viewer", tokenizers={MODEL: smollm2_tokenizer})
    return {"index": index, "results": root / "results", "log": Path(job.layout.score_log.format(model=MODEL, task="mmlu"))}


def test_a_run_with_a_failed_cell_shows_it_and_the_cells_that_finished(view, failed) -> None:
    view.open(failed["index"], want="run")
    page = view.page
    assert page.inner_text("h1") == "Run: 4 cells, 2 failed"
    card = f".card.failed[data-cell='{MODEL}/mmlu']"
    assert page.inner_text(f"{card} .status") == "failed"
    assert page.inner_text(f"{card} .error") == FAILED_ERROR
    assert page.inner_text(f"{card} .log") == str(failed["log"])
    assert "has not run" in page.inner_text(".card.failed[data-cell='never-ran/mmlu'] .error")
    check_run_numbers(view, failed["results"], [f"{MODEL}/socialiqa", f"{MODEL}/rotten_tomatoes"])
    page.click(f".card[data-cell='{MODEL}/rotten_tomatoes'] h3 a")
    view.wait("cell")
    assert len(shown_ids(view)) == 100
    view.open(failed["index"], f"#/cell/{MODEL}/mmlu", want="cell")
    assert FAILED_ERROR in page.inner_text(".error-box")
    assert not any("mmlu" in Path(u).name for u in view.requests if "/cells/" in u)
    view.clean()


def reference_page_with(run: dict, out: Path) -> Path:
    """The reference run's page with RUN as its run data, written to OUT."""
    from anyjev.reports.viewer.encoding import safe_json

    page_html = REFERENCE.read_text(encoding="utf-8")
    marker = '<script type="application/json" id="anyjev-run">'
    start = page_html.index(marker) + len(marker)
    out.write_text(page_html[:start] + safe_json(run) + page_html[page_html.index("</script>", start):], encoding="utf-8")
    return out


def test_a_large_run_page_is_compact_and_builds_its_summary_table_when_opened(view, tmp_path) -> None:
    """Beyond 30 cells the run page is compact: one legend for the cards instead of a header in each, and the summary
    table built when the reader opens it (its rows are most of the page's elements, and memory); opened, it holds every
    cell's rows, each with the cell's own numbers."""
    run = run_data(REFERENCE)
    models = [f"m{i:02d}" for i in range(11)]  # 11 models x 3 tasks = 33 cells, each a copy of a reference cell
    run["cells"] = [dict(c, model=m, key=f"{m}/{c['task']}") for m in models for c in run["cells"]]
    run["models"] = models
    big = reference_page_with(run, tmp_path / "index.html")

    view.open(REFERENCE, want="run")
    reference = {(r["cell"].split("/")[1], r["level"]): r["m"] for r in view.all("#summary tbody tr", SUMMARY_JS)}
    assert len(view.page.query_selector_all(".card thead")) == 3  # a small run: a header in each card
    view.open(big, want="run")
    assert view.page.inner_text("h1") == "Run: 33 cells"
    assert view.page.query_selector("#summary") is None
    assert view.page.query_selector(".card thead") is None  # one legend for every card instead
    assert "Each card lists, per level: acc ↑, NLL ↓, ECE ↓, flip ↓." in view.page.inner_text("#app")
    assert view.page.inner_text("#summary-details summary") == f"Show the table: {len(reference) * 11} rows"
    view.page.click("#summary-details summary")
    view.page.wait_for_selector("#summary tbody tr")  # the table is built on the details' toggle event, after the click
    rows = view.all("#summary tbody tr", SUMMARY_JS)
    assert {(r["cell"], r["level"]): r["m"] for r in rows} == {
        (f"{m}/{task}", level): numbers for m in models for (task, level), numbers in reference.items()}
    view.clean()


def test_a_cells_notes_are_on_its_card_above_the_summary_and_on_its_page(view, tmp_path) -> None:
    """What a cell's evaluation noted for its reader (here: L1 refused) is shown on its card, in the run page's notes
    above the summary table and on the cell's page; the cells without notes show none."""
    import shutil

    note = "no L1: 5 calibration items, fewer than evaluation.min_calib_items = 8"
    key = f"{MODEL}/rotten_tomatoes"
    run = run_data(REFERENCE)
    run["cells"] = [dict(c, notes=[note] if c["key"] == key else []) for c in run["cells"]]
    folder = tmp_path / "viewer"
    shutil.copytree(REFERENCE.parent, folder)
    index = reference_page_with(run, folder / "index.html")

    view.open(index, want="run")
    assert view.all(".card .note", "els => els.map(e => [e.closest('.card').dataset.cell, e.textContent])") == [[key, note]]
    assert " ".join(view.page.inner_text(f"#notes [data-cell='{key}']").split()) == f"{key}: {note}"
    view.open(index, f"#/cell/{key}", want="cell")
    assert view.all("#app .note", "els => els.map(e => e.textContent)") == [note]
    view.clean()


def test_a_test_can_fail_on_a_wrong_number(view) -> None:
    """The comparison above is not vacuous: a page whose number differs from metrics.json is caught."""
    view.open(REFERENCE, want="run")
    view.page.evaluate("document.querySelector('#summary tbody tr td[data-metric=acc] .v').textContent = '0.999'")
    with pytest.raises(AssertionError):
        check_run_numbers(view, RESULTS, [f"{MODEL}/{t}" for t in TASKS])
    assert math.isclose(float(view.page.inner_text("#summary tbody tr td[data-metric=acc] .v")), 0.999)
