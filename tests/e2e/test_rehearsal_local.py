"""The CPU dress rehearsal of config/paper.yaml, run locally (`snakemake --cores 2 --keep-going`): what the SLURM
rehearsal (tests/e2e/test_rehearsal_slurm.py) asserts on a cluster, without the cluster.

tests/e2e/rehearsal.py builds the fixtures (hub-shaped data read by the real `datasets` library, three random-weight
Qwen3 stand-ins on the real Qwen3 tokenizer, paper.yaml's config changed only where a CPU needs it, and a fourth
`url` model on a server without the pinned logprobs mode). Checked: one server start per model, the url cell fails
alone naming the missing label ids, every other cell is scored and evaluated, `anyjev plan` counts exactly what
the run sent (prompts and prompt tokens per cell), and no vLLM process is left.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SERVER_PYTHON, require_vllm
from tests.e2e import rehearsal as R
from tests.e2e.workflow_helpers import env, job_blocks, leftover_vllm, run_snakemake

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def prepare_rehearsal(root: Path, *, chunk_items: int = 4) -> dict:
    """Stand-in models, hub repos and a run directory with the hub cache fetched; the config is written once the
    raw server's URL is known (`write_rehearsal_config`)."""
    t0 = time.monotonic()
    models = R.build_standins(root / "models")
    repos = R.write_hub_repos(root / "hub-repos")
    work = root / "run"
    R.prefetch_hub_tasks(work, repos, root / "hf-datasets-cache")
    published = R.copy_published(work)
    print(f"\n[rehearsal] fixtures (3 stand-ins, 3 hub repos, fetch through datasets): {time.monotonic() - t0:.1f} s")
    return {"root": root, "models": models, "work": work, "published": published, "chunk_items": chunk_items}


def write_rehearsal_config(fx: dict, raw_url: str) -> Path:
    config = R.rehearsal_config(fx["models"], url=raw_url, url_tokenizer=fx["models"][R.MODELS[0]], published=fx["published"],
                                server_python=str(SERVER_PYTHON), chunk_items=fx["chunk_items"])
    return R.write_workdir(fx["work"], config)


def url_label_ids(fx: dict) -> list[int]:
    """The label ids the url cell asks for (its task's first item, rendered as scoring does)."""
    from anyjev.data.tasks import load_task_file
    from anyjev.decision.labels import LabelChecker
    from anyjev.run.cell import load_tokenizer
    from anyjev.run.scoring import prepare_item

    tok = load_tokenizer(fx["models"][R.MODELS[0]])
    item = load_task_file(fx["work"] / f"resources/tasks/{R.URL_TASK}.jsonl").items[0]
    return prepare_item(tok, LabelChecker(tok), item, "", profile="published").label_ids


@pytest.fixture(scope="module")
def local_rehearsal(tmp_path_factory):
    require_vllm()
    fx = prepare_rehearsal(tmp_path_factory.mktemp("rehearsal"))
    t0 = time.monotonic()
    with R.raw_server_for(fx["models"][R.MODELS[0]], fx["root"] / "raw-server.log") as raw:
        raw_start = time.monotonic() - t0
        write_rehearsal_config(fx, raw["url"])
        t0 = time.monotonic()
        proc = run_snakemake(fx["work"], "--keep-going")
        seconds = time.monotonic() - t0
    (fx["root"] / "snakemake.out").write_text(proc.stdout + proc.stderr)
    print(f"\n[rehearsal] raw-logprobs server start: {raw_start:.0f} s; local run (--cores 2): {seconds:.0f} s wall")
    return fx | {"proc": proc, "out": proc.stdout + proc.stderr, "seconds": seconds}


def failed_jobs(out: str) -> list[tuple[str, str]]:
    """(rule, first output) of each job Snakemake reported as failed ("Error in rule ...:" blocks)."""
    return re.findall(r"^Error in rule (\w+):\n(?:    .*\n)*?    output: ([^,\n]+)", out, re.M)


def check_url_cell_fails_alone(fx: dict, out: str) -> None:
    """Only the url model's cell failed, and its log names the label ids the raw-mode server did not return."""
    failed = failed_jobs(out)
    assert failed == [("score_cell", f"results/cells/{R.URL_MODEL}/{R.URL_TASK}/scores.jsonl")], (failed, out[-6000:])
    log = (fx["work"] / f"logs/score/{R.URL_MODEL}/{R.URL_TASK}.log").read_text()
    m = re.search(r"Missing label ids: ([^.]*)\.", log)
    assert m, log[-3000:]
    named = [int(i) for i in re.findall(r"(\d+) \('", m.group(1))]
    assert named and set(named) <= set(url_label_ids(fx)), (named, log[-2000:])
    assert "canary request" in log and "LabelTokenError" in log, log[-2000:]
    assert not (fx["work"] / f"results/cells/{R.URL_MODEL}/{R.URL_TASK}/scores.jsonl").exists()


def check_cells_scored(work: Path) -> None:
    for model in R.MODELS:
        for task in R.TASKS:
            cell = work / f"results/cells/{model}/{task}"
            for name in ("scores.jsonl", "provenance.json", "metrics.json", "predictions.csv"):
                assert (cell / name).is_file(), f"{cell / name} missing"
            counts = R.cell_counts(work, model, task)
            assert counts["items"] == R.N_TEST + R.N_CALIB and counts["resumed"] == 0, (model, task, counts)


def server_starts(work: Path) -> dict[str, int]:
    return {m: (work / f"logs/servers/{m}.log").read_text().count("starting server") for m in R.MODELS}


def run_plan(work: Path) -> dict:
    """`python -m anyjev plan --json` in the run directory (its hub cache is there), as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "anyjev", "plan", "--config", "config/config.yaml", "--json"], cwd=work,
                          capture_output=True, text=True, timeout=600, env=env() | {"PYTHONPATH": str(R.REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def compare_plan(work: Path) -> list[dict]:
    """`anyjev plan` on the run's config next to what each cell sent (provenance.json counts)."""
    plan = run_plan(work)
    rows = []
    for cell in plan["cells"]:
        if cell["model"] == R.URL_MODEL:
            continue
        sent = R.cell_counts(work, cell["model"], cell["task"])
        rows.append({"cell": f"{cell['model']}/{cell['task']}", "plan": (cell["items"], cell["prompts"], cell["prompt_tokens"]),
                     "run": (sent["items"], sent["prompts"], sent["prompt_tokens"]), "estimate": cell["estimate"]})
    return rows


def test_local_rehearsal(local_rehearsal):
    fx, out = local_rehearsal, local_rehearsal["out"]
    work = fx["work"]
    assert fx["proc"].returncode != 0, "the url cell must fail the run"
    check_url_cell_fails_alone(fx, out)
    check_cells_scored(work)
    assert server_starts(work) == dict.fromkeys(R.MODELS, 1)
    rows = compare_plan(work)
    print("\n[rehearsal] plan vs run (items, prompts, prompt tokens):\n  " + "\n  ".join(
        f"{r['cell']}: plan {r['plan']} run {r['run']}" for r in rows))
    assert len(rows) == 9 and all(r["estimate"] is None for r in rows)
    assert [r["plan"] for r in rows] == [r["run"] for r in rows]
    for model in R.MODELS:
        for task in R.TASKS:
            prov = json.loads((work / f"results/cells/{model}/{task}/provenance.json").read_text())
            c = prov["counts"]
            print(f"[rehearsal] {model}/{task}: {c['prompts']} prompts ({c['prompt_tokens']} tokens) in {prov['seconds']} s "
                  f"= {c['prompts'] / prov['seconds']:.1f} prompts/s; server start {prov['server'].get('start_seconds')} s")
    jobs = job_blocks(out)
    print("[rehearsal] jobs: " + ", ".join(sorted({j["rule"] for j in jobs})))
    assert leftover_vllm(str(fx["root"])) == []
