"""After a failed fetch, the run's failed-cell report quotes the fetch's error and names its log, instead of saying the
cell has not run (issue 32, item 5): the docs' own hub example (docs/configuration.md, sst2) run offline. The fetch is
the only job (the model is a `url` one, nothing else starts), so the run ends in seconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.e2e.workflow_helpers import SNAKEFILE, SNAKEMAKE, env
from tests.tiny_tokenizer import write_tiny_tokenizer

SST2 = {"dataset": "stanfordnlp/sst2", "revision": "main", "splits": ["validation"], "text_field": "sentence",
        "label_field": "label", "question": "Is this movie review positive?", "kind": "noul", "yes_labels": ["positive"]}


def test_a_failed_fetch_is_what_the_failed_cell_report_says(tmp_path: Path, fault_seen) -> None:
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    write_tiny_tokenizer(work / "tok")
    config = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "tok"}},
              "tasks": {"sst2": {"source": "hub", "n_test": 5, "n_calib": 5, "hub": SST2}}, "levels": ["raw", "L0"],
              "published": None}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    offline = env() | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--cores", "1", "--keep-going"],
                          capture_output=True, text=True, timeout=900, env=offline)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    said = next((line.strip() for line in out.splitlines() if line.startswith("  m/sst2: ")), None)
    assert said is not None, out[-3000:]
    fault_seen(said)
    assert said.startswith("m/sst2: anyjev fetch-task: TaskDataError: resources/hub/sst2:fetch:"), said
    assert said.endswith("(log: logs/fetch_hub_task/sst2.log)") and "has not run" not in said, said
    summary = (work / "results" / "tables" / "summary.md").read_text()
    assert "anyjev fetch-task: TaskDataError" in summary and "`logs/fetch_hub_task/sst2.log`" in summary
    assert not os.path.exists(work / "results" / "cells" / "m" / "sst2" / "scores.jsonl")
