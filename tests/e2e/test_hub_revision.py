"""A hub task's configured revision reaches both the fetch and the prepare step (it used to be dropped unless the
task also named `builtin:`), and a dataset declared in the config reaches them as its declaration."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.e2e.workflow_helpers import make_workdir, run_snakemake
from tests.tiny_tokenizer import write_tiny_tokenizer


def shell_commands(out: str) -> list[str]:
    lines = (line.strip().removeprefix("Shell command:").strip() for line in out.splitlines())
    return [line.removeprefix("exec ") for line in lines if line.startswith("exec python -m anyjev")]


def handed_job(command: str, work: Path) -> dict:
    """The job a printed command hands over: its --job file (in the run's folder), as JSON."""
    argv = shlex.split(command)
    return json.loads((work / argv[argv.index("--job") + 1]).read_text())


def test_config_revision_reaches_fetch_and_prepare(tmp_path: Path) -> None:
    config = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "tok"}},
              "tasks": {"banking20": {"source": "hub", "revision": "deadbeef", "n_test": 5, "n_calib": 0},
                        "news": {"source": "hub", "builtin": "newsgroups", "revision": "cafe01", "n_test": 5, "n_calib": 0},
                        "sst2": {"source": "hub", "n_test": 5, "n_calib": 5, "hub": {
                            "dataset": "stanfordnlp/sst2", "revision": "main", "test_split": "validation", "calib_split": "train",
                            "text_field": "sentence", "label_field": "label", "label_names": ["negative", "positive"],
                            "question": "Is this movie review positive?", "kind": "noul", "yes_labels": ["positive"]}}},
              "levels": ["raw", "L0"], "published": None}
    work = make_workdir(tmp_path / "w", config, smollm2_dir=tmp_path)
    write_tiny_tokenizer(work / "tok")
    proc = run_snakemake(work, "-n", "-p", "--until", "prepare_task")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    cmds = shell_commands(out)
    fetch = {}
    for c in cmds:
        if " fetch-task " in c:
            argv = shlex.split(c)
            folder = argv[argv.index("--out") + 1]
            fetch[Path(folder).name] = handed_job(c, work) | {"out": folder}
    wanted = {"banking20": ("mteb/banking77", "deadbeef", ["train", "test"]), "newsgroups": ("SetFit/20_newsgroups", "cafe01", ["test"]),
              "sst2": ("stanfordnlp/sst2", "main", ["validation", "train"])}
    assert set(fetch) == set(wanted)
    for name, (dataset, revision, splits) in wanted.items():
        # the revision reaches the fetch step, and so the lock it records into (unpinned: resources/lock.yaml)
        assert fetch[name] == {"hub": {"dataset": dataset, "config": None, "revision": revision, "splits": splits},
                               "out": f"resources/hub/{name}", "lock": {"path": "resources/lock.yaml", "pinned": False}}, fetch[name]
    prepared = {}
    for c in cmds:
        if " prepare-task " in c:
            job = handed_job(c, work)
            prepared[job["name"]] = job
    assert prepared["banking20"]["hub"]["revision"] == "deadbeef" and prepared["news"]["hub"]["revision"] == "cafe01"
    assert prepared["news"]["dataset"] == "newsgroups" and prepared["news"]["hub"]["max_chars"] == 2000
    assert prepared["sst2"]["dataset"] == "sst2" and prepared["sst2"]["hub"]["yes_labels"] == ["positive"]
    assert re.search(r"resources/hub/newsgroups/meta\.json", out) and re.search(r"resources/hub/sst2/meta\.json", out)
