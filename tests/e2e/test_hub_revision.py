"""A hub task's configured revision reaches both the fetch and the prepare step (it used to be dropped unless the
task also named `builtin:`)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.e2e.workflow_helpers import make_workdir, run_snakemake


def shell_commands(out: str) -> list[str]:
    lines = (line.strip().removeprefix("Shell command:").strip() for line in out.splitlines())
    return [line for line in lines if line.startswith("python -m anyjev")]


def test_config_revision_reaches_fetch_and_prepare(tmp_path: Path) -> None:
    config = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "tok"}},
              "tasks": {"banking20": {"source": "hub", "revision": "deadbeef", "n_test": 5, "n_calib": 0},
                        "news": {"source": "hub", "builtin": "newsgroups", "revision": "cafe01", "n_test": 5, "n_calib": 0}},
              "levels": ["raw", "L0"], "published": None}
    work = make_workdir(tmp_path / "w", config, smollm2_dir=tmp_path)
    (work / "tok").mkdir()
    proc = run_snakemake(work, "-n", "-p", "--until", "prepare_task")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    cmds = shell_commands(out)
    fetch = {}
    for c in cmds:
        if " fetch-task " in c:
            argv = shlex.split(c)
            job = json.loads(argv[argv.index("--job") + 1])
            fetch[job["dataset"]] = job
    for dataset, revision in {"banking20": "deadbeef", "newsgroups": "cafe01"}.items():
        # the revision reaches the fetch step, and so the lock it records into (unpinned: resources/lock.yaml)
        assert fetch[dataset] == {"dataset": dataset, "revision": revision, "cache": "resources/hub",
                                  "lock": {"path": "resources/lock.yaml", "pinned": False}}, fetch[dataset]
    prepared = {}
    for c in cmds:
        if " prepare-task " in c:
            argv = shlex.split(c)
            job = json.loads(argv[argv.index("--job") + 1])
            prepared[job["name"]] = job
    assert prepared["banking20"]["revision"] == "deadbeef" and prepared["news"]["revision"] == "cafe01"
    assert re.search(r"resources/hub/newsgroups/meta\.json", out)
