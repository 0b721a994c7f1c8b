"""A declared dataset in a local folder, through the workflow's fetch and prepare rules (no server: `--until
prepare_task`): fetched with no revision and pinned by content in the lock file; after an edit of one of its files,
`snakemake -n` shows the fetch and the prepare step rerun because of that file, and the run reads the new content; the
folder restored as it was, its files' older times kept (`cp -p`), reruns them again because its content changed, and
the run reads the restored content; a file touched without a change leaves the workflow up to date after one run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.e2e.workflow_helpers import env, job_blocks, make_workdir, snakemake_cmd
from tests.multiple_choice_repos import HELLASWAG, as_fixture_task, hellaswag_repo, worked_examples
from tests.tiny_tokenizer import write_tiny_tokenizer


def snakemake(work: Path, *args: str) -> str:
    """Run Snakemake in WORK (datasets' cache inside it, no hub); its output, after checking it succeeded."""
    extra = {"HF_DATASETS_CACHE": str(work / "hf-datasets"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(snakemake_cmd(work, "--until", "prepare_task", *args), capture_output=True, text=True,
                          timeout=600, env=env() | extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def planned(work: Path) -> dict[str, dict]:
    """The jobs a dry run plans, by rule."""
    return {job["rule"]: job for job in job_blocks(snakemake(work, "-n"))}


def test_a_local_folder_is_fetched_again_when_a_file_changes(tmp_path: Path) -> None:
    [example] = [t for t in worked_examples().values() if t["hub"]["dataset"] == "Rowan/hellaswag"]
    work = tmp_path / "w"
    task = as_fixture_task(example, work, local=True)
    folder = Path(task["hub"]["dataset"])
    task["hub"]["dataset"] = f"./{folder.relative_to(work)}"  # relative to the directory the workflow runs in
    config = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "tok"}}, "tasks": {"hs": task},
              "levels": ["raw", "L0"], "published": None}
    make_workdir(work, config, smollm2_dir=tmp_path)
    write_tiny_tokenizer(work / "tok")
    snakemake(work)
    meta = json.loads((work / "resources/hub/hs/meta.json").read_text())
    lock = yaml.safe_load((work / "resources/lock.yaml").read_text())["datasets"][task["hub"]["dataset"]]
    assert meta["revision"] is None and lock["content_sha256"] == meta["local"]["content_sha256"]
    assert not {"fetch_hub_task", "prepare_task"} & set(planned(work)), "nothing to do once fetched and prepared"

    kept = tmp_path / "kept"
    shutil.copytree(folder, kept)  # copy2: the files' times are kept, as cp -p, tar and rsync -t keep them
    states_before = (work / "resources/tasks/hs.jsonl").read_text()
    changed = [*HELLASWAG[:5], ("Raking leaves", "A man gathers leaves by the fence.", "he", *HELLASWAG[5][3:]), *HELLASWAG[6:]]
    hellaswag_repo(folder, changed)
    jobs = planned(work)
    assert {"fetch_hub_task", "prepare_task"} <= set(jobs), jobs
    assert "Updated input files" in jobs["fetch_hub_task"]["reason"] and "validation-00000-of-00001.parquet" in jobs[
        "fetch_hub_task"]["reason"], jobs["fetch_hub_task"]
    snakemake(work)
    states = {json.loads(line)["id"]: json.loads(line)["state"] for line in
              (work / "resources/tasks/hs.jsonl").read_text().splitlines()[1:]}
    assert states["validation-5"] == "A man gathers leaves by the fence. he"
    after = json.loads((work / "resources/hub/hs/meta.json").read_text())["local"]["content_sha256"]
    assert after != meta["local"]["content_sha256"]
    assert yaml.safe_load((work / "resources/lock.yaml").read_text())["datasets"][task["hub"]["dataset"]]["content_sha256"] == after

    # restored with its older times (older than the cache): no input is newer, but the content hash is a param
    shutil.rmtree(folder)
    shutil.copytree(kept, folder)
    jobs = planned(work)
    assert {"fetch_hub_task", "prepare_task"} <= set(jobs), jobs
    assert "Params have changed" in jobs["fetch_hub_task"]["reason"], jobs["fetch_hub_task"]
    snakemake(work)
    assert (work / "resources/tasks/hs.jsonl").read_text() == states_before
    after = json.loads((work / "resources/hub/hs/meta.json").read_text())["local"]["content_sha256"]
    assert after == meta["local"]["content_sha256"]

    # touched, not changed: Snakemake compares a small input by its checksum and reruns nothing; a larger one by its
    # time, and the fetch then keeps its cache and makes it newer (tests/unit/test_hub_local.py). Either way one run
    # leaves the workflow up to date, at the same content.
    parquet = folder / "data" / "test-00000-of-00001.parquet"
    os.utime(parquet)  # now: after the cache was written
    snakemake(work)
    assert json.loads((work / "resources/hub/hs/meta.json").read_text())["local"]["content_sha256"] == after
    assert not {"fetch_hub_task", "prepare_task"} & set(planned(work))
