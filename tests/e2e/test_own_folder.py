"""A study in a folder of its own, from an empty folder: the workflow run with `snakemake --directory DIR`, and used
as a module by a Snakefile of the user's own (what `snakedeploy deploy-workflow` writes, with a local path). What
ships with the workflow is found beside it (the default experiment, the published numbers, the vLLM environment's
interpreter); what the run makes stays in its folder, and the committed reference run under results/ is left as it
was. Dry runs of the default config, then one real run each on a `url` model served by an in-process stub of vLLM's
completions endpoint (no vLLM starts)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import QWEN3_TOKENIZER_DIR, require_vllm
from tests.e2e.workflow_helpers import REPO, SNAKEFILE, SNAKEMAKE, env, job_blocks
from tests.stub_http import StubCompletions

PUBLISHED = REPO / "results" / "published" / "anyjev-2026.csv"
# What `snakedeploy deploy-workflow` writes, with the workflow's local path instead of github(...).
MODULE_SNAKEFILE = f"""configfile: "config/config.yaml"


module anyjev:
    snakefile:
        "{SNAKEFILE}"
    config:
        config


use rule * from anyjev
"""


def reference_run() -> dict[str, tuple[int, int]]:
    """The committed reference run's files (size, modification time): what a study elsewhere must not touch."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in (REPO / "results").rglob("*") if p.is_file()}


def snakemake(folder: Path, *args: str, directory: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Snakemake started in FOLDER: on the workflow's Snakefile with --directory FOLDER, or on FOLDER's own Snakefile."""
    where = ["-s", str(SNAKEFILE), "--directory", str(folder)] if directory else []
    return subprocess.run([str(SNAKEMAKE), *where, "--cores", "2", "--printshellcmds", *args], cwd=folder,
                          capture_output=True, text=True, timeout=timeout, env=env())


def shell_jobs(out: str, folder: Path) -> dict[str, list[dict]]:
    """The job each printed `exec python -m anyjev <command>` line hands over, by command: its --job argument is a short
    path to a file in FOLDER (anyjev.jobs), read here."""
    jobs: dict[str, list[dict]] = {}
    for line in out.splitlines():
        line = line.strip().removeprefix("Shell command:").strip()
        if not line.startswith("exec python -m anyjev "):  # every rule's command: the step is the job's process
            continue
        line = line.removeprefix("exec ")
        argv = shlex.split(line.split(" > ")[0])
        path = argv[argv.index("--job") + 1]
        assert re.fullmatch(r"\.anyjev/jobs/[A-Za-z]+Job-[0-9a-f]{16}\.json", path), line
        jobs.setdefault(argv[3], []).append(json.loads((folder / path).read_text()))
    return jobs


@pytest.mark.parametrize("how", ["directory", "module"])
def test_the_default_experiment_plans_from_an_empty_folder(how, tmp_path) -> None:
    require_vllm()  # the default model's server environment ships beside the workflow (scripts/setup_env.sh)
    folder = tmp_path / "study"
    folder.mkdir()
    if how == "module":
        (folder / "Snakefile").write_text(MODULE_SNAKEFILE)
        (folder / "config").mkdir()
        (folder / "config" / "config.yaml").write_text((REPO / "config" / "config.yaml").read_text())
    proc = snakemake(folder, "-n", directory=how == "directory")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    rules = {j["rule"] for j in job_blocks(out)}
    assert {"prepare_model", "score_model", "score_cell", "summary_table", "vs_published", "viewer", "all"} <= rules, rules
    [vs] = [j for j in job_blocks(out) if j["rule"] == "vs_published"]
    assert vs["input"] == f"results/tables/summary.csv, {PUBLISHED}" and vs["output"].startswith("results/tables/")
    jobs = shell_jobs(out, folder)
    [scoring] = jobs["score-model"]
    assert {c["job"]["managed"]["spec"]["python"] for c in scoring["cells"].values()} == {str(REPO / ".venv-server/bin/python")}
    assert jobs["vs-published"] == [{"published": str(PUBLISHED), "summary": "results/tables/summary.csv"}]


@pytest.mark.parametrize("how", ["directory", "module"])
def test_a_study_runs_in_its_own_folder(how, tmp_path, qwen3_tokenizer) -> None:
    folder = tmp_path / "study"
    (folder / "tasks").mkdir(parents=True)
    items = [{"id": f"c{i}", "state": f"Country number {i}.", "question": "Which city is the capital?", "kind": "choice",
              "options": ["Paris", "Rome", "Madrid"], "gold": i % 3} for i in range(6)]
    (folder / "tasks" / "capitals.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    before = reference_run()
    with StubCompletions() as stub, StubCompletions() as other:
        stub.served_names, other.served_names = ["stub"], ["other"]
        other.shift = 2.0  # another model: it favours the first label
        config = {"models": {"stub": {"source": "url", "url": stub.url, "tokenizer": str(QWEN3_TOKENIZER_DIR)},
                             "other": {"source": "url", "url": other.url, "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                  "tasks": {"capitals": {"source": "file", "path": "tasks/capitals.jsonl", "n_test": 4, "n_calib": 2}},
                  "levels": ["raw", "L0"]}
        (folder / "config").mkdir()
        (folder / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        if how == "module":
            (folder / "Snakefile").write_text(MODULE_SNAKEFILE)
        proc = snakemake(folder, directory=how == "directory")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        assert stub.requests and other.requests, "each cell was scored by its stub server"
    summary = pd.read_csv(folder / "results/tables/summary.csv")
    assert list(zip(summary["model"], summary["level"], strict=True)) == [
        ("stub", "raw"), ("stub", "L0"), ("other", "raw"), ("other", "L0")]
    # the differences a paper claims: L0 minus raw in each cell, and one model minus the other on the same items
    differences = pd.read_csv(folder / "results/tables/differences.csv")
    pairs = set(zip(differences["model"], differences["versus_model"], differences["level"], differences["versus_level"],
                    strict=True))
    assert pairs == {("stub", "stub", "L0", "raw"), ("other", "other", "L0", "raw"), ("stub", "other", "raw", "raw"),
                     ("stub", "other", "L0", "L0")}, pairs
    assert ((differences["lo"] <= differences["value"]) & (differences["value"] <= differences["hi"])).all()
    assert "One model minus another" in (folder / "results/tables/differences.md").read_text()
    # from the replicates each cell's evaluation kept: no cell resampled again
    assert "compared 2 cells of results/cells/stub/capitals/scores.jsonl's task: 2 paired as their evaluation " \
           "resampled them, 0 resampled here" in (folder / "logs/tables/differences.log").read_text()
    # the published numbers ship with the workflow: compared, and nothing of this run is among them
    assert (folder / "results/tables/vs_published.md").read_text().startswith("No overlap")
    assert (folder / "results/viewer/index.html").is_file() and (folder / "results/plots/metrics_by_level.png").is_file()
    assert shell_jobs(out, folder)["vs-published"] == [{"published": str(PUBLISHED), "summary": "results/tables/summary.csv"}]
    assert reference_run() == before, "the committed reference run was written to"
